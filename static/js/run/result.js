// The result (#result-section) and warnings (#warnings-section): the data for people as tables
// and lists, artifacts as links with previews, a failure explained. Everything is text nodes but
// the previews, which the server sanitises.
import { byId, node } from "../lib/dom.js";
import { page, state } from "./state.js";

const PREVIEWABLE = /\.(md|markdown|txt|text|log|csv|tsv|json|ya?ml|toml|xml)$/i;

export function addWarning(warning) {
  const key = warning.code + "\u0000" + warning.message;
  if (state.warnings.has(key)) return;
  state.warnings.add(key);
  const item = node("li");
  item.appendChild(node("code", null, warning.code));
  item.appendChild(document.createTextNode(" " + warning.message));
  byId("warnings").appendChild(item);
  byId("warnings-section").hidden = false;
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

export function showResult(result) {
  const summary = byId("result-summary");
  summary.textContent = "";
  summary.appendChild(node("span", "badge status-" + (result.status === "success" ? "succeeded" : result.status), result.status));
  if (result.error && result.error.code === "CANCELED_BY_USER") {
    summary.appendChild(document.createTextNode(" " + result.error.message + "."));
  } else if (result.error) {
    summary.appendChild(errorBlock(result.error));
  }
  const hasData = result.data !== null && result.data !== undefined;
  state.artifacts = new Set(result.artifacts || []);
  const view = byId("result-view");
  view.textContent = "";
  if (hasData) view.appendChild(renderValue(result.data, 0));
  byId("result-json").textContent = JSON.stringify(result.data, null, 2);
  byId("result-raw").hidden = !hasData;
  const list = byId("artifacts");
  list.textContent = "";
  (result.artifacts || []).forEach((path) => list.appendChild(artifactItem(path)));
  byId("artifacts-block").hidden = !(result.artifacts || []).length;
  (result.validation_warnings || []).forEach(addWarning);
  byId("result-section").hidden = false;
}
