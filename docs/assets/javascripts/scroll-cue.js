// A visible cue where content scrolls sideways inside the column (issue 30): display formulas and
// diagrams wider than the column get data-scroll="start" | "middle" | "end" from their scroll
// position, and reader.css fades the edge that has more beyond it. Scroll events are caught on the
// document (they do not bubble, but they can be captured), so pages swapped in by instant
// navigation need nothing; the overflow itself is measured again on document$, on resize and when
// fonts finish loading (KaTeX's fonts change a formula's width).
(function () {
  var SELECTOR = ".md-typeset .katex-display, .md-typeset .diagram > .mermaid";

  function update(el) {
    var max = el.scrollWidth - el.clientWidth;
    if (max <= 1) { el.removeAttribute("data-scroll"); return; }
    var x = Math.abs(el.scrollLeft);
    el.setAttribute("data-scroll", x <= 1 ? "start" : x >= max - 1 ? "end" : "middle");
  }

  function all() {
    document.querySelectorAll(SELECTOR).forEach(update);
    // a wide table scrolls in its wrapper (its first column stays, reader.css): keyboard users must reach it
    document.querySelectorAll(".md-typeset__scrollwrap").forEach(function (w) {
      if (w.scrollWidth > w.clientWidth + 1) w.setAttribute("tabindex", "0");
      else if (w.getAttribute("tabindex") === "0") w.removeAttribute("tabindex");
    });
  }

  document.addEventListener("scroll", function (e) {
    if (e.target.matches && e.target.matches(SELECTOR)) update(e.target);
  }, true);
  var timer = null;
  window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(all, 150); });
  // lab pages typeset their math after a swap (instant-pages.js): measure again a little later
  if (typeof document$ !== "undefined") document$.subscribe(function () { all(); setTimeout(all, 1500); });
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all);
  else all();
  window.addEventListener("load", all);
  if (document.fonts && document.fonts.ready) document.fonts.ready.then(all);
})();
