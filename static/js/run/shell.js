// A command as the agent meant it: Codex's `/bin/bash -lc '<script>'` unquoted back to the script.

// One shell word as a shell reads it ('…' as is; "…" with \\ \" \$ \` escapes; $'…' with C
// escapes), or null unless the text is exactly one word.
const C_ESCAPES = { n: "\n", t: "\t", r: "\r", "\\": "\\", "'": "'", '"': '"', a: "\x07", b: "\b", e: "\x1b", f: "\f", v: "\v" };

function shellWord(text) {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end < 0) return null;
      out += text.slice(i + 1, end);
      i = end + 1;
    } else if (c === "$" && text[i + 1] === "'") {
      i += 2;
      while (i < text.length && text[i] !== "'") {
        if (text[i] === "\\" && i + 1 < text.length) {
          out += C_ESCAPES[text[i + 1]] !== undefined ? C_ESCAPES[text[i + 1]] : "\\" + text[i + 1];
          i += 2;
        } else {
          out += text[i++];
        }
      }
      if (i >= text.length) return null;
      i += 1;
    } else if (c === '"') {
      i += 1;
      while (i < text.length && text[i] !== '"') {
        if (text[i] === "\\" && '"\\$`\n'.includes(text[i + 1])) {
          if (text[i + 1] !== "\n") out += text[i + 1];
          i += 2;
        } else {
          out += text[i++];
        }
      }
      if (i >= text.length) return null;
      i += 1;
    } else if (/\s/.test(c)) {
      return null;
    } else if (c === "\\") {
      out += text[i + 1] || "";
      i += 2;
    } else {
      out += c;
      i += 1;
    }
  }
  return out;
}

// Codex reports a command as the shell line it ran, `/bin/bash -lc '<script>'`, quoted for
// the shell: shown (and copied) as the script itself, its newlines and quotes as written.
export function readableCommand(command) {
  const wrapped = /^(?:\/\S*\/)?(?:ba|z|da)?sh\s+-l?c\s+([\s\S]+)$/.exec((command || "").trim());
  const script = wrapped ? shellWord(wrapped[1]) : null;
  return script === null ? command || "" : script;
}
