// Copy buttons (templates/_copy_button.html): copy the text of the element their data-copy names,
// by the Clipboard API where the page may use it (HTTPS, localhost), else by selecting the text
// and the browser's copy command; "Copied" (or how to copy by hand) is announced beside them.
// The buttons stay hidden without JavaScript: the text is selectable anyway.
(function () {
  "use strict";

  function selectText(element) {
    const range = document.createRange();
    range.selectNodeContents(element);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function copyBySelection(element) {
    selectText(element);
    try {
      return document.execCommand("copy");
    } catch (error) {
      return false;
    }
  }

  function copy(element) {
    const text = element.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).then(
        () => true,
        () => copyBySelection(element)
      );
    }
    return Promise.resolve(copyBySelection(element));
  }

  document.querySelectorAll("button.copy-button").forEach((button) => {
    const source = document.getElementById(button.dataset.copy);
    const status = button.nextElementSibling;
    if (!source) return;
    button.hidden = false;
    button.addEventListener("click", () => {
      status.textContent = ""; // a second copy is announced again
      copy(source).then((copied) => {
        if (copied) {
          status.textContent = "Copied";
        } else {
          selectText(source); // the text is selected: the reader copies it with the keyboard
          status.textContent = "Could not copy: the text is selected, press Ctrl+C (⌘C on a Mac) to copy it.";
        }
      });
    });
  });
})();
