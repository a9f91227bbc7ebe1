// What each kind of run event shows on the page: one renderer per event kind, keyed as the
// event log names them (status, activity, assistant_message, interaction_pending, …).
import { node } from "../lib/dom.js";
import { addStep, finishTurns, showActivity, stopRunningTools, turnBlock } from "./activity.js";
import { addEntry, addNote, answerText, messageBody, noteAnswered, showQuestion } from "./conversation.js";
import { showFinished } from "./elapsed.js";
import { addWarning, showResult } from "./result.js";
import { state, TERMINAL } from "./state.js";
import { setStatus } from "./status.js";
import { refreshUsage } from "./usage.js";

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
  setStatus(to, event.payload.repair_round);
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

export const renderers = {
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
