// Instant navigation (navigation.instant; see tools/instant_nav.py) swaps a page's content without
// reloading, so the search index is built once per visit. Material re-runs the scripts inside the
// swapped content only; overrides/main.html loads KaTeX at the end of the pages that need it, so
// after a swap this loads KaTeX's stylesheet and scripts for the new page and typesets it with
// katex-init.js, as a full load of that page would have done.
// A script that changes page content must run for every page: subscribe to document$, which
// emits on the first load and after every swap (DOMContentLoaded fires only once per visit).
(function () {
  if (typeof document$ === "undefined") return;
  var config = JSON.parse(document.getElementById("__config").textContent);
  var base = new URL(config.base, location.href); // resolved once: later swaps keep this document's URL base
  var pending = {};

  // loaded: whether the page loaded it already (a script's global, a stylesheet's link)
  function load(path, loaded) {
    var url = new URL(path, base).href;
    var css = /\.css$/.test(path);
    if (pending[url]) return pending[url];
    if (css) loaded = Array.prototype.some.call(document.querySelectorAll("link[rel=stylesheet]"), function (el) {
      return el.href === url;
    });
    if (loaded) return (pending[url] = Promise.resolve());
    pending[url] = new Promise(function (resolve, reject) {
      var el = document.createElement(css ? "link" : "script");
      if (css) { el.rel = "stylesheet"; el.href = url; } else { el.src = url; el.async = false; }
      el.onload = function () { if (path.indexOf("katex-init") >= 0) delete pending[url]; resolve(); };
      el.onerror = function () { reject(new Error("could not load " + url)); };
      document.body.appendChild(el); // not <head>: a swap removes what the next page's <head> lacks
    });
    return pending[url];
  }

  var first = true;
  document$.subscribe(function () {
    if (first) { first = false; return; } // a full load: the page itself loaded what it needs
    var main = document.querySelector("[data-md-component=container]") || document.body;
    var lab = Array.prototype.some.call(main.querySelectorAll(".jupyter-wrapper .jp-MarkdownOutput"), function (el) {
      return el.textContent.indexOf("$") >= 0;
    });
    var typeset = lab || main.querySelector(".arithmatex") !== null;
    if (typeset || main.querySelector(".math-static") !== null) load("assets/vendor/katex/katex.min.css");
    if (!typeset) return;
    load("assets/vendor/katex/katex.min.js", typeof katex !== "undefined")
      .then(function () { return load("assets/vendor/katex/contrib/auto-render.min.js", typeof renderMathInElement !== "undefined"); })
      .then(function () { return load("assets/javascripts/katex-init.js"); }) // runs again for every page
      .catch(function (e) { console.error(e.message); });
  });
})();
