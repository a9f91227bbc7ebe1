// A form with data-confirm asks before it is sent (revoking a token, deleting a webhook): the
// question is the attribute's text; Cancel sends nothing.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
