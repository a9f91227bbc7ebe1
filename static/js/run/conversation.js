// The conversation list (#conversation): one entry per message, question, answer and note, and
// whether the page follows the live edge as entries come.
import { byId, node } from "../lib/dom.js";
import { asText, clock, parseJsonObject } from "./format.js";
import { state } from "./state.js";

export const conversation = byId("conversation");

// Follow the live edge only for a reader already there: history replayed on load never moves
// the page (its title, status and Re-run stay in view), nor does a reader scrolled up to read.
export function followsLiveEdge() {
  const root = document.scrollingElement || document.documentElement;
  const atEdge = root.scrollTop + window.innerHeight >= root.scrollHeight - 48;
  return state.lastSeq > state.liveFromSeq && atEdge;
}

export function addEntry(seq, className, who, body, ts) {
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

export function messageBody(text) {
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

export function addNote(seq, text, ts) {
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

export function showQuestion(event) {
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

// A reply as people read it: the service words structured replies (a form's values one a line).
export function answerText(payload) {
  return typeof payload.text === "string" ? payload.text : asText(payload.response);
}

// The note saying the run waits becomes what was answered, once it is, at the answer's time.
export function noteAnswered(payload, ts) {
  if (!state.waitingNote) return;
  state.waitingNote.querySelector("time.at").replaceWith(clock(payload.answered_at || ts));
  const auto = payload.resolution_mode === "auto_decide_timeout";
  const answer = answerText(payload).replace(/\s+/g, " ");
  const text = (auto ? "Decided automatically: " : "Answered: ") + (answer.length > 80 ? answer.slice(0, 79) + "…" : answer);
  state.waitingNote.querySelector(".text").textContent = text;
  state.waitingNote.classList.add("answered");
  state.waitingNote = null;
}
