// Building the page's elements: everything an agent or a user wrote goes in as text, never HTML.

export const byId = (id) => document.getElementById(id);

export function node(tag, className, text) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined) element.textContent = text;
  return element;
}
