// The new-run form: the model box says which model the chosen engine uses when left empty.
const engine = document.getElementById("id_engine");
const model = document.getElementById("id_model");
const hint = document.getElementById("id_model_helptext");

function showDefault() {
  const option = engine.selectedOptions[0];
  const name = option ? option.dataset.defaultModel : "";
  hint.textContent = name ? "Leave empty for the default model: " + name + "." : "Leave empty for the engine's own default model.";
  model.placeholder = name || "";
}

if (engine && model && hint) {
  engine.addEventListener("change", showDefault);
  showDefault();
}
