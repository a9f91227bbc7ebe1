// The inbox page (R-NT4): answers are posted in place (the page stays), questions arriving or
// answered elsewhere appear and disappear live, and the notification permission is asked for
// only when the user presses the button (browsers require a user gesture).
import { node } from "./lib/dom.js";
import { errorText, postForm, readAnswer } from "./lib/http.js";
import { questionKey as keyOf } from "./lib/questions.js";
import { formatWait, localStamp, localizeTimes } from "./lib/times.js";
import { build as buildQuestionForm } from "./question-forms.js";

const page = document.getElementById("inbox-page");
const list = document.getElementById("questions");
const empty = document.getElementById("inbox-empty");
const template = document.getElementById("question-template");
const notifyButton = document.getElementById("notify-button");
const notifyState = document.getElementById("notify-state");
const sentAnswers = document.getElementById("sent-answers");
const FILE_LIMITS = page ? JSON.parse(page.dataset.replyFileLimits) : null;
const ANSWERED_FADE_MS = 1500;
const SENT_SHOWN = 5;

function refreshEmpty() {
  empty.hidden = list.querySelector(".question:not(.answered)") !== null;
}

// Times in the reader's zone; how long each question has waited, kept current.
function showTimes() {
  localizeTimes(page.querySelector("#questions"));
  page.querySelectorAll("#questions .question").forEach((item) => {
    const asked = item.querySelector(".question-asked");
    if (asked.dateTime) item.querySelector(".question-waited").textContent = ", waiting " + formatWait(Date.now() - Date.parse(asked.dateTime));
  });
}

function deadlineText(question) {
  if (!question.deadline_at) return "";
  const at = localStamp(new Date(question.deadline_at), false);
  return question.on_deadline === "auto_decide"
    ? "Unanswered by " + at + ", the agent decides by itself."
    : "Unanswered by " + at + ", the run fails.";
}

function card(question) {
  const item = template.content.firstElementChild.cloneNode(true);
  item.dataset.key = keyOf(question);
  item.querySelector(".question-skill").textContent = question.skill;
  item.querySelector(".question-id").textContent = question.short_id;
  item.querySelectorAll(".question-run, .question-open").forEach((link) => (link.href = question.url + "#reply"));
  item.querySelector(".question-asked").dateTime = question.asked_at;
  const values = item.querySelector(".question-values");
  values.textContent = question.values.join(" · ");
  values.hidden = !question.values.length;
  item.querySelector(".said-text").textContent = question.said_before || "";
  item.querySelector(".question-said").hidden = !question.said_before;
  const deadline = item.querySelector(".question-deadline");
  deadline.textContent = deadlineText(question);
  deadline.hidden = !question.deadline_at;
  item.querySelector(".cancel-form").action = page.dataset.cancelBase.replace("00000000-0000-0000-0000-000000000000", question.request_id);
  item.querySelector(".question-prompt").textContent = question.prompt;
  item.querySelector("[name=request_id]").value = question.request_id;
  item.querySelector("[name=interaction_id]").value = String(question.interaction_id);
  const textarea = item.querySelector("textarea");
  textarea.id = "answer-" + question.request_id;
  item.querySelector("label").htmlFor = textarea.id;
  const options = item.querySelector(".quick-replies");
  // Each caption already shows the value the option sends when it differs from the label.
  question.options.forEach((caption, index) => {
    const button = node("button", "quick-reply", caption);
    Object.assign(button, { type: "submit", name: "option", value: String(index), formNoValidate: true });
    options.appendChild(button);
  });
  addKindControls(item, question.question);
  return item;
}

// The controls the question's kind calls for (question-forms.js): their structured reply goes
// to the inbox as JSON in `reply`, their files through the file-reply path.
function addKindControls(item, question) {
  const form = item.querySelector(".answer-form");
  const requestId = form.elements.request_id.value;
  const built = buildQuestionForm(question, {
    send: (response, caption) => {
      const data = new FormData(form);
      data.delete("response");
      data.set("reply", JSON.stringify(response));
      postAnswer(item, form, { url: form.action, body: data }, caption);
    },
    sendFiles: (files) => {
      const data = new FormData();
      const text = form.elements.response.value.trim();
      data.append("metadata", JSON.stringify({ interaction_id: question.interaction_id, text: text }));
      files.forEach((file) => data.append("files", file, file.name));
      const url = page.dataset.replyFilesBase.replace("00000000-0000-0000-0000-000000000000", requestId);
      postAnswer(item, form, { url: url, body: data }, files.map((file) => file.name).join(", "));
    },
    limits: FILE_LIMITS,
  });
  if (built.element) item.querySelector(".kind-form-slot").appendChild(built.element);
  item.querySelector(".answer-row").hidden = !built.allowsText;
  item.querySelector(".answer-label").textContent = built.textLabel;
  form.elements.response.placeholder = built.shortLabel;
}

// The list follows the socket: new questions are added (oldest first), gone ones removed;
// a card being answered here is left alone (the socket may report the answer before the
// answer's own response arrives).
function followInbox(event) {
  const current = new Map(event.detail.questions.map((question) => [keyOf(question), question]));
  list.querySelectorAll(".question").forEach((item) => {
    const mine = item.classList.contains("sending") || item.classList.contains("answered");
    if (!current.has(item.dataset.key) && !mine) item.remove();
  });
  const shown = new Set(Array.from(list.querySelectorAll(".question"), (item) => item.dataset.key));
  current.forEach((question, key) => {
    if (!shown.has(key)) list.appendChild(card(question));
  });
  showTimes();
  refreshEmpty();
}

// Each answer sent stays confirmed at the top of the page (the newest few), after its card goes.
function confirmSent(item, answer) {
  const run = item.querySelector(".question-run");
  const entry = node("li", "message success", "Answer sent to " + run.textContent.trim() + ": “" + answer + "”. The run goes on. ");
  const open = entry.appendChild(node("a", null, "Open the run"));
  open.href = run.getAttribute("href").replace(/#reply$/, "");
  sentAnswers.prepend(entry);
  while (sentAnswers.children.length > SENT_SHOWN) sentAnswers.lastElementChild.remove();
}

// One answer posted in place: the card says it was taken and goes, or shows why not.
async function postAnswer(item, form, request, answer) {
  const error = form.querySelector(".answer-error");
  const buttons = item.querySelectorAll(".answer-form button");
  buttons.forEach((button) => (button.disabled = true));
  item.classList.add("sending");
  error.hidden = true;
  try {
    const response = await postForm(request.url, request.body, form.elements.csrfmiddlewaretoken.value);
    const { error: refused } = await readAnswer(response, "The answer could not be sent.");
    if (refused) throw new Error(errorText(refused));
    item.classList.replace("sending", "answered");
    confirmSent(item, answer);
    form.replaceWith(node("p", "answered-note", "Answered. The run goes on."));
    window.setTimeout(() => {
      item.remove();
      refreshEmpty();
    }, ANSWERED_FADE_MS);
    refreshEmpty();
  } catch (problem) {
    error.textContent = problem.message || "The answer could not be sent; try again.";
    error.hidden = false;
    item.classList.remove("sending");
    buttons.forEach((button) => (button.disabled = false));
  }
}

function submitAnswer(event) {
  const form = event.target;
  // Cancelling is posted as a plain form, asked first by confirm.js (data-confirm): the page comes
  // back with what happened.
  if (form.classList.contains("cancel-form")) return;
  event.preventDefault();
  const item = form.closest(".question");
  const submitter = event.submitter;
  const quick = submitter && submitter.classList.contains("quick-reply");
  postAnswer(item, form, { url: form.action, body: new FormData(form, submitter) }, quick ? submitter.textContent : form.elements.response.value.trim());
}

function sendOnEnter(event) {
  if (event.target.matches("textarea[name=response]") && event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    event.target.form.requestSubmit();
  }
}

function showPermission() {
  if (!("Notification" in window)) return;
  const permission = Notification.permission;
  notifyButton.hidden = permission !== "default";
  notifyState.hidden = permission === "default";
  notifyState.textContent =
    permission === "granted"
      ? "This device will show a notification when a new question arrives while the tab is in the background."
      : "Notifications are blocked for this site; allow them in the browser's site settings to get them.";
}

if (page) {
  document.addEventListener("inbox:update", followInbox);
  list.addEventListener("submit", submitAnswer);
  list.addEventListener("keydown", sendOnEnter);
  list.querySelectorAll(".question").forEach((item) => {
    addKindControls(item, JSON.parse(item.querySelector("script[type='application/json']").textContent));
  });
  showTimes();
  window.setInterval(showTimes, 30000);
  notifyButton.addEventListener("click", async () => {
    await Notification.requestPermission();
    showPermission();
  });
  showPermission();
}
