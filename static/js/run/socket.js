// The run's socket (/ws/runs/<id>/): the snapshot and events it brings, the replies' answers, and
// reconnecting. Every event carries a seq; reconnecting asks for events after the last one seen
// (R-UI2), so none is shown twice.
import { byId } from "../lib/dom.js";
import { RETRY_FIRST_MS, nextRetryMs, socketUrl } from "../lib/sockets.js";
import { renderers } from "./events.js";
import { handleAck, handleError, showWaitingQuestion, updateControls } from "./reply.js";
import { addWarning } from "./result.js";
import { page, state } from "./state.js";
import { setStatus } from "./status.js";
import { showUsage } from "./usage.js";

const connection = byId("connection");

function handle(message) {
  if (message.type === "snapshot") {
    if (state.liveFromSeq === Infinity) state.liveFromSeq = message.last_seq;
    setStatus(message.run.status, message.run.repair_round);
    showUsage(message.run);
    (message.run.warnings || []).forEach(addWarning);
  } else if (message.type === "event") {
    if (message.seq <= state.lastSeq) return;
    state.lastSeq = message.seq;
    const render = renderers[message.kind];
    if (render) render(message);
    updateControls();
    if (message.seq === state.liveFromSeq) showWaitingQuestion();
  } else if (message.type === "ack") {
    handleAck(message);
  } else if (message.type === "error") {
    handleError(message);
  }
}

function setConnection(text, live) {
  connection.textContent = text;
  connection.classList.toggle("live", Boolean(live));
}

export function connect() {
  const socket = new WebSocket(socketUrl(page.dataset.socketPath + "?after_seq=" + state.lastSeq));
  state.socket = socket;
  socket.addEventListener("open", () => {
    state.retryMs = RETRY_FIRST_MS;
    setConnection("Live", true);
    updateControls();
  });
  socket.addEventListener("message", (event) => handle(JSON.parse(event.data)));
  socket.addEventListener("close", (event) => {
    state.sending = false;
    updateControls();
    if (event.code === 1000) {
      setConnection("This run has ended.");
    } else if (event.code === 4401) {
      window.location.assign(page.dataset.loginUrl + "?next=" + encodeURIComponent(window.location.pathname));
    } else if (event.code === 4404) {
      setConnection("This run is not available.");
    } else if (event.code === 1001) {
      // The server is stopping (a restart, R-OP10): another one answers at once; the events
      // after state.lastSeq come from there, none twice.
      setConnection("The server restarted. Reconnecting…");
      state.retryMs = RETRY_FIRST_MS;
      window.setTimeout(connect, 0);
    } else {
      // 4429: this user has too many live connections open; one may close meanwhile.
      setConnection(event.code === 4429 ? "Too many open pages. Retrying…" : "Connection lost. Reconnecting…");
      window.setTimeout(connect, state.retryMs);
      state.retryMs = nextRetryMs(state.retryMs);
    }
  });
}
