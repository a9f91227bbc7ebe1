// The pages' requests to the service's own API: same-origin cookies, JSON answers, the CSRF token
// on posts.

export function getJson(url) {
  return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
}

// A form body (fields and files) posted with the page's CSRF token.
export function postForm(url, body, csrfToken) {
  return fetch(url, {
    method: "POST",
    body: body,
    credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": csrfToken },
  });
}
