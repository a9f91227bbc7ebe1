// On every page of a signed-in user: the count of questions waiting for them, kept live over one
// user-level socket (/ws/inbox/), shown in the nav bar and the tab title; with the user's
// permission, a browser notification for each new question while the tab is hidden (R-NT4).
// Other scripts hear every update as an "inbox:update" event on document.
import { questionKey as keyOf } from "./lib/questions.js";
import { RETRY_FIRST_MS, nextRetryMs, socketUrl } from "./lib/sockets.js";

const socketPath = document.body.dataset.inboxSocket;
const link = document.getElementById("inbox-link");
const badge = document.getElementById("inbox-count");
const baseTitle = document.title;
let seen = null; // keys of the questions already known; null until the first message
let retryMs = RETRY_FIRST_MS;

function showCount(count) {
  badge.textContent = String(count);
  badge.hidden = count === 0;
  link.setAttribute("aria-label", count === 1 ? "Inbox, 1 question waiting" : "Inbox, " + count + " questions waiting");
  document.title = count > 0 ? "(" + count + ") " + baseTitle : baseTitle;
}

function announce(questions) {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  if (document.visibilityState !== "hidden") return;
  questions.forEach((question) => {
    const notification = new Notification(question.skill + " asks", { body: question.prompt, tag: keyOf(question) });
    notification.addEventListener("click", () => {
      window.focus();
      window.location.assign(question.url + "#reply");
    });
  });
}

function handle(message) {
  if (message.type !== "inbox") return;
  showCount(message.count);
  if (seen !== null) announce(message.questions.filter((question) => !seen.has(keyOf(question))));
  seen = new Set(message.questions.map(keyOf));
  document.dispatchEvent(new CustomEvent("inbox:update", { detail: message }));
}

function connect() {
  const socket = new WebSocket(socketUrl(socketPath));
  socket.addEventListener("open", () => {
    retryMs = RETRY_FIRST_MS;
  });
  socket.addEventListener("message", (event) => handle(JSON.parse(event.data)));
  socket.addEventListener("close", (event) => {
    if (event.code === 4401) return; // signed out: the next page load goes to the login form
    window.setTimeout(connect, retryMs);
    retryMs = nextRetryMs(retryMs);
  });
}

if (socketPath) {
  showCount(Number(badge.textContent) || 0);
  connect();
}
