// The pages' requests to the service's own API: same-origin cookies, JSON answers, the CSRF token
// on posts, and how a refused request is told to the reader.

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

// An API error ({code, message}: an answer's `detail`, or the run socket's error) as a page shows it.
export const errorText = (error) => error.message + " (" + error.code + ")";

// An API answer read: {body} when the request succeeded, else {error} with the API's code and
// message. An answer that is not the API's JSON (a proxy's 502 page, Django's CSRF failure page,
// the login page once the session has ended) is an error: `failure` and the HTTP status.
export async function readAnswer(response, failure) {
  const body = await response.json().catch(() => null);
  if (response.ok && body) return { body: body };
  return { error: (body && body.detail) || { code: "HTTP_" + response.status, message: failure } };
}
