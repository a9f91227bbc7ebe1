// The run page: renders the run's event log from /ws/runs/<id>/ and sends replies and cancels.
// Every event carries a seq; reconnecting asks for events after the last one seen (R-UI2).
(function () {
  "use strict";

  const page = document.getElementById("run-page");
  if (!page) return;

  const TERMINAL = ["succeeded", "failed", "canceled"];
  const STATUS_LABELS = {
    queued: "Queued",
    running: "Running",
    waiting_user: "Waiting for you",
    succeeded: "Succeeded",
    failed: "Failed",
    canceled: "Canceled",
  };
  const RETRY_FIRST_MS = 500;
  const RETRY_MAX_MS = 5000;
  // One key per page and question: resending after a dropped connection is answered once.
  const PAGE_NONCE = Date.now().toString(36) + Math.random().toString(36).slice(2);

  const el = (id) => document.getElementById(id);
  const conversation = el("conversation");
  const statusBadge = el("run-status");
  const connection = el("connection");
  const cancelButton = el("cancel-button");
  const replyForm = el("reply-form");
  const replyText = el("reply-text");
  const replyError = el("reply-error");
  const quickReplies = el("quick-replies");

  const state = {
    lastSeq: 0,
    liveFromSeq: Infinity, // events after this seq happened while the page was open
    status: null,
    pending: null,
    sending: false,
    socket: null,
    retryMs: RETRY_FIRST_MS,
    warnings: new Set(),
  };

  function node(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function asText(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  function parseJsonObject(text) {
    const trimmed = (text || "").trim();
    if (!trimmed.startsWith("{")) return null;
    try {
      const value = JSON.parse(trimmed);
      return value && typeof value === "object" ? value : null;
    } catch (error) {
      return null;
    }
  }

  // --- conversation ---------------------------------------------------------------------------

  function addEntry(seq, className, who, body) {
    const item = node("li", "entry " + className);
    item.dataset.seq = seq;
    if (who) item.appendChild(node("span", "who", who));
    item.appendChild(body);
    conversation.appendChild(item);
    item.scrollIntoView({ block: "nearest" });
    return item;
  }

  function messageBody(text) {
    const structured = parseJsonObject(text);
    if (!structured) return node("p", "text", text);
    // Structured output is shown folded: the readable version is the result below.
    const details = node("details", "structured");
    details.appendChild(node("summary", null, "Structured output"));
    details.appendChild(node("pre", "json", JSON.stringify(structured, null, 2)));
    return details;
  }

  function addNote(seq, text) {
    addEntry(seq, "note", null, node("p", "text", text));
  }

  function isAskUserEnvelope(text) {
    const value = parseJsonObject(text);
    return Boolean(value && (value.ask_user || value.outcome === "ask_user"));
  }

  function showQuestion(event) {
    const prompt = event.payload.prompt;
    const last = conversation.lastElementChild;
    // The question is usually the agent's last message (as text or as an ask_user envelope):
    // that message becomes the question instead of being shown twice.
    if (last && last.classList.contains("assistant") && (last.dataset.text === prompt || isAskUserEnvelope(last.dataset.text))) {
      last.classList.add("question");
      last.querySelector(".who").textContent = "Question";
      last.replaceChild(node("p", "text", prompt), last.lastChild);
      return;
    }
    addEntry(event.seq, "assistant question", "Question", node("p", "text", prompt));
  }

  function showStatus(event) {
    const to = event.payload.to;
    const notes = {
      queued: "Queued.",
      running: event.payload.repair_round
        ? "Fixing the answer (round " + event.payload.repair_round + ")…"
        : event.payload.attempt_number ? "Working (turn " + event.payload.attempt_number + ")…" : "Working…",
      waiting_user: "Waiting for your answer.",
      succeeded: "Finished.",
      failed: "Failed" + (event.payload.error ? ": " + event.payload.error.message : "."),
      canceled: "Canceled.",
    };
    addNote(event.seq, notes[to] || to);
    setStatus(to, to === "running" ? event.payload.repair_round : 0);
  }

  // R-RP1: the answer failed the output contract and goes back to the agent with what was wrong.
  function showRepair(event) {
    const body = node("div", "repair");
    body.appendChild(node("p", "text", "The answer did not match the expected output; fixing the answer (round " +
      event.payload.round + " of " + event.payload.max_rounds + ")…"));
    const problems = event.payload.problems || [];
    if (problems.length) {
      const details = node("details");
      details.appendChild(node("summary", null, problems.length === 1 ? "1 problem" : problems.length + " problems"));
      const list = node("ul", "problems");
      problems.forEach((problem) => {
        const item = node("li");
        item.appendChild(node("code", null, problem.pointer || "(whole answer)"));
        item.appendChild(document.createTextNode(" expected " + problem.expected + "; got " + problem.got));
        list.appendChild(item);
      });
      details.appendChild(list);
      body.appendChild(details);
    }
    addEntry(event.seq, "note repair", null, body);
    if (state.status === "running") setStatus("running", event.payload.round);
  }

  const renderers = {
    status: showStatus,
    assistant_message(event) {
      const item = addEntry(event.seq, "assistant", "Assistant", messageBody(event.payload.text));
      item.dataset.text = (event.payload.text || "").trim();
    },
    interaction_pending(event) {
      showQuestion(event);
      state.pending = event.payload;
    },
    interaction_reply(event) {
      const auto = event.payload.resolution_mode === "auto_decide_timeout";
      addEntry(event.seq, auto ? "reply auto" : "reply", auto ? "Decided automatically" : "Answer", node("p", "text", asText(event.payload.response)));
      state.pending = null;
    },
    input_uploaded(event) {
      addNote(event.seq, "Input files received: " + (event.payload.files || []).join(", "));
    },
    repair(event) {
      showRepair(event);
    },
    recovered(event) {
      addNote(event.seq, "The service restarted; this run kept waiting.");
    },
    warning(event) {
      addWarning(event.payload);
    },
    result(event) {
      showResult(event.payload);
    },
  };

  // --- status, warnings, result ---------------------------------------------------------------

  function setStatus(status, repairRound) {
    state.status = status;
    statusBadge.textContent = repairRound ? "Fixing the answer (round " + repairRound + ")" : STATUS_LABELS[status] || status;
    statusBadge.className = "badge status-" + status;
    cancelButton.hidden = TERMINAL.includes(status);
    updateControls();
  }

  function addWarning(warning) {
    const key = warning.code + "\u0000" + warning.message;
    if (state.warnings.has(key)) return;
    state.warnings.add(key);
    const item = node("li");
    item.appendChild(node("code", null, warning.code));
    item.appendChild(document.createTextNode(" " + warning.message));
    el("warnings").appendChild(item);
    el("warnings-section").hidden = false;
  }

  function artifactLink(path) {
    const relative = path.replace(/^artifacts\//, "");
    const link = node("a", null, relative);
    link.href = page.dataset.artifactBase + relative.split("/").map(encodeURIComponent).join("/");
    link.setAttribute("download", "");
    return link;
  }

  function showResult(result) {
    const summary = el("result-summary");
    summary.textContent = "";
    summary.appendChild(node("span", "badge status-" + (result.status === "success" ? "succeeded" : result.status), result.status));
    if (result.error) summary.appendChild(document.createTextNode(" " + result.error.message + " (" + result.error.code + ")"));
    el("result-json").textContent = JSON.stringify(result.data, null, 2);
    el("result-json").hidden = result.data === null || result.data === undefined;
    const list = el("artifacts");
    list.textContent = "";
    (result.artifacts || []).forEach((path) => {
      const item = node("li");
      item.appendChild(artifactLink(path));
      list.appendChild(item);
    });
    el("artifacts-block").hidden = !(result.artifacts || []).length;
    (result.validation_warnings || []).forEach(addWarning);
    el("result-section").hidden = false;
  }

  // --- replying and cancelling ----------------------------------------------------------------

  function socketOpen() {
    return state.socket && state.socket.readyState === WebSocket.OPEN;
  }

  function updateControls() {
    const waiting = state.status === "waiting_user" && state.pending;
    const wasHidden = replyForm.hidden;
    replyForm.hidden = !waiting;
    replyForm.querySelectorAll("button, textarea").forEach((control) => {
      control.disabled = state.sending || !socketOpen();
    });
    cancelButton.disabled = !socketOpen() || TERMINAL.includes(state.status);
    if (!waiting) return;
    if (wasHidden || quickReplies.dataset.interaction !== String(state.pending.interaction_id)) {
      renderQuickReplies(state.pending);
      replyError.hidden = true;
      // Move focus only for a question that just arrived, never while history replays.
      if (state.lastSeq > state.liveFromSeq && document.activeElement === document.body) replyText.focus();
    }
  }

  function renderQuickReplies(pending) {
    quickReplies.textContent = "";
    quickReplies.dataset.interaction = String(pending.interaction_id);
    (pending.options || []).forEach((option) => {
      const button = node("button", "quick-reply", option.label);
      button.type = "button";
      button.addEventListener("click", () => sendReply(option.value));
      quickReplies.appendChild(button);
    });
    quickReplies.hidden = !(pending.options || []).length;
  }

  function send(message) {
    if (!socketOpen()) return false;
    state.socket.send(JSON.stringify(message));
    return true;
  }

  function sendReply(response) {
    if (!state.pending || state.sending) return;
    const key = "web-" + PAGE_NONCE + "-" + state.pending.interaction_id;
    state.sending = send({ type: "reply", interaction_id: state.pending.interaction_id, response: response, idempotency_key: key });
    updateControls();
  }

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

  cancelButton.addEventListener("click", () => {
    if (window.confirm("Cancel this run? The agent is stopped and the run cannot continue.")) send({ type: "cancel" });
  });

  function handleAck(message) {
    if (message.action === "reply") {
      state.sending = false;
      replyText.value = "";
    } else if (!message.accepted) {
      addNote("", "The run had already ended.");
    }
    updateControls();
  }

  function handleError(message) {
    state.sending = false;
    replyError.textContent = message.message + " (" + message.code + ")";
    replyError.hidden = false;
    updateControls();
  }

  // --- the socket -----------------------------------------------------------------------------

  function handle(message) {
    if (message.type === "snapshot") {
      if (state.liveFromSeq === Infinity) state.liveFromSeq = message.last_seq;
      setStatus(message.run.status, message.run.status === "running" ? message.run.repair_round : 0);
      (message.run.warnings || []).forEach(addWarning);
    } else if (message.type === "event") {
      if (message.seq <= state.lastSeq) return;
      state.lastSeq = message.seq;
      const render = renderers[message.kind];
      if (render) render(message);
      updateControls();
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

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + page.dataset.socketPath + "?after_seq=" + state.lastSeq);
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
      } else {
        setConnection("Connection lost. Reconnecting…");
        window.setTimeout(connect, state.retryMs);
        state.retryMs = Math.min(state.retryMs * 2, RETRY_MAX_MS);
      }
    });
  }

  connect();
})();
