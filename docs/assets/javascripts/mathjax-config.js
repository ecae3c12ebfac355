// MathJax 3 configuration. The script itself (assets/vendor/mathjax/tex-chtml.js) is
// self-hosted and added by overrides/main.html only on pages that contain math.
// Markdown pages: pymdownx.arithmatex (generic) wraps math in .arithmatex with \( \) / \[ \],
//   and only those elements are processed.
// Lab pages: notebook Markdown cells keep $ $ / $$ $$ in nested elements of .jupyter-wrapper,
//   so there the whole page is processed (code and outputs are skipped: <pre>/<code>).
(function () {
  var lab = document.querySelector(".jupyter-wrapper") !== null;
  window.MathJax = {
    tex: {
      inlineMath: lab ? [["$", "$"], ["\\(", "\\)"]] : [["\\(", "\\)"]],
      displayMath: lab ? [["$$", "$$"], ["\\[", "\\]"]] : [["\\[", "\\]"]],
      processEscapes: true,
      processEnvironments: true
    },
    options: lab
      ? { enableMenu: false }
      : { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex", enableMenu: false },
    startup: {
      // Wide display formulas scroll (extra.css); a keyboard user must be able to focus them.
      pageReady: function () {
        return MathJax.startup.defaultPageReady().then(function () {
          document.querySelectorAll('mjx-container[display="true"]').forEach(function (el) {
            el.setAttribute("tabindex", "0");
          });
        });
      }
    }
  };
})();
