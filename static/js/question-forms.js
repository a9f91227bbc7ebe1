// The controls a question's kind calls for, shared by the run page and the inbox: yes/no for
// confirm, a form built from the fields for fill_fields (checked here before sending), a file
// picker with drag and drop for upload_files, an explicit acknowledgement for risk_ack.
// choose_one's options are each page's quick replies. Everything the agent wrote goes in as text.
import { node } from "./lib/dom.js";

let made = 0;
const uid = (prefix) => prefix + "-" + (made += 1);
const EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
const INPUT_TYPES = { text: "text", number: "number", integer: "number", date: "date", email: "email" };

function button(text, className, onClick) {
  const element = node("button", className, text);
  element.type = "button";
  element.addEventListener("click", onClick);
  return element;
}

function errorLine(id) {
  const line = node("p", "field-error");
  line.id = id;
  line.hidden = true;
  return line;
}

function showError(line, control, message) {
  line.textContent = message || "";
  line.hidden = !message;
  control.setAttribute("aria-invalid", message ? "true" : "false");
}

const hints = (pending) => pending.ui_hints || {};

// --- confirm --------------------------------------------------------------------------------

function confirmControls(pending, actions) {
  if ((pending.options || []).length) return { element: null }; // the agent's own answers are its buttons
  const group = node("div", "kind-form confirm-buttons");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Yes or no");
  group.appendChild(button("Yes", "primary", () => actions.send({ confirmed: true }, "Yes")));
  group.appendChild(button("No", "", () => actions.send({ confirmed: false }, "No")));
  return { element: group };
}

// --- fill_fields ----------------------------------------------------------------------------

function fieldInput(field) {
  if (field.type === "textarea") return Object.assign(node("textarea"), { rows: 3 });
  const input = node("input");
  input.type = field.type === "boolean" ? "checkbox" : INPUT_TYPES[field.type] || "text";
  if (field.type === "integer") input.step = "1";
  if (field.type === "number") input.step = "any";
  return input;
}

// The value a field's control holds, as the reply carries it, or why it cannot be sent.
function fieldValue(field, input) {
  if (field.type === "boolean") return { value: input.checked };
  const raw = field.type === "textarea" ? input.value : input.value.trim();
  if (!raw.trim()) return field.required ? { error: "Fill this in." } : {};
  if (field.type === "number" || field.type === "integer") {
    const number = Number(raw);
    if (!Number.isFinite(number)) return { error: "Enter a number." };
    if (field.type === "integer" && !Number.isInteger(number)) return { error: "Enter a whole number." };
    return { value: number };
  }
  if (field.type === "date" && !(/^\d{4}-\d{2}-\d{2}$/.test(raw) && !Number.isNaN(Date.parse(raw)))) {
    return { error: "Enter a date as YYYY-MM-DD." };
  }
  if (field.type === "email" && !EMAIL.test(raw)) return { error: "Enter an e-mail address." };
  return { value: raw };
}

function fieldsForm(pending, actions) {
  const group = node("div", "kind-form fields-form");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "The agent's form");
  const rows = (hints(pending).fields || []).map((field) => {
    const id = uid("question-field");
    const row = node("div", "field");
    const input = fieldInput(field);
    input.id = id;
    input.name = field.name;
    const label = node("label", field.type === "boolean" ? "inline-check" : null);
    label.htmlFor = id;
    label.appendChild(document.createTextNode(field.label));
    if (field.required) {
      input.setAttribute("aria-required", "true");
      label.appendChild(node("span", "required-mark", " (required)"));
    }
    const described = [];
    const hint = field.hint ? node("p", "hint", field.hint) : null;
    if (hint) {
      hint.id = id + "-hint";
      described.push(hint.id);
    }
    const error = errorLine(id + "-error");
    described.push(error.id);
    input.setAttribute("aria-describedby", described.join(" "));
    if (field.type === "boolean") {
      label.prepend(input);
      row.appendChild(label);
    } else {
      row.appendChild(label);
      row.appendChild(input);
    }
    if (hint) row.appendChild(hint);
    row.appendChild(error);
    group.appendChild(row);
    return { field: field, input: input, error: error };
  });

  function showFieldErrors(errors) {
    rows.forEach((row) => showError(row.error, row.input, errors[row.field.name]));
    const first = rows.find((row) => errors[row.field.name]);
    if (first) first.input.focus();
  }

  const sendForm = group.appendChild(
    button("Send the form", "primary", () => {
      const values = {};
      const errors = {};
      rows.forEach((row) => {
        const read = fieldValue(row.field, row.input);
        if (read.error) errors[row.field.name] = read.error;
        else if (read.value !== undefined) values[row.field.name] = read.value;
      });
      showFieldErrors(errors);
      if (!Object.keys(errors).length) actions.send({ fields: values }, "the form");
    }),
  );
  // Enter in a one-line field sends this form, checked, never the page's own text answer.
  group.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.target.tagName !== "INPUT" || event.isComposing) return;
    event.preventDefault();
    sendForm.click();
  });
  return { element: group };
}

// --- upload_files ---------------------------------------------------------------------------

function sizeText(bytes) {
  if (bytes < 1024) return bytes + " B";
  if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + " KB";
  return (bytes / 1024 / 1024).toFixed(1) + " MB";
}

// Whether `file` matches an accept list such as ".pdf,image/*" (no list: anything goes).
function accepted(file, accept) {
  const patterns = accept.split(",").map((part) => part.trim().toLowerCase()).filter(Boolean);
  const name = file.name.toLowerCase();
  const type = (file.type || "").toLowerCase();
  return !patterns.length || patterns.some((pattern) =>
    pattern.startsWith(".") ? name.endsWith(pattern)
      : pattern.endsWith("/*") ? type.startsWith(pattern.slice(0, -1))
        : type === pattern);
}

// The kinds of file the slots accept together; a slot that names none accepts anything.
function acceptedKinds(slots) {
  return slots.length && slots.every((slot) => slot.accept) ? slots.map((slot) => slot.accept).join(",") : "";
}

function filesProblem(files, slots, limits) {
  const required = slots.filter((slot) => slot.required).length;
  const accept = acceptedKinds(slots);
  if (!files.length) return "Choose at least one file.";
  if (files.length < required) return "This question asks for " + required + " files.";
  const refused = files.find((file) => !accepted(file, accept));
  if (refused) return refused.name + " is not a kind of file asked for (" + accept + ").";
  if (files.length > limits.max_files) return "At most " + limits.max_files + " files may be sent.";
  const large = files.find((file) => file.size > limits.max_file_bytes);
  if (large) return large.name + " is larger than " + sizeText(limits.max_file_bytes) + ".";
  const total = files.reduce((sum, file) => sum + file.size, 0);
  if (total > limits.max_total_bytes) return "Together the files are larger than " + sizeText(limits.max_total_bytes) + ".";
  return "";
}

function filePicker(pending, actions) {
  const slots = hints(pending).files || [];
  const chosen = [];
  const group = node("div", "kind-form files-form");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Files to send");
  if (slots.length) {
    const asked = node("ul", "file-slots");
    slots.forEach((slot) => {
      const item = node("li");
      item.appendChild(node("strong", null, slot.name));
      const notes = [slot.required ? "required" : "optional", slot.accept, slot.hint].filter(Boolean);
      item.appendChild(document.createTextNode(" — " + notes.join(" · ")));
      asked.appendChild(item);
    });
    group.appendChild(asked);
  }
  const zone = node("div", "drop-zone");
  const input = node("input");
  input.type = "file";
  input.multiple = true;
  input.id = uid("question-files");
  input.accept = acceptedKinds(slots);
  const label = node("label", null, "Choose files");
  label.htmlFor = input.id;
  zone.appendChild(label);
  zone.appendChild(input);
  zone.appendChild(node("p", "hint", "or drop them here"));
  group.appendChild(zone);
  const list = node("ul", "chosen-files");
  list.setAttribute("aria-label", "Chosen files");
  group.appendChild(list);
  const problem = errorLine(uid("question-files-error"));
  problem.setAttribute("role", "alert");
  input.setAttribute("aria-describedby", problem.id);

  function showChosen() {
    list.textContent = "";
    chosen.forEach((file, index) => {
      const item = node("li", null, file.name + " (" + sizeText(file.size) + ") ");
      item.appendChild(button("Remove", "link-button", () => {
        chosen.splice(index, 1);
        showChosen();
      })).setAttribute("aria-label", "Remove " + file.name);
      list.appendChild(item);
    });
  }

  function add(files) {
    Array.from(files).forEach((file) => chosen.push(file));
    showError(problem, input, "");
    showChosen();
  }

  input.addEventListener("change", () => {
    add(input.files);
    input.value = ""; // the list above holds them: choosing again adds more
  });
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("dragging");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    add(event.dataTransfer.files);
  });
  group.appendChild(problem);
  group.appendChild(
    button("Send files", "primary", () => {
      const why = filesProblem(chosen, slots, actions.limits);
      showError(problem, input, why);
      if (!why) actions.sendFiles(chosen.slice());
    }),
  );
  return { element: group, textLabel: "Message (sent with the files, or alone)", shortLabel: "Message (optional)" };
}

// --- risk_ack -------------------------------------------------------------------------------

function acknowledgement(pending, actions) {
  const group = node("div", "kind-form risk-form");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Acknowledge the risk");
  if (hints(pending).risk) group.appendChild(node("p", "risk-statement", hints(pending).risk));
  const box = node("input");
  box.type = "checkbox";
  box.id = uid("question-risk");
  const label = node("label", "inline-check");
  label.appendChild(box);
  label.appendChild(document.createTextNode(" I understand the risk and want to go ahead"));
  label.htmlFor = box.id;
  group.appendChild(label);
  const problem = errorLine(box.id + "-error");
  problem.setAttribute("role", "alert");
  box.setAttribute("aria-describedby", problem.id);
  group.appendChild(problem);
  const row = node("div", "risk-buttons");
  row.appendChild(button("Go ahead", "primary", () => {
    showError(problem, box, box.checked ? "" : "Tick the box to acknowledge the risk first.");
    if (box.checked) actions.send({ acknowledged: true }, "Go ahead");
  }));
  row.appendChild(button("Don't go ahead", "", () => actions.send({ acknowledged: false }, "Don't go ahead")));
  group.appendChild(row);
  return { element: group };
}

const BUILDERS = { confirm: confirmControls, fill_fields: fieldsForm, upload_files: filePicker, risk_ack: acknowledgement };

// What a question's kind adds to a page's answer area: `element` (null when the kind needs no
// control of its own) and whether free text is offered and under which label (a short one for a
// one-line box). `actions` has send(response, caption) (the caption names the answer for a
// confirmation), sendFiles(files) and the file reply's limits.
export function build(pending, actions) {
  const builder = BUILDERS[pending.kind];
  const built = builder ? builder(pending, actions) : { element: null };
  const own = !builder; // no controls of its own (open_text, choose_one): the text box is the answer
  return {
    element: built.element,
    allowsText: pending.kind !== "choose_one" || hints(pending).allow_free_text !== false,
    textLabel: built.textLabel || (own ? "Your answer" : "Or answer in your own words"),
    shortLabel: built.shortLabel || (own ? "Your answer" : "Or in your own words"), // a one-line box's placeholder
  };
}
