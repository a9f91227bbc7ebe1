// What the run page's modules share: the page element and its data attributes, what the page
// knows of the run so far, and the socket replies and cancels go out on.
import { RETRY_FIRST_MS } from "../lib/sockets.js";

export const page = document.getElementById("run-page");
export const TERMINAL = ["succeeded", "failed", "canceled"];

export const state = {
  lastSeq: 0,
  liveFromSeq: Infinity, // events after this seq happened while the page was open
  status: null,
  pending: null,
  sending: false,
  socket: null,
  retryMs: RETRY_FIRST_MS,
  warnings: new Set(),
  turns: new Map(), // attempt -> the turn's activity block (R-AC5)
  usage: null,
  artifacts: new Set(), // the result's artifact paths: values naming one become links
  waitingNote: null, // the "waiting for your answer" note, until the answer comes
  createdAt: page ? Date.parse(page.dataset.createdAt) : null,
  finishedAt: page && page.dataset.finishedAt ? Date.parse(page.dataset.finishedAt) : null,
  followingEdge: false, // whether the last entry kept the reader at the live edge
};

export function socketOpen() {
  return state.socket && state.socket.readyState === WebSocket.OPEN;
}

// A message to the server over the run's socket; false when it is not open.
export function send(message) {
  if (!socketOpen()) return false;
  state.socket.send(JSON.stringify(message));
  return true;
}
