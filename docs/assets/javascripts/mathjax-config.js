// MathJax 3 configuration. The script itself (assets/vendor/mathjax/tex-chtml.js) is
// self-hosted and added by overrides/main.html only on pages that contain math.
// Markdown pages: pymdownx.arithmatex (generic) wraps math in .arithmatex with \( \) / \[ \].
// Lab pages: notebook Markdown cells keep $ $ / $$ $$ inside .jupyter-wrapper.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jupyter-wrapper",
    enableMenu: false
  }
};
