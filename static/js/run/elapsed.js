// The run's facts at the top of the page: how long it has run (ticking until it ends) and when
// it finished, in the reader's zone.
import { byId } from "../lib/dom.js";
import { formatSpan, localStamp } from "../lib/times.js";
import { state } from "./state.js";

let ticker = null; // the interval that ticks the elapsed time until the run ends

function showElapsed() {
  byId("run-elapsed").textContent = formatSpan((state.finishedAt || Date.now()) - state.createdAt);
}

export function showFinished(at) {
  if (state.finishedAt === null) state.finishedAt = at;
  const finished = byId("run-finished");
  finished.dateTime = new Date(state.finishedAt).toISOString();
  finished.textContent = localStamp(new Date(state.finishedAt), true);
  byId("finished-fact").hidden = false;
  byId("elapsed-label").textContent = "Took";
  showElapsed();
  window.clearInterval(ticker);
}

export function startElapsed() {
  showElapsed();
  if (state.finishedAt === null) ticker = window.setInterval(showElapsed, 1000);
}
