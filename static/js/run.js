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
    turns: new Map(), // attempt -> the turn's activity block (R-AC5)
    usage: null,
  };
  const PREVIEWABLE = /\.(md|markdown|txt|text|log|csv|tsv|json|ya?ml|toml|xml)$/i;

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
    status(event) {
      showStatus(event);
      if (event.payload.to !== "running") {
        stopRunningTools();
        if (event.seq > state.liveFromSeq) refreshUsage();
      }
    },
    activity: showActivity,
    activity_truncated(event) {
      const item = addStep(turnBlock(event), "truncated");
      item.textContent = "More activity happened than is shown here (limit " + event.payload.limit + "); the full output is in the logs.";
    },
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

  // --- live activity (R-AC1, R-AC5) ------------------------------------------------------------
  // One folded-out block per turn; a new turn folds the earlier ones. Tool rows update in place.

  function turnBlock(event) {
    const attempt = event.payload.attempt;
    let turn = state.turns.get(attempt);
    if (turn) return turn;
    state.turns.forEach((earlier) => {
      earlier.details.open = false;
    });
    const details = node("details", "activity");
    details.open = true;
    const summary = node("summary");
    summary.appendChild(node("span", "activity-title", "Agent activity, turn " + attempt));
    const count = node("span", "activity-count");
    const usage = node("span", "activity-usage");
    summary.appendChild(count);
    summary.appendChild(usage);
    const list = node("ol", "timeline");
    details.appendChild(summary);
    details.appendChild(list);
    addEntry(event.seq, "activity-entry", null, details);
    turn = { details: details, list: list, count: count, usage: usage, steps: 0, tools: new Map(), plan: null };
    state.turns.set(attempt, turn);
    labelTurns();
    return turn;
  }

  function addStep(turn, className) {
    const item = node("li", "step " + className);
    turn.list.appendChild(item);
    turn.steps += 1;
    turn.count.textContent = turn.steps + (turn.steps === 1 ? " step" : " steps");
    if (turn.details.open) item.scrollIntoView({ block: "nearest" });
    return item;
  }

  function oneLine(kindLabel, text) {
    // Reasoning and messages: one line, the whole text one click away.
    const details = node("details", "one-line-details");
    const summary = node("summary");
    summary.appendChild(node("span", "kind", kindLabel));
    summary.appendChild(node("span", "one-line", (text || "").replace(/\s+/g, " ")));
    details.appendChild(summary);
    details.appendChild(node("p", "full-text", text));
    return details;
  }

  function formatDuration(ms) {
    if (ms === null || ms === undefined) return "";
    return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
  }

  const MARKS = { running: "…", ok: "✓", failed: "✗", stopped: "■" };
  const MARK_LABELS = { running: "running", ok: "succeeded", failed: "failed", stopped: "stopped" };

  function setMark(row, status) {
    row.item.classList.remove("running", "ok", "failed", "stopped");
    row.item.classList.add(status);
    row.mark.textContent = MARKS[status];
    row.mark.setAttribute("aria-label", MARK_LABELS[status]);
    row.mark.title = MARK_LABELS[status];
  }

  function showTool(turn, payload) {
    let row = turn.tools.get(payload.id);
    if (!row) {
      const item = addStep(turn, "tool");
      row = { item: item, mark: node("span", "mark"), duration: node("span", "duration") };
      const line = node("div", "tool-line");
      line.appendChild(row.mark);
      line.appendChild(node("span", "tool-name", payload.name || "tool"));
      line.appendChild(node("code", "tool-command", payload.command || ""));
      line.appendChild(row.duration);
      item.appendChild(line);
      turn.tools.set(payload.id, row);
      setMark(row, "running");
    }
    if (payload.phase !== "finished") return;
    setMark(row, payload.status === "failed" || (payload.exit_code !== null && payload.exit_code !== undefined && payload.exit_code !== 0) ? "failed" : "ok");
    row.duration.textContent = formatDuration(payload.duration_ms);
    if (payload.output) {
      const output = node("details", "tool-output");
      const label = "Output" + (payload.exit_code !== null && payload.exit_code !== undefined ? " (exit " + payload.exit_code + ")" : "");
      output.appendChild(node("summary", null, label));
      output.appendChild(node("pre", null, payload.output));
      row.item.appendChild(output);
    }
  }

  function showPlan(turn, payload) {
    // A plan is updated as the agent works: one row per turn, redrawn.
    if (!turn.plan) turn.plan = addStep(turn, "plan");
    const items = payload.items || [];
    const done = items.filter((entry) => entry.done).length;
    turn.plan.textContent = "";
    const details = node("details");
    details.appendChild(node("summary", null, "Plan (" + done + "/" + items.length + " done)"));
    const list = node("ul", "plan-items");
    items.forEach((entry) => list.appendChild(node("li", entry.done ? "done" : "todo", entry.text)));
    details.appendChild(list);
    turn.plan.appendChild(details);
  }

  function showActivity(event) {
    const payload = event.payload;
    const turn = turnBlock(event);
    if (payload.type === "tool") {
      showTool(turn, payload);
    } else if (payload.type === "reasoning") {
      addStep(turn, "reasoning").appendChild(oneLine("Thinking", payload.text));
    } else if (payload.type === "message") {
      addStep(turn, "message").appendChild(oneLine("Said", payload.text));
    } else if (payload.type === "file_change") {
      const item = addStep(turn, "files");
      item.appendChild(node("span", "kind", "Changed"));
      item.appendChild(node("span", "paths", (payload.paths || []).join(", ")));
    } else if (payload.type === "plan") {
      showPlan(turn, payload);
    }
  }

  function stopRunningTools() {
    // The turn ended: a tool that never reported back was stopped with it.
    state.turns.forEach((turn) => {
      turn.tools.forEach((row) => {
        if (row.item.classList.contains("running")) setMark(row, "stopped");
      });
    });
  }

  // --- usage (R-AC4) ----------------------------------------------------------------------------

  function formatNumber(value) {
    return value === null || value === undefined ? "—" : value.toLocaleString();
  }

  function usageCells(row, figures) {
    [
      formatNumber(figures.input_tokens),
      formatNumber(figures.cached_input_tokens),
      formatNumber(figures.output_tokens),
      formatNumber(figures.reasoning_tokens),
      figures.cost_usd === null || figures.cost_usd === undefined ? "—" : "$" + figures.cost_usd.toFixed(4),
      formatDuration(figures.duration_ms) || "—",
    ].forEach((text) => row.appendChild(node("td", null, text)));
  }

  function labelTurns() {
    // Each turn's block shows its own usage once the turn has ended.
    ((state.usage && state.usage.turns) || []).forEach((turn) => {
      const block = state.turns.get(turn.attempt);
      if (!block) return;
      const tokens = (turn.input_tokens || 0) + (turn.output_tokens || 0);
      block.usage.textContent = [tokens ? tokens.toLocaleString() + " tokens" : "", formatDuration(turn.duration_ms)].filter(Boolean).join(" · ");
    });
  }

  function showUsage(usage) {
    if (!usage || !usage.turns || !usage.turns.length) return;
    state.usage = usage;
    labelTurns();
    const rows = el("usage-rows");
    rows.textContent = "";
    usage.turns.forEach((turn) => {
      const row = node("tr");
      row.appendChild(node("th", null, String(turn.attempt)));
      usageCells(row, turn);
      rows.appendChild(row);
    });
    if (usage.turns.length > 1) {
      const total = node("tr", "total");
      total.appendChild(node("th", null, "All"));
      usageCells(total, usage);
      rows.appendChild(total);
    }
    el("usage-section").hidden = false;
  }

  function refreshUsage() {
    fetch(page.dataset.statusUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((response) => (response.ok ? response.json() : null))
      .then((body) => body && showUsage(body.usage))
      .catch(() => {}); // usage is a nicety: the conversation goes on without it
  }

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

  function isObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  const MAX_DEPTH = 6;

  // The result for people: objects as key/value tables, lists of records as tables, other lists
  // as bullet lists. Everything is text nodes: nothing the agent wrote is ever parsed as HTML.
  function renderValue(value, depth) {
    if (value === null || value === undefined) return node("span", "null", "—");
    if (depth > MAX_DEPTH) return node("code", null, JSON.stringify(value));
    if (Array.isArray(value)) {
      if (!value.length) return node("span", "null", "(none)");
      if (value.every(isObject)) return recordTable(value, depth);
      const list = node("ul", "value-list");
      value.forEach((entry) => {
        const item = node("li");
        item.appendChild(renderValue(entry, depth + 1));
        list.appendChild(item);
      });
      return list;
    }
    if (isObject(value)) {
      const table = node("table", "kv");
      const body = node("tbody");
      Object.keys(value).forEach((key) => {
        const row = node("tr");
        row.appendChild(node("th", null, key));
        const cell = node("td");
        cell.appendChild(renderValue(value[key], depth + 1));
        row.appendChild(cell);
        body.appendChild(row);
      });
      table.appendChild(body);
      return table;
    }
    return node("span", "scalar", String(value));
  }

  function recordTable(records, depth) {
    const columns = [];
    records.forEach((record) => Object.keys(record).forEach((key) => columns.includes(key) || columns.push(key)));
    const wrap = node("div", "table-wrap");
    const table = node("table", "records");
    const head = node("tr");
    columns.forEach((key) => head.appendChild(node("th", null, key)));
    const thead = node("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    const body = node("tbody");
    records.forEach((record) => {
      const row = node("tr");
      columns.forEach((key) => {
        const cell = node("td");
        cell.appendChild(renderValue(record[key], depth + 1));
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
    table.appendChild(body);
    wrap.appendChild(table);
    return wrap;
  }

  function artifactItem(path) {
    const item = node("li", "artifact");
    item.appendChild(artifactLink(path));
    if (!PREVIEWABLE.test(path)) return item;
    // Markdown and text are previewed inline, rendered and sanitised by the server.
    const preview = node("div", "artifact-preview");
    preview.setAttribute("aria-label", "Preview of " + path);
    item.appendChild(preview);
    const relative = path.replace(/^artifacts\//, "");
    fetch(page.dataset.previewBase + relative.split("/").map(encodeURIComponent).join("/"), { credentials: "same-origin" })
      .then((response) => (response.ok ? response.text() : ""))
      .then((html) => {
        preview.innerHTML = html; // a fragment sanitised server-side (runs/preview.py)
        preview.hidden = !html;
      })
      .catch(() => {
        preview.hidden = true;
      });
    return item;
  }

  function showResult(result) {
    const summary = el("result-summary");
    summary.textContent = "";
    summary.appendChild(node("span", "badge status-" + (result.status === "success" ? "succeeded" : result.status), result.status));
    if (result.error) summary.appendChild(document.createTextNode(" " + result.error.message + " (" + result.error.code + ")"));
    const hasData = result.data !== null && result.data !== undefined;
    const view = el("result-view");
    view.textContent = "";
    if (hasData) view.appendChild(renderValue(result.data, 0));
    el("result-json").textContent = JSON.stringify(result.data, null, 2);
    el("result-raw").hidden = !hasData;
    const list = el("artifacts");
    list.textContent = "";
    (result.artifacts || []).forEach((path) => list.appendChild(artifactItem(path)));
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
      const button = node("button", "quick-reply", optionCaption(option));
      button.type = "button";
      button.addEventListener("click", () => sendReply(option.value));
      quickReplies.appendChild(button);
    });
    quickReplies.hidden = !(pending.options || []).length;
  }

  // The label, and beside it the value the button sends whenever the two differ (R-FS4).
  function optionCaption(option) {
    const sent = typeof option.value === "string" ? option.value : JSON.stringify(option.value);
    return sent === option.label ? option.label : option.label + " → " + sent;
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
      showUsage(message.run.usage);
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
        // 4429: this user has too many live connections open; one may close meanwhile.
        setConnection(event.code === 4429 ? "Too many open pages. Retrying…" : "Connection lost. Reconnecting…");
        window.setTimeout(connect, state.retryMs);
        state.retryMs = Math.min(state.retryMs * 2, RETRY_MAX_MS);
      }
    });
  }

  connect();
})();
