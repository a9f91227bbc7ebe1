// The engine-logs viewer (#logs): GET …/logs (JSON: one attempt's texts, the list of attempts);
// the whole of a log from ?stream=. Each turn is a block of numbered lines, folded but for the
// latest and loaded when opened; a line's number links to it (#logs-t<turn>-<stream>-L<line>).
// Lines are built in chunks as they come into view, so a long log costs what is on screen;
// search works on the texts and marks the hits of the chunks built. Log text is only ever set as
// text, never parsed as HTML.
import { byId, node } from "../lib/dom.js";
import { errorText, getJson, readAnswer } from "../lib/http.js";
import { formatNumber } from "./format.js";
import { page } from "./state.js";

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
  return getJson(page.dataset.logsUrl + query)
    .then((response) => readAnswer(response, "The logs could not be read."))
    .then(({ body, error }) => {
      if (error) throw new Error(errorText(error));
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
  return byId(lineAnchor(attempt, index + 1));
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
  const block = byId("logs-turns").querySelector('.log-turn[data-attempt="' + attempt + '"]');
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
  const container = byId("logs-turns");
  logs.turns.forEach((turn) => turn.observer && turn.observer.disconnect());
  // The turns open stay open (switching streams, refreshing); at first, the latest is.
  const wasOpen = new Set(Array.from(container.querySelectorAll(".log-turn[open]"), (block) => Number(block.dataset.attempt)));
  const firstTime = !container.children.length;
  container.textContent = "";
  logs.turns.clear();
  const attempts = (logs.index && logs.index.attempts) || [];
  if (!attempts.length) {
    byId("logs-note").textContent = "No logs yet: they are written once the engine runs.";
    findHits();
    return;
  }
  byId("logs-note").textContent = attempts.length > 1 ? attempts.length + " turns, each folded under its number." : "";
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
  byId("logs-note").textContent = problem.message;
}

function loadLogs() {
  logs.bodies.clear();
  byId("logs-note").textContent = "Loading…";
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
  byId("logs-hits").textContent = !logs.query ? "" : count ? logs.current + 1 + " of " + formatNumber(count) : "No matches";
  byId("logs-prev").disabled = byId("logs-next").disabled = count < 2;
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
  if (byId(window.location.hash.slice(1))) {
    logs.target.shown = true; // a line number clicked: the line is where the reader is
    showLinkedLine();
    return;
  }
  const streamChanged = logs.target.stream !== logs.stream;
  selectLogStream(logs.target.stream);
  if (!byId("logs").open) byId("logs").open = true; // its toggle loads the logs
  else if (logs.index && streamChanged) showLogs();
  else if (logs.index) loadLogTurn(logs.target.attempt).then(showLinkedLine).catch(showLogProblem);
}

// The viewer's controls, and the line the address names, if any.
export function startLogs() {
  byId("logs").addEventListener("toggle", () => {
    if (byId("logs").open && !logs.index) loadLogs();
  });
  byId("logs-refresh").addEventListener("click", loadLogs);
  page.querySelectorAll(".log-tab").forEach((tab) => {
    tab.addEventListener("click", () => {
      selectLogStream(tab.dataset.stream);
      showLogs();
    });
  });
  let searchTimer = null;
  byId("logs-search").addEventListener("input", () => {
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(() => {
      logs.query = byId("logs-search").value;
      logs.current = -1;
      findHits();
      if (logs.query) loadEveryTurn();
    }, 150);
  });
  byId("logs-search").addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault(); // not a form to send
    goToHit(logs.current + (event.shiftKey ? -1 : 1));
  });
  byId("logs-next").addEventListener("click", () => goToHit(logs.current + 1));
  byId("logs-prev").addEventListener("click", () => goToHit(logs.current - 1));
  window.addEventListener("hashchange", followLineLink);
  followLineLink();
}
