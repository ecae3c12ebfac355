// Renders math with the self-hosted KaTeX; overrides/main.html loads this only on pages with math.
// Markdown pages: pymdownx.arithmatex (generic) leaves \( \) and \[ \] inside .arithmatex elements.
// Lab pages: notebook Markdown cells keep $ $ and $$ $$ inside .jupyter-wrapper .jp-MarkdownOutput;
// only those are searched, never code cells or outputs (walking every lab's outputs made the
// one-page edition take over five minutes to open). A formula KaTeX cannot parse is reported on
// the console (the browser tests fail on console errors) and left as its source.
(function () {
  // (the one-page edition holds many labs, hence querySelectorAll)
  var wrappers = document.querySelectorAll(".jupyter-wrapper");
  var lab = wrappers.length > 0;
  var delimiters = [
    { left: "\\[", right: "\\]", display: true },
    { left: "\\(", right: "\\)", display: false }
  ];
  if (lab) {
    delimiters = [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false }
    ].concat(delimiters);
  }
  var targets = Array.prototype.slice.call(document.querySelectorAll(".jupyter-wrapper .jp-MarkdownOutput")).concat(Array.prototype.slice.call(document.querySelectorAll(".arithmatex")));
  targets.forEach(function (el) {
    renderMathInElement(el, { delimiters: delimiters });
  });
  // Wide display formulas scroll (extra.css); keyboard users must be able to focus them.
  document.querySelectorAll(".katex-display").forEach(function (el) {
    el.setAttribute("tabindex", "0");
  });
})();
