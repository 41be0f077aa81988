// The policy editor (templates/agents/_policy_editor.html): a line-number gutter beside each code textarea
// (`data-code-field`), the line an error names (`data-error-line`) marked in it, and `data-remove-policy`
// removing its binding or module. Without this script the fields are plain textareas.
(function () {
  "use strict";

  function draw(box) {
    const area = box.querySelector("textarea");
    let gutter = box.querySelector(".gutter");
    if (!gutter) {
      gutter = document.createElement("div");
      gutter.className = "gutter";
      gutter.setAttribute("aria-hidden", "true");
      box.insertBefore(gutter, area);
      area.addEventListener("input", () => draw(box));
      area.addEventListener("scroll", () => { gutter.scrollTop = area.scrollTop; });
    }
    const count = area.value.split("\n").length;
    const marked = Number(box.dataset.errorLine || 0);
    if (gutter.childElementCount !== count) {
      gutter.replaceChildren();
      for (let line = 1; line <= count; line += 1) {
        const number = document.createElement("span");
        number.textContent = String(line);
        if (line === marked) number.className = "error";
        gutter.appendChild(number);
      }
    }
    gutter.scrollTop = area.scrollTop;
  }

  function drawAll(root) {
    root.querySelectorAll("[data-code-field]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", () => drawAll(document));
  document.addEventListener("htmx:load", (event) => drawAll(event.target));
  document.addEventListener("click", (event) => {
    const remover = event.target.closest("[data-remove-policy]");
    if (remover) remover.closest("[data-policy-row]").remove();
  });
})();
