// The pages' WebSocket connections: the address of a path on this host, and the back-off between
// retries after a lost connection.

export const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 5000;

export function socketUrl(path) {
  const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  return scheme + window.location.host + path;
}

export const nextRetryMs = (retryMs) => Math.min(retryMs * 2, RETRY_MAX_MS);
