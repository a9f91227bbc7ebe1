// Live activity (R-AC1, R-AC5): one folded-out block per turn in the conversation; a new turn
// folds the earlier ones, which stay one click away (a marker shows each block opens) and say
// they finished. Tool rows update in place.
import { node } from "../lib/dom.js";
import { addEntry, followsLiveEdge } from "./conversation.js";
import { clock, formatDuration } from "./format.js";
import { readableCommand } from "./shell.js";
import { state } from "./state.js";
import { labelTurns } from "./usage.js";

export function turnBlock(event) {
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

export function finishTurns() {
  state.turns.forEach((turn) => {
    if (turn.details.classList.contains("finished")) return;
    turn.details.classList.add("finished");
    turn.details.open = false;
    turn.progress.textContent = "finished";
  });
}

export function addStep(turn, className, ts) {
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

const MARKS = { running: "…", ok: "✓", failed: "✗", stopped: "■" };
const MARK_LABELS = { running: "running", ok: "succeeded", failed: "failed", stopped: "stopped" };

function setMark(row, status) {
  row.item.classList.remove("running", "ok", "failed", "stopped");
  row.item.classList.add(status);
  row.mark.textContent = MARKS[status];
  row.mark.setAttribute("aria-label", MARK_LABELS[status]);
  row.mark.title = MARK_LABELS[status];
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

export function showActivity(event) {
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

export function stopRunningTools() {
  // The turn ended: a tool that never reported back was stopped with it.
  state.turns.forEach((turn) => {
    turn.tools.forEach((row) => {
      if (row.item.classList.contains("running")) setMark(row, "stopped");
    });
  });
}
