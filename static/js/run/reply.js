// Replying and cancelling: the reply card (#reply-form) with the question's quick replies and
// its kind's controls (question-forms.js), replies over the socket, files over the file-reply
// path (R-UP6), the Cancel button, and what the server answers to each.
import { byId, node } from "../lib/dom.js";
import { errorText, postForm, readAnswer } from "../lib/http.js";
import { build as buildQuestionForm } from "../question-forms.js";
import { addNote, conversation } from "./conversation.js";
import { page, send, socketOpen, state, TERMINAL } from "./state.js";

const cancelButton = byId("cancel-button");
const replyForm = byId("reply-form");
const replyText = byId("reply-text");
const replyError = byId("reply-error");
const quickReplies = byId("quick-replies");
const kindForm = byId("kind-form");
const replyTextBlock = byId("reply-text-block");
const replySend = byId("reply-send");
const FILE_LIMITS = JSON.parse(page.dataset.replyFileLimits);
// One key per page and question: resending after a dropped connection is answered once.
const PAGE_NONCE = Date.now().toString(36) + Math.random().toString(36).slice(2);
const idempotencyKey = (pending) => "web-" + PAGE_NONCE + "-" + pending.interaction_id;
let focusedForLink = false; // the #reply link's focus is given once, not at every question

export function updateControls() {
  const waiting = state.status === "waiting_user" && state.pending;
  const wasHidden = replyForm.hidden;
  replyForm.hidden = !waiting;
  // Entries scrolled into view stop above the reply card, which sticks to the bottom.
  conversation.style.setProperty("--reply-height", waiting ? replyForm.offsetHeight + "px" : "0px");
  lockReplyControls();
  cancelButton.disabled = !socketOpen() || TERMINAL.includes(state.status);
  if (!waiting) return;
  if (wasHidden || quickReplies.dataset.interaction !== String(state.pending.interaction_id)) {
    renderQuickReplies(state.pending);
    renderKindForm(state.pending);
    lockReplyControls();
    replyError.hidden = true;
    conversation.style.setProperty("--reply-height", replyForm.offsetHeight + "px");
    if (state.followingEdge && conversation.lastElementChild) conversation.lastElementChild.scrollIntoView({ block: "nearest" });
    // Move focus for a question that just arrived, never while history replays; but a person
    // who came here to answer (the inbox's and the email's links end in #reply) gets it at once.
    const cameToAnswer = window.location.hash === "#reply" && !focusedForLink;
    if (cameToAnswer || (state.lastSeq > state.liveFromSeq && document.activeElement === document.body)) {
      focusedForLink = true;
      // The kind's own first control (a form's first field, Yes), else the text box.
      const first = kindForm.querySelector("input, textarea, button") || (replyTextBlock.hidden ? quickReplies.querySelector("button") : replyText);
      if (first) first.focus();
    }
  }
}

function lockReplyControls() {
  replyForm.querySelectorAll("button, textarea").forEach((control) => {
    control.disabled = state.sending || !socketOpen();
  });
}

function renderQuickReplies(pending) {
  quickReplies.textContent = "";
  quickReplies.dataset.interaction = String(pending.interaction_id);
  (pending.options || []).forEach((option) => {
    const button = node("button", "quick-reply", optionCaption(option));
    button.type = "button";
    button.addEventListener("click", () => sendReply(option.value));
    quickReplies.appendChild(button);
  });
  quickReplies.hidden = !(pending.options || []).length;
}

// The kind's own controls above the text box; the box stays unless only the options may answer.
function renderKindForm(pending) {
  const built = buildQuestionForm(pending, { send: sendReply, sendFiles: sendFiles, limits: FILE_LIMITS });
  kindForm.textContent = "";
  if (built.element) kindForm.appendChild(built.element);
  replyForm.classList.toggle("has-kind-form", Boolean(built.element));
  replyTextBlock.hidden = replySend.hidden = !built.allowsText;
  replyTextBlock.querySelector("label").textContent = built.textLabel;
  replySend.textContent = pending.kind === "upload_files" ? "Send without files" : "Send";
}

// Files go through the file-reply path (R-UP6), with the text box's words as their message.
async function sendFiles(files) {
  if (!state.pending || state.sending) return;
  const body = new FormData();
  const metadata = { interaction_id: state.pending.interaction_id, idempotency_key: idempotencyKey(state.pending), text: replyText.value.trim() };
  body.append("metadata", JSON.stringify(metadata));
  files.forEach((file) => body.append("files", file, file.name));
  state.sending = true;
  updateControls();
  try {
    const response = await postForm(page.dataset.replyFilesUrl, body, replyForm.elements.csrfmiddlewaretoken.value);
    const { error } = await readAnswer(response, "The files could not be sent.");
    if (error) return handleError(error);
    handleAck({ action: "reply" });
  } catch (problem) {
    handleError({ code: "NETWORK", message: "The files could not be sent; try again." });
  }
}

// The label, and beside it the value the button sends whenever the two differ (R-FS4).
function optionCaption(option) {
  const sent = typeof option.value === "string" ? option.value : JSON.stringify(option.value);
  return sent === option.label ? option.label : option.label + " → " + sent;
}

function sendReply(response) {
  if (!state.pending || state.sending) return;
  state.sending = send({ type: "reply", interaction_id: state.pending.interaction_id, response: response, idempotency_key: idempotencyKey(state.pending) });
  updateControls();
}

export function handleAck(message) {
  if (message.action === "reply") {
    state.sending = false;
    replyText.value = "";
  } else if (!message.accepted) {
    addNote("", "The run had already ended.");
  }
  updateControls();
}

// A question waiting when the page opens is what the reader came for: once the history has
// replayed, it is brought into sight above the reply card (the only scroll on load).
export function showWaitingQuestion() {
  if (state.status !== "waiting_user" || !state.pending || !conversation.lastElementChild) return;
  conversation.lastElementChild.scrollIntoView({ block: "nearest" });
}

export function handleError(error) {
  state.sending = false;
  replyError.textContent = errorText(error);
  replyError.hidden = false;
  updateControls();
}

// The reply card's text box and the Cancel button.
export function startReplies() {
  replyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = replyText.value.trim();
    if (text) sendReply(text);
  });
  replyText.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      replyForm.requestSubmit();
    }
  });
  // Sent over the socket, not as a form: confirm.js does not see it, the question is the same.
  cancelButton.addEventListener("click", () => {
    if (window.confirm(cancelButton.dataset.confirm)) send({ type: "cancel" });
  });
}
