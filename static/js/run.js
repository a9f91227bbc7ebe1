// The run page: renders the run's event log from /ws/runs/<id>/ and sends replies and cancels.
// Every event carries a seq; reconnecting asks for events after the last one seen (R-UI2).
(function () {
  "use strict";

  const page = document.getElementById("run-page");
  if (!page) return;

  const TERMINAL = ["succeeded", "failed", "canceled"];
  const STATUS_LABELS = JSON.parse(page.dataset.statusLabels); // the server's one name per status
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
  const kindForm = el("kind-form");
  const replyTextBlock = el("reply-text-block");
  const replySend = el("reply-send");

  const state = {
    lastSeq: 0,
    liveFromSeq: Infinity, // events after this seq happened while the page was open
    status: null,
    pending: null,
    question: null, // the controls the pending question's kind calls for (question-forms.js)
    sending: false,
    socket: null,
    retryMs: RETRY_FIRST_MS,
    warnings: new Set(),
    turns: new Map(), // attempt -> the turn's activity block (R-AC5)
    usage: null,
    artifacts: new Set(), // the result's artifact paths: values naming one become links
    waitingNote: null, // the "waiting for your answer" note, until the answer comes
    createdAt: Date.parse(page.dataset.createdAt),
    finishedAt: page.dataset.finishedAt ? Date.parse(page.dataset.finishedAt) : null,
    followingEdge: false, // whether the last entry kept the reader at the live edge
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

  // Times in the reader's own time zone, as YYYY-MM-DD HH:MM:SS (and HH:MM:SS within the log).
  const pad = (number) => String(number).padStart(2, "0");
  const timeOfDay = (date) => pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());

  function clock(ts) {
    const time = node("time", "at", timeOfDay(new Date(ts)));
    time.dateTime = ts;
    return time;
  }

  // Follow the live edge only for a reader already there: history replayed on load never moves
  // the page (its title, status and Re-run stay in view), nor does a reader scrolled up to read.
  function followsLiveEdge() {
    const root = document.scrollingElement || document.documentElement;
    const atEdge = root.scrollTop + window.innerHeight >= root.scrollHeight - 48;
    return state.lastSeq > state.liveFromSeq && atEdge;
  }

  function addEntry(seq, className, who, body, ts) {
    state.followingEdge = followsLiveEdge(); // measured before the entry makes the page longer
    const item = node("li", "entry " + className);
    item.dataset.seq = seq;
    if (who || ts) {
      const head = node("span", "who", who || "");
      if (ts) head.appendChild(clock(ts));
      item.appendChild(head);
    }
    item.appendChild(body);
    conversation.appendChild(item);
    if (state.followingEdge) item.scrollIntoView({ block: "nearest" });
    return item;
  }

  function messageBody(text) {
    const structured = parseJsonObject(text);
    if (!structured) return node("p", "text", text);
    delete structured.__SKILL_DONE__; // the protocol's "finished" flag, not part of the answer
    if (!Object.keys(structured).length) return node("p", "text muted", "Done.");
    // Structured output is shown folded: the readable version is the result below.
    const details = node("details", "structured");
    details.appendChild(node("summary", null, "Structured output"));
    details.appendChild(node("pre", "json", JSON.stringify(structured, null, 2)));
    return details;
  }

  function addNote(seq, text, ts) {
    return addEntry(seq, "note", null, node("p", "text", text), ts);
  }

  function isAskUserEnvelope(text) {
    const value = parseJsonObject(text);
    return Boolean(value && (value.ask_user || value.outcome === "ask_user"));
  }

  // The prose before the ask_user envelope that ends an agent's message (the inbox shows the same).
  function proseBeforeEnvelope(text) {
    const cut = text.indexOf("\n{");
    return cut > 0 && isAskUserEnvelope(text.slice(cut + 1)) ? text.slice(0, cut).trim() : "";
  }

  function showQuestion(event) {
    const prompt = event.payload.prompt;
    const last = conversation.lastElementChild;
    const prose = last && last.classList.contains("assistant") ? proseBeforeEnvelope(last.dataset.text || "") : "";
    if (prose) {
      // The message keeps what the agent said; its envelope becomes the question below it.
      last.dataset.text = prose;
      last.replaceChild(node("p", "text", prose), last.lastChild);
      addEntry(event.seq, "assistant question", "Question", node("p", "text", prompt), event.ts);
      return;
    }
    // The question is usually the agent's last message (as text or as an ask_user envelope):
    // that message becomes the question instead of being shown twice.
    if (last && last.classList.contains("assistant") && (last.dataset.text === prompt || isAskUserEnvelope(last.dataset.text))) {
      last.classList.add("question");
      last.querySelector(".who").firstChild.textContent = "Question";
      last.replaceChild(node("p", "text", prompt), last.lastChild);
      return;
    }
    addEntry(event.seq, "assistant question", "Question", node("p", "text", prompt), event.ts);
  }

  function showStatus(event) {
    const to = event.payload.to;
    const notes = {
      queued: "Queued.",
      running: event.payload.repair_round
        ? "Fixing the answer (round " + event.payload.repair_round + ")…"
        : event.payload.attempt_number ? "Working (turn " + event.payload.attempt_number + ")…" : "Working…",
      waiting_user: "Waiting for your answer.",
      succeeded: event.payload.cache_hit ? "Finished: the result of an identical earlier run, from the cache." : "Finished.",
      failed: "Failed" + (event.payload.error ? " (" + event.payload.error.code + ")." : "."),
      canceled: "Canceled.",
    };
    const note = addNote(event.seq, notes[to] || to, event.ts);
    if (to === "waiting_user") state.waitingNote = note;
    if (TERMINAL.includes(to)) showFinished(Date.parse(event.ts));
    setStatus(to, to === "running" ? event.payload.repair_round : 0);
  }

  // A reply as people read it: the service words structured replies (a form's values one a line).
  function answerText(payload) {
    return typeof payload.text === "string" ? payload.text : asText(payload.response);
  }

  // The note saying the run waits becomes what was answered, once it is, at the answer's time.
  function noteAnswered(payload, ts) {
    if (!state.waitingNote) return;
    state.waitingNote.querySelector("time.at").replaceWith(clock(payload.answered_at || ts));
    const auto = payload.resolution_mode === "auto_decide_timeout";
    const answer = answerText(payload).replace(/\s+/g, " ");
    const text = (auto ? "Decided automatically: " : "Answered: ") + (answer.length > 80 ? answer.slice(0, 79) + "…" : answer);
    state.waitingNote.querySelector(".text").textContent = text;
    state.waitingNote.classList.add("answered");
    state.waitingNote = null;
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
    addEntry(event.seq, "note repair", null, body, event.ts);
    if (state.status === "running") setStatus("running", event.payload.round);
  }

  const renderers = {
    status(event) {
      showStatus(event);
      if (event.payload.to !== "running") {
        stopRunningTools();
        finishTurns();
        if (event.seq > state.liveFromSeq) refreshUsage();
      }
    },
    activity: showActivity,
    activity_truncated(event) {
      const item = addStep(turnBlock(event), "truncated", event.ts);
      item.textContent = "More activity happened than is shown here (limit " + event.payload.limit + "); the full output is in the logs.";
    },
    assistant_message(event) {
      const item = addEntry(event.seq, "assistant", "Assistant", messageBody(event.payload.text), event.ts);
      item.dataset.text = (event.payload.text || "").trim();
    },
    interaction_pending(event) {
      showQuestion(event);
      state.pending = event.payload;
    },
    interaction_reply(event) {
      const auto = event.payload.resolution_mode === "auto_decide_timeout";
      noteAnswered(event.payload, event.ts);
      addEntry(event.seq, auto ? "reply auto" : "reply", auto ? "Decided automatically" : "Answer", node("p", "text", answerText(event.payload)), event.ts);
      state.pending = null;
    },
    input_uploaded(event) {
      addNote(event.seq, "Input files received: " + (event.payload.files || []).join(", "), event.ts);
    },
    repair(event) {
      showRepair(event);
    },
    recovered(event) {
      addNote(event.seq, "The service restarted; this run kept waiting.", event.ts);
    },
    warning(event) {
      addWarning(event.payload);
    },
    security(event) {
      // A request the provider relay refused, or a key found in an output (R-SB8, R-SB10).
      const where = event.payload.source === "relay" ? event.payload.method + " " + event.payload.path : event.payload.path;
      addWarning({ code: event.payload.reason, message: "Refused for security: " + event.payload.message + " (" + where + ")" });
    },
    result(event) {
      showResult(event.payload);
    },
  };

  // --- live activity (R-AC1, R-AC5) ------------------------------------------------------------
  // One folded-out block per turn; a new turn folds the earlier ones, which stay one click away
  // (a marker shows each block opens) and say they finished. Tool rows update in place.

  function turnBlock(event) {
    const attempt = event.payload.attempt;
    let turn = state.turns.get(attempt);
    if (turn) return turn;
    finishTurns();
    const details = node("details", "activity");
    details.open = true;
    const summary = node("summary");
    summary.appendChild(node("span", "activity-title", "Agent activity, turn " + attempt));
    const progress = node("span", "activity-state", "working…");
    const count = node("span", "activity-count");
    const usage = node("span", "activity-usage");
    [progress, count, usage].forEach((part) => summary.appendChild(part));
    const list = node("ol", "timeline");
    details.appendChild(summary);
    details.appendChild(list);
    addEntry(event.seq, "activity-entry", null, details);
    turn = { details: details, list: list, progress: progress, count: count, usage: usage, steps: 0, tools: new Map(), plan: null };
    state.turns.set(attempt, turn);
    labelTurns();
    return turn;
  }

  function finishTurns() {
    state.turns.forEach((turn) => {
      if (turn.details.classList.contains("finished")) return;
      turn.details.classList.add("finished");
      turn.details.open = false;
      turn.progress.textContent = "finished";
    });
  }

  function addStep(turn, className, ts) {
    const follow = turn.details.open && followsLiveEdge();
    const item = node("li", "step " + className);
    if (ts) item.appendChild(clock(ts));
    turn.list.appendChild(item);
    turn.steps += 1;
    turn.count.textContent = turn.steps + (turn.steps === 1 ? " step" : " steps");
    if (follow) item.scrollIntoView({ block: "nearest" });
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

  // One shell word as a shell reads it ('…' as is; "…" with \\ \" \$ \` escapes; $'…' with C
  // escapes), or null unless the text is exactly one word.
  const C_ESCAPES = { n: "\n", t: "\t", r: "\r", "\\": "\\", "'": "'", '"': '"', a: "\x07", b: "\b", e: "\x1b", f: "\f", v: "\v" };

  function shellWord(text) {
    let out = "";
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      if (c === "'") {
        const end = text.indexOf("'", i + 1);
        if (end < 0) return null;
        out += text.slice(i + 1, end);
        i = end + 1;
      } else if (c === "$" && text[i + 1] === "'") {
        i += 2;
        while (i < text.length && text[i] !== "'") {
          if (text[i] === "\\" && i + 1 < text.length) {
            out += C_ESCAPES[text[i + 1]] !== undefined ? C_ESCAPES[text[i + 1]] : "\\" + text[i + 1];
            i += 2;
          } else {
            out += text[i++];
          }
        }
        if (i >= text.length) return null;
        i += 1;
      } else if (c === '"') {
        i += 1;
        while (i < text.length && text[i] !== '"') {
          if (text[i] === "\\" && '"\\$`\n'.includes(text[i + 1])) {
            if (text[i + 1] !== "\n") out += text[i + 1];
            i += 2;
          } else {
            out += text[i++];
          }
        }
        if (i >= text.length) return null;
        i += 1;
      } else if (/\s/.test(c)) {
        return null;
      } else if (c === "\\") {
        out += text[i + 1] || "";
        i += 2;
      } else {
        out += c;
        i += 1;
      }
    }
    return out;
  }

  // Codex reports a command as the shell line it ran, `/bin/bash -lc '<script>'`, quoted for
  // the shell: shown (and copied) as the script itself, its newlines and quotes as written.
  function readableCommand(command) {
    const wrapped = /^(?:\/\S*\/)?(?:ba|z|da)?sh\s+-l?c\s+([\s\S]+)$/.exec((command || "").trim());
    const script = wrapped ? shellWord(wrapped[1]) : null;
    return script === null ? command || "" : script;
  }

  function copyButton(text, label) {
    const button = node("button", "copy-button", "Copy");
    button.type = "button";
    button.setAttribute("aria-label", label);
    button.addEventListener("click", () => {
      const done = () => {
        button.textContent = "Copied";
        window.setTimeout(() => (button.textContent = "Copy"), 1500);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, () => (button.textContent = "Copy failed"));
      } else {
        const scratch = node("textarea", "visually-hidden");
        scratch.value = text;
        document.body.appendChild(scratch);
        scratch.select();
        const copied = document.execCommand("copy");
        scratch.remove();
        if (copied) done();
      }
    });
    return button;
  }

  function showTool(turn, payload, ts) {
    let row = turn.tools.get(payload.id);
    if (!row) {
      const item = addStep(turn, "tool", ts);
      row = { item: item, mark: node("span", "mark"), duration: node("span", "duration") };
      const line = node("div", "tool-line");
      const command = readableCommand(payload.command);
      line.appendChild(row.mark);
      line.appendChild(node("span", "tool-name", payload.name || "tool"));
      line.appendChild(node("code", "tool-command", command));
      line.appendChild(row.duration);
      if (command) line.appendChild(copyButton(command, "Copy the command"));
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
      showTool(turn, payload, event.ts);
    } else if (payload.type === "reasoning") {
      addStep(turn, "reasoning", event.ts).appendChild(oneLine("Thinking", payload.text));
    } else if (payload.type === "message") {
      addStep(turn, "message", event.ts).appendChild(oneLine("Said", payload.text));
    } else if (payload.type === "file_change") {
      const item = addStep(turn, "files", event.ts);
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

  function showUsage(status) {
    const usage = status.usage;
    el("usage-relay").textContent = status.model_tokens ? "Counted at the provider relay: " + status.model_tokens.toLocaleString() + " tokens." : "";
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
      .then((body) => body && showUsage(body))
      .catch(() => {}); // usage is a nicety: the conversation goes on without it
  }

  // --- times -----------------------------------------------------------------------------------

  function formatSpan(ms) {
    const seconds = Math.max(0, Math.round(ms / 1000));
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + String(seconds % 60).padStart(2, "0") + " s";
    return Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
  }

  function showElapsed() {
    el("run-elapsed").textContent = formatSpan((state.finishedAt || Date.now()) - state.createdAt);
  }

  function showFinished(at) {
    if (state.finishedAt === null) state.finishedAt = at;
    const finished = el("run-finished");
    finished.dateTime = new Date(state.finishedAt).toISOString();
    finished.textContent = window.localTimes.localStamp(new Date(state.finishedAt), true);
    el("finished-fact").hidden = false;
    el("elapsed-label").textContent = "Took";
    showElapsed();
    window.clearInterval(state.ticker);
  }

  showElapsed();
  if (state.finishedAt === null) state.ticker = window.setInterval(showElapsed, 1000);

  // --- logs -------------------------------------------------------------------------------------
  // GET …/logs (JSON: one attempt's texts, the list of attempts); the whole of a log from ?stream=.
  // Each turn is a block of numbered lines, folded but for the latest and loaded when opened; a
  // line's number links to it (#logs-t<turn>-<stream>-L<line>). Lines are built in chunks as they
  // come into view, so a long log costs what is on screen; search works on the texts and marks
  // the hits of the chunks built. Log text is only ever set as text, never parsed as HTML.

  const LOG_CHUNK_LINES = 200;
  const LOG_LINE_ANCHOR = /^#logs-t(\d+)-(stdout|stderr|prompt)-L(\d+)$/;
  const STREAM_NAMES = { stdout: "output", stderr: "errors", prompt: "prompt" };
  const logs = {
    stream: "stdout",
    index: null, // the attempts and their sizes, from the latest answer
    bodies: new Map(), // attempt -> its answer (all three streams)
    loading: new Map(), // attempt -> the request for its answer, while under way
    turns: new Map(), // attempt -> {block, box, lines, chunks} of the shown stream
    query: "",
    hits: [], // {attempt, line, start} of the query in the shown stream, in order
    current: -1,
    target: null, // the linked line: {attempt, stream, line}
  };

  function lineAnchor(attempt, number) {
    return "logs-t" + attempt + "-" + logs.stream + "-L" + number;
  }

  function fetchLogs(attempt) {
    const query = attempt ? "?attempt=" + attempt : "";
    return fetch(page.dataset.logsUrl + query, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((response) => response.json().then((body) => ({ ok: response.ok, body: body })))
      .then(({ ok, body }) => {
        if (!ok) throw new Error(body.detail ? body.detail.message + " (" + body.detail.code + ")" : "the logs could not be read");
        if (body.attempt_number !== null) logs.bodies.set(body.attempt_number, body);
        return body;
      });
  }

  function ensureBody(attempt) {
    if (logs.bodies.has(attempt)) return Promise.resolve(logs.bodies.get(attempt));
    if (!logs.loading.has(attempt)) {
      const request = fetchLogs(attempt);
      request.finally(() => logs.loading.delete(attempt)).catch(() => {});
      logs.loading.set(attempt, request);
    }
    return logs.loading.get(attempt);
  }

  function loadLogTurn(attempt) {
    return ensureBody(attempt).then(() => fillLogTurn(attempt));
  }

  // The text of one line, with the query's hits in it marked (the current one set apart).
  function fillLogLine(textNode, attempt, index, text) {
    textNode.textContent = "";
    const needle = logs.query.toLowerCase();
    if (!needle) {
      textNode.textContent = text;
      return;
    }
    const lower = text.toLowerCase();
    let from = 0;
    let at = lower.indexOf(needle);
    while (at !== -1) {
      textNode.appendChild(document.createTextNode(text.slice(from, at)));
      const mark = node("mark", "log-hit", text.slice(at, at + needle.length));
      mark.dataset.start = String(at);
      textNode.appendChild(mark);
      from = at + needle.length;
      at = lower.indexOf(needle, from);
    }
    textNode.appendChild(document.createTextNode(text.slice(from)));
    markCurrentHit(textNode, attempt, index);
  }

  function markCurrentHit(textNode, attempt, index) {
    const hit = logs.hits[logs.current];
    textNode.querySelectorAll("mark.log-hit").forEach((mark) => {
      const isCurrent = !!hit && hit.attempt === attempt && hit.line === index && String(hit.start) === mark.dataset.start;
      mark.classList.toggle("current", isCurrent);
    });
  }

  function buildLogChunk(turn, chunkIndex) {
    const chunk = turn.chunks[chunkIndex];
    if (chunk.built) return;
    const fragment = document.createDocumentFragment();
    const end = Math.min(turn.lines.length, (chunkIndex + 1) * LOG_CHUNK_LINES);
    for (let index = chunkIndex * LOG_CHUNK_LINES; index < end; index++) {
      const row = node("div", "log-line");
      row.id = lineAnchor(turn.attempt, index + 1);
      const number = node("a", "log-ln", String(index + 1));
      number.href = "#" + row.id;
      number.tabIndex = -1; // a log is not a trap of thousands of tab stops; the search moves by keyboard
      const text = node("span", "log-lt");
      fillLogLine(text, turn.attempt, index, turn.lines[index]);
      row.append(number, text);
      fragment.appendChild(row);
    }
    chunk.element.textContent = "";
    chunk.element.appendChild(fragment);
    chunk.element.style.height = "";
    chunk.built = true;
    if (turn.observer) turn.observer.unobserve(chunk.element);
  }

  function logLineElement(attempt, index) {
    const turn = logs.turns.get(attempt);
    if (!turn || index >= turn.lines.length) return null;
    turn.block.open = true;
    buildLogChunk(turn, Math.floor(index / LOG_CHUNK_LINES));
    return el(lineAnchor(attempt, index + 1));
  }

  function logTurnBlock(attempt, sizes, open) {
    const block = node("details", "log-turn");
    block.dataset.attempt = String(attempt);
    block.open = open;
    const summary = node("summary", null, "Turn " + attempt);
    const size = sizes[logs.stream + "_bytes"];
    summary.appendChild(node("span", "muted", " · " + (size ? formatNumber(size) + " bytes" : "empty")));
    block.appendChild(summary);
    block.addEventListener("toggle", () => {
      if (block.open && !logs.turns.has(attempt)) loadLogTurn(attempt).catch(showLogProblem);
    });
    return block;
  }

  // The shown stream of one turn, whose answer is loaded, as numbered lines in unbuilt chunks.
  function fillLogTurn(attempt) {
    const body = logs.bodies.get(attempt);
    const block = el("logs-turns").querySelector('.log-turn[data-attempt="' + attempt + '"]');
    if (!body || !block || logs.turns.has(attempt)) return;
    const text = body[logs.stream];
    const size = body[logs.stream + "_bytes"];
    const note = node("p", "hint log-turn-note", !size
      ? "This log is empty."
      : (body[logs.stream + "_truncated"] ? "Showing the start of " + formatNumber(size) + " bytes. " : ""));
    if (size) {
      const whole = node("a", "log-whole", "Open the whole log");
      whole.href = page.dataset.logsUrl + "?attempt=" + attempt + "&stream=" + logs.stream;
      note.appendChild(whole);
    }
    block.appendChild(note);
    const lines = text ? text.replace(/\n$/, "").split("\n") : [];
    const turn = { attempt: attempt, block: block, lines: lines, chunks: [], observer: null };
    if (lines.length) {
      const box = node("div", "log-lines");
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", "Turn " + attempt + " " + STREAM_NAMES[logs.stream] + " log, " + lines.length + " lines");
      box.tabIndex = 0;
      for (let start = 0; start < lines.length; start += LOG_CHUNK_LINES) {
        const element = node("div", "log-chunk");
        // Until built, as tall as its lines would be: the scroll bar and anchors stay right.
        element.style.height = Math.min(LOG_CHUNK_LINES, lines.length - start) * 1.5 + "em";
        element.dataset.chunk = String(turn.chunks.length);
        turn.chunks.push({ element: element, built: false });
        box.appendChild(element);
      }
      block.appendChild(box);
      if ("IntersectionObserver" in window) {
        // A chunk is built when it comes within a screen or so of the box's visible part.
        turn.observer = new IntersectionObserver(
          (entries) => entries.forEach((entry) => entry.isIntersecting && buildLogChunk(turn, Number(entry.target.dataset.chunk))),
          { root: box, rootMargin: "800px 0px" }
        );
        turn.chunks.forEach((chunk) => turn.observer.observe(chunk.element));
      } else {
        turn.chunks.forEach((chunk, index) => buildLogChunk(turn, index));
      }
    }
    turn.block.querySelector("summary .muted").textContent +=
      lines.length ? " · " + formatNumber(lines.length) + " line" + (lines.length === 1 ? "" : "s") : "";
    logs.turns.set(attempt, turn);
    findHits();
    showLinkedLine();
  }

  function showLogs() {
    const container = el("logs-turns");
    logs.turns.forEach((turn) => turn.observer && turn.observer.disconnect());
    // The turns open stay open (switching streams, refreshing); at first, the latest is.
    const wasOpen = new Set(Array.from(container.querySelectorAll(".log-turn[open]"), (block) => Number(block.dataset.attempt)));
    const firstTime = !container.children.length;
    container.textContent = "";
    logs.turns.clear();
    const attempts = (logs.index && logs.index.attempts) || [];
    if (!attempts.length) {
      el("logs-note").textContent = "No logs yet: they are written once the engine runs.";
      findHits();
      return;
    }
    el("logs-note").textContent = attempts.length > 1 ? attempts.length + " turns, each folded under its number." : "";
    const latest = attempts[attempts.length - 1].attempt_number;
    attempts.forEach(({ attempt_number: attempt, ...sizes }) => {
      const linked = logs.target && logs.target.attempt === attempt;
      const open = linked || (firstTime ? attempt === latest : wasOpen.has(attempt));
      container.appendChild(logTurnBlock(attempt, sizes, open));
      if (open) loadLogTurn(attempt).catch(showLogProblem);
    });
    if (logs.query) loadEveryTurn();
  }

  function showLogProblem(problem) {
    el("logs-note").textContent = problem.message;
  }

  function loadLogs() {
    logs.bodies.clear();
    el("logs-note").textContent = "Loading…";
    fetchLogs(null)
      .then((body) => {
        logs.index = body;
        showLogs();
      })
      .catch(showLogProblem);
  }

  // Search covers every turn of the shown stream: the turns not loaded yet are, one at a time.
  function loadEveryTurn() {
    const missing = ((logs.index && logs.index.attempts) || [])
      .map((attempt) => attempt.attempt_number)
      .filter((attempt) => !logs.bodies.has(attempt));
    missing.reduce((done, attempt) => done.then(() => loadLogTurn(attempt)), Promise.resolve()).catch(showLogProblem);
  }

  function findHits() {
    const needle = logs.query.toLowerCase();
    const previous = logs.hits[logs.current];
    logs.hits = [];
    if (needle) {
      Array.from(logs.turns.values())
        .sort((a, b) => a.attempt - b.attempt)
        .forEach((turn) => {
          turn.lines.forEach((text, line) => {
            const lower = text.toLowerCase();
            for (let at = lower.indexOf(needle); at !== -1; at = lower.indexOf(needle, at + needle.length)) {
              logs.hits.push({ attempt: turn.attempt, line: line, start: at });
            }
          });
        });
    }
    // The hit shown stays the one shown when more turns come in.
    const kept = previous
      ? logs.hits.findIndex((hit) => hit.attempt === previous.attempt && hit.line === previous.line && hit.start === previous.start)
      : -1;
    logs.current = kept !== -1 ? kept : logs.hits.length ? 0 : -1;
    logs.turns.forEach((turn) => {
      turn.chunks.forEach((chunk, chunkIndex) => {
        if (!chunk.built) return;
        chunk.element.querySelectorAll(".log-lt").forEach((text, offset) => {
          const index = chunkIndex * LOG_CHUNK_LINES + offset;
          fillLogLine(text, turn.attempt, index, turn.lines[index]);
        });
      });
    });
    showHitCount();
    if (kept === -1 && logs.current === 0) goToHit(0);
  }

  function showHitCount() {
    const count = logs.hits.length;
    el("logs-hits").textContent = !logs.query ? "" : count ? logs.current + 1 + " of " + formatNumber(count) : "No matches";
    el("logs-prev").disabled = el("logs-next").disabled = count < 2;
  }

  function goToHit(position) {
    const count = logs.hits.length;
    if (!count) return;
    const before = logs.hits[logs.current];
    logs.current = (position + count) % count;
    const hit = logs.hits[logs.current];
    [before, hit].forEach((one) => {
      const row = one && logLineElement(one.attempt, one.line);
      if (row) markCurrentHit(row.querySelector(".log-lt"), one.attempt, one.line);
    });
    const mark = logLineElement(hit.attempt, hit.line).querySelector("mark.current");
    if (mark) mark.scrollIntoView({ block: "center", inline: "nearest" });
    showHitCount();
  }

  // The line a link names: its turn opened, its stream shown, the line scrolled to and set apart.
  function readLineLink() {
    const match = LOG_LINE_ANCHOR.exec(window.location.hash);
    logs.target = match ? { attempt: Number(match[1]), stream: match[2], line: Number(match[3]) } : null;
    return logs.target;
  }

  function showLinkedLine() {
    const target = logs.target;
    if (!target || target.stream !== logs.stream || !logs.turns.has(target.attempt)) return;
    page.querySelectorAll(".log-line.targeted").forEach((row) => row.classList.remove("targeted"));
    const row = logLineElement(target.attempt, target.line - 1);
    if (!row) return;
    row.classList.add("targeted");
    if (!target.shown) {
      target.shown = true;
      row.scrollIntoView({ block: "center" });
    }
  }

  function selectLogStream(stream) {
    logs.stream = stream;
    page.querySelectorAll(".log-tab").forEach((tab) => tab.setAttribute("aria-pressed", String(tab.dataset.stream === stream)));
  }

  function followLineLink() {
    if (!readLineLink()) return;
    if (el(window.location.hash.slice(1))) {
      logs.target.shown = true; // a line number clicked: the line is where the reader is
      showLinkedLine();
      return;
    }
    const streamChanged = logs.target.stream !== logs.stream;
    selectLogStream(logs.target.stream);
    if (!el("logs").open) el("logs").open = true; // its toggle loads the logs
    else if (logs.index && streamChanged) showLogs();
    else if (logs.index) loadLogTurn(logs.target.attempt).then(showLinkedLine).catch(showLogProblem);
  }

  el("logs").addEventListener("toggle", () => {
    if (el("logs").open && !logs.index) loadLogs();
  });
  el("logs-refresh").addEventListener("click", loadLogs);
  page.querySelectorAll(".log-tab").forEach((tab) => {
    tab.addEventListener("click", () => {
      selectLogStream(tab.dataset.stream);
      showLogs();
    });
  });
  let searchTimer = null;
  el("logs-search").addEventListener("input", () => {
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(() => {
      logs.query = el("logs-search").value;
      logs.current = -1;
      findHits();
      if (logs.query) loadEveryTurn();
    }, 150);
  });
  el("logs-search").addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault(); // not a form to send
    goToHit(logs.current + (event.shiftKey ? -1 : 1));
  });
  el("logs-next").addEventListener("click", () => goToHit(logs.current + 1));
  el("logs-prev").addEventListener("click", () => goToHit(logs.current - 1));
  window.addEventListener("hashchange", followLineLink);
  followLineLink();

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

  function artifactUrl(base, path) {
    return base + path.replace(/^artifacts\//, "").split("/").map(encodeURIComponent).join("/");
  }

  // Markdown and text open in a page of the site (rendered safely); other kinds download.
  function artifactLink(path, text) {
    const link = node("a", "artifact-link", text || path.replace(/^artifacts\//, ""));
    if (PREVIEWABLE.test(path)) {
      link.href = artifactUrl(page.dataset.openBase, path);
    } else {
      link.href = artifactUrl(page.dataset.artifactBase, path);
      link.setAttribute("download", "");
    }
    return link;
  }

  function downloadLink(path) {
    const link = node("a", "download-link", "Download");
    link.href = artifactUrl(page.dataset.artifactBase, path);
    link.setAttribute("download", "");
    link.setAttribute("aria-label", "Download " + path.replace(/^artifacts\//, ""));
    return link;
  }

  function artifactNamed(value) {
    const path = value.replace(/^\.\//, "");
    return state.artifacts.has(path) ? path : null;
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
    const artifact = typeof value === "string" ? artifactNamed(value) : null;
    if (artifact) return artifactLink(artifact, value);
    return node("span", "scalar", String(value));
  }

  function recordTable(records, depth) {
    const columns = [];
    records.forEach((record) => Object.keys(record).forEach((key) => columns.includes(key) || columns.push(key)));
    const wrap = node("div", "table-wrap");
    wrap.tabIndex = 0; // it may scroll sideways: reachable from the keyboard
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", "Table of " + columns.join(", "));
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
    item.appendChild(document.createTextNode(" · "));
    item.appendChild(downloadLink(path));
    // Markdown and text are previewed inline, rendered and sanitised by the server.
    const preview = node("div", "artifact-preview");
    preview.setAttribute("role", "region");
    preview.setAttribute("aria-label", "Preview of " + path);
    item.appendChild(preview);
    fetch(artifactUrl(page.dataset.previewBase, path), { credentials: "same-origin" })
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

  // What a failure means for the person reading it; the service's own message (for an engine,
  // its CLI's words, stderr included) stays one click away.
  const ERROR_HELP = {
    ENGINE_FAILED: ["The engine stopped with an error", "Often a missing or wrong API key, model or endpoint in the engine's settings (SKILLRUNNER_<ENGINE>_…). Its own words are below; the engine logs have all of them."],
    ENGINE_SPAWN_FAILED: ["The engine could not be started", "Its CLI may be missing here; the operator installs it (make engines) or sets SKILLRUNNER_<ENGINE>_BIN."],
    TIMEOUT: ["The engine took too long", "The turn ran past its hard timeout and was stopped. Re-run it, or ask for a longer hard_timeout_seconds."],
    SANDBOX_UNAVAILABLE: ["The agent sandbox does not work here", "The operator has to fix the sandbox (bubblewrap) before any run can execute."],
    SANDBOX_LIMIT_EXCEEDED: ["The agent went over a limit", "It used more memory, processes, files or disk than a turn may."],
    OUTPUT_MISSING: ["The agent gave no result", "Its final message held no JSON object. Re-run it; if it happens again the skill's instructions may need work."],
    OUTPUT_SCHEMA_INVALID: ["The result did not match the skill's output", "Fixing it was tried and did not succeed; the problems are listed below."],
    INTERACTION_WAIT_TIMEOUT: ["No answer came in time", "The run waited for an answer longer than its session timeout."],
    UPLOAD_TIMEOUT: ["The input files never came", "The run waited for its upload longer than allowed."],
    SESSION_RESUME_FAILED: ["The conversation could not go on", "The engine reported no session to resume after your answer."],
    INTERACTIVE_MAX_ATTEMPT_EXCEEDED: ["The conversation ran out of turns", "The skill allows only so many turns before a result."],
  };

  function errorBlock(error) {
    const help = ERROR_HELP[error.code] || ["The run failed", "The service's message is below; the engine logs may say more."];
    const block = node("div", "run-error");
    block.setAttribute("role", "alert");
    const title = node("p");
    title.appendChild(node("span", "error-title", help[0]));
    title.appendChild(document.createTextNode(" "));
    title.appendChild(node("code", null, error.code));
    block.appendChild(title);
    block.appendChild(node("p", "hint", help[1]));
    const details = node("details");
    details.appendChild(node("summary", null, "Details"));
    details.appendChild(node("pre", "error-message", error.message));
    block.appendChild(details);
    return block;
  }

  function showResult(result) {
    const summary = el("result-summary");
    summary.textContent = "";
    summary.appendChild(node("span", "badge status-" + (result.status === "success" ? "succeeded" : result.status), result.status));
    if (result.error && result.error.code === "CANCELED_BY_USER") {
      summary.appendChild(document.createTextNode(" " + result.error.message + "."));
    } else if (result.error) {
      summary.appendChild(errorBlock(result.error));
    }
    const hasData = result.data !== null && result.data !== undefined;
    state.artifacts = new Set(result.artifacts || []);
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
      const cameToAnswer = window.location.hash === "#reply" && !state.focusedForLink;
      if (cameToAnswer || (state.lastSeq > state.liveFromSeq && document.activeElement === document.body)) {
        state.focusedForLink = true;
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
    state.question = window.questionForms.build(pending, { send: sendReply, sendFiles: sendFiles, limits: JSON.parse(page.dataset.replyFileLimits) });
    kindForm.textContent = "";
    if (state.question.element) kindForm.appendChild(state.question.element);
    replyForm.classList.toggle("has-kind-form", Boolean(state.question.element));
    replyTextBlock.hidden = replySend.hidden = !state.question.allowsText;
    replyTextBlock.querySelector("label").textContent = state.question.textLabel;
    replySend.textContent = pending.kind === "upload_files" ? "Send without files" : "Send";
  }

  // Files go through the file-reply path (R-UP6), with the text box's words as their message.
  async function sendFiles(files) {
    if (!state.pending || state.sending) return;
    const body = new FormData();
    const key = "web-" + PAGE_NONCE + "-" + state.pending.interaction_id;
    body.append("metadata", JSON.stringify({ interaction_id: state.pending.interaction_id, idempotency_key: key, text: replyText.value.trim() }));
    files.forEach((file) => body.append("files", file, file.name));
    state.sending = true;
    updateControls();
    try {
      const response = await fetch(page.dataset.replyFilesUrl, {
        method: "POST",
        body: body,
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": replyForm.elements.csrfmiddlewaretoken.value },
      });
      const answer = await response.json().catch(() => ({ detail: { code: "HTTP_" + response.status, message: "The files could not be sent." } }));
      if (!response.ok) return handleError(answer.detail);
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

  // A question waiting when the page opens is what the reader came for: once the history has
  // replayed, it is brought into sight above the reply card (the only scroll on load).
  function showWaitingQuestion() {
    if (state.status !== "waiting_user" || !state.pending || !conversation.lastElementChild) return;
    conversation.lastElementChild.scrollIntoView({ block: "nearest" });
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
        state.retryMs = Math.min(state.retryMs * 2, RETRY_MAX_MS);
      }
    });
  }

  connect();
})();
