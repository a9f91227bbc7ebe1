// Usage (R-AC4): the table of tokens, cost and time per turn under the conversation, each turn's
// figures beside its activity block, and the count at the provider relay.
import { byId, node } from "../lib/dom.js";
import { getJson } from "../lib/http.js";
import { formatDuration, formatNumber } from "./format.js";
import { page, state } from "./state.js";

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

export function labelTurns() {
  // Each turn's block shows its own usage once the turn has ended.
  ((state.usage && state.usage.turns) || []).forEach((turn) => {
    const block = state.turns.get(turn.attempt);
    if (!block) return;
    const tokens = (turn.input_tokens || 0) + (turn.output_tokens || 0);
    block.usage.textContent = [tokens ? tokens.toLocaleString() + " tokens" : "", formatDuration(turn.duration_ms)].filter(Boolean).join(" · ");
  });
}

export function showUsage(status) {
  const usage = status.usage;
  byId("usage-relay").textContent = status.model_tokens ? "Counted at the provider relay: " + status.model_tokens.toLocaleString() + " tokens." : "";
  if (!usage || !usage.turns || !usage.turns.length) return;
  state.usage = usage;
  labelTurns();
  const rows = byId("usage-rows");
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
  byId("usage-section").hidden = false;
}

export function refreshUsage() {
  getJson(page.dataset.statusUrl)
    .then((response) => (response.ok ? response.json() : null))
    .then((body) => body && showUsage(body))
    .catch(() => {}); // usage is a nicety: the conversation goes on without it
}
