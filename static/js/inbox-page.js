// The inbox page (R-NT4): answers are posted in place (the page stays), questions arriving or
// answered elsewhere appear and disappear live, and the notification permission is asked for
// only when the user presses the button (browsers require a user gesture).
(function () {
  "use strict";

  const page = document.getElementById("inbox-page");
  if (!page) return;

  const list = document.getElementById("questions");
  const empty = document.getElementById("inbox-empty");
  const template = document.getElementById("question-template");
  const notifyButton = document.getElementById("notify-button");
  const notifyState = document.getElementById("notify-state");
  const ANSWERED_FADE_MS = 1500;

  const keyOf = (question) => question.request_id + ":" + question.interaction_id;

  function refreshEmpty() {
    empty.hidden = list.querySelector(".question:not(.answered)") !== null;
  }

  function card(question) {
    const item = template.content.firstElementChild.cloneNode(true);
    item.dataset.key = keyOf(question);
    const runLink = item.querySelector(".question-run");
    runLink.textContent = question.skill;
    runLink.href = question.url;
    const asked = item.querySelector(".question-asked");
    asked.dateTime = question.asked_at;
    asked.textContent = question.asked_at.slice(0, 16).replace("T", " ");
    item.querySelector(".question-prompt").textContent = question.prompt;
    item.querySelector("[name=request_id]").value = question.request_id;
    item.querySelector("[name=interaction_id]").value = String(question.interaction_id);
    const textarea = item.querySelector("textarea");
    textarea.id = "answer-" + question.request_id;
    item.querySelector("label").htmlFor = textarea.id;
    const options = item.querySelector(".quick-replies");
    // Each caption already shows the value the option sends when it differs from the label.
    question.options.forEach((caption, index) => {
      const button = document.createElement("button");
      Object.assign(button, { type: "submit", className: "quick-reply", name: "option", value: String(index) });
      button.formNoValidate = true;
      button.textContent = caption;
      options.appendChild(button);
    });
    return item;
  }

  // The list follows the socket: new questions are added (oldest first), gone ones removed;
  // a card being answered here is left alone (the socket may report the answer before the
  // answer's own response arrives).
  document.addEventListener("inbox:update", (event) => {
    const current = new Map(event.detail.questions.map((question) => [keyOf(question), question]));
    list.querySelectorAll(".question").forEach((item) => {
      const mine = item.classList.contains("sending") || item.classList.contains("answered");
      if (!current.has(item.dataset.key) && !mine) item.remove();
    });
    const shown = new Set(Array.from(list.querySelectorAll(".question"), (item) => item.dataset.key));
    current.forEach((question, key) => {
      if (!shown.has(key)) list.appendChild(card(question));
    });
    refreshEmpty();
  });

  list.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const item = form.closest(".question");
    const error = form.querySelector(".answer-error");
    const data = new FormData(form, event.submitter);
    const buttons = form.querySelectorAll("button");
    buttons.forEach((button) => (button.disabled = true));
    item.classList.add("sending");
    error.hidden = true;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: data,
        headers: { Accept: "application/json", "X-CSRFToken": data.get("csrfmiddlewaretoken") },
        credentials: "same-origin",
      });
      const body = await response.json();
      if (!response.ok) throw new Error(body.detail.message + " (" + body.detail.code + ")");
      item.classList.replace("sending", "answered");
      form.replaceWith(Object.assign(document.createElement("p"), { className: "answered-note", textContent: "Answered. The run goes on." }));
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
  });

  list.addEventListener("keydown", (event) => {
    if (event.target.matches("textarea") && event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });

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

  notifyButton.addEventListener("click", async () => {
    await Notification.requestPermission();
    showPermission();
  });
  showPermission();
})();
