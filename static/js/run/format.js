// How the run page writes values: JSON texts, durations, counts, and event times of day.
import { node } from "../lib/dom.js";
import { timeOfDay } from "../lib/times.js";

export function asText(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

// The JSON object a text holds, or null when it holds something else.
export function parseJsonObject(text) {
  const trimmed = (text || "").trim();
  if (!trimmed.startsWith("{")) return null;
  try {
    const value = JSON.parse(trimmed);
    return value && typeof value === "object" ? value : null;
  } catch (error) {
    return null;
  }
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined) return "";
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
}

export function formatNumber(value) {
  return value === null || value === undefined ? "—" : value.toLocaleString();
}

// An event's time as HH:MM:SS in the reader's zone, the instant itself in its datetime.
export function clock(ts) {
  const time = node("time", "at", timeOfDay(new Date(ts), true));
  time.dateTime = ts;
  return time;
}
