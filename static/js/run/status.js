// The run's status badge and the Cancel button beside it, which follow every change of status.
import { byId } from "../lib/dom.js";
import { updateControls } from "./reply.js";
import { page, state, TERMINAL } from "./state.js";

const STATUS_LABELS = JSON.parse(page.dataset.statusLabels); // the server's one name per status
const statusBadge = byId("run-status");
const cancelButton = byId("cancel-button");

// A repair round is shown only while the run is running: a later status ends it.
export function setStatus(status, repairRound) {
  state.status = status;
  statusBadge.textContent = status === "running" && repairRound ? "Fixing the answer (round " + repairRound + ")" : STATUS_LABELS[status] || status;
  statusBadge.className = "badge status-" + status;
  cancelButton.hidden = TERMINAL.includes(status);
  updateControls();
}
