// When a search finds nothing, offer a way on instead of an empty list: the glossary, the question
// bank, and the site's terms nearest to the query (by prefix, containment, edit distance, or shared
// Chinese character pairs). The terms (page titles, glossary, synonyms; search/terms.json, written by
// tools/searchindex.py) are fetched at the first query that finds nothing, never on page load.
(function () {
  var config = JSON.parse(document.getElementById("__config").textContent);
  var base = new URL(config.base, location.href); // resolved once (instant navigation keeps this document)
  var none = (config.translations || {})["search.result.none"];
  var result = document.querySelector(".md-search-result");
  var meta = document.querySelector(".md-search-result__meta");
  var input = document.querySelector(".md-search__input");
  if (!result || !meta || !input || !none) return;
  var terms = null;
  var box = document.createElement("div");
  box.className = "search-suggest";
  box.hidden = true;
  meta.insertAdjacentElement("afterend", box);

  function fold(s) { return s.toLowerCase().replace(/[\s\-_.·]+/g, ""); }

  function distance(a, b, limit) { // Levenshtein, giving up past `limit`
    if (Math.abs(a.length - b.length) > limit) return limit + 1;
    var prev = [], cur, i, j;
    for (j = 0; j <= b.length; j++) prev[j] = j;
    for (i = 1; i <= a.length; i++) {
      cur = [i];
      var best = i;
      for (j = 1; j <= b.length; j++) {
        cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
        if (cur[j] < best) best = cur[j];
      }
      if (best > limit) return limit + 1;
      prev = cur;
    }
    return prev[b.length];
  }

  function pairs(s) {
    var out = {};
    for (var i = 0; i + 1 < s.length; i++) out[s.substr(i, 2)] = true;
    return out;
  }

  // Lower is nearer; null when the term is not related to the query at all.
  function score(q, label) {
    var t = fold(label);
    if (!t || !q) return null;
    if (t === q) return 0;
    if (t.indexOf(q) === 0 || (q.indexOf(t) === 0 && t.length >= 2)) return 1 + Math.abs(t.length - q.length) / 100;
    if (q.length >= 2 && t.indexOf(q) > 0) return 2 + t.length / 100;
    if (t.length >= 2 && q.indexOf(t) > 0) return 2.5 + (q.length - t.length) / 100;
    if (/[\u3400-\u9fff]/.test(q)) { // Chinese: share character pairs
      var a = pairs(q), b = pairs(t), shared = 0, total = 0, k;
      for (k in a) { total++; if (b[k]) shared++; }
      for (k in b) if (!a[k]) total++;
      return shared > 0 ? 3 + (1 - shared / total) : null;
    }
    var limit = q.length <= 4 ? 1 : q.length <= 8 ? 2 : 3;
    var d = distance(q, t, limit);
    if (d <= limit) return 3 + d / 10;
    // a typo in the first letters of a longer term or of one of its words: "tensr" for Tensor Core
    if (q.length < 4) return null;
    var best = limit + 1;
    [label.toLowerCase()].concat(label.toLowerCase().split(/[\s\-_]+/)).forEach(function (w) {
      w = fold(w);
      if (w.length > q.length) best = Math.min(best, distance(q, w.slice(0, q.length), limit));
    });
    return best <= Math.min(limit, 1) ? 4 + best / 10 : null;
  }

  function nearest(query) {
    var q = fold(query), seen = {}, scored = [];
    terms.terms.forEach(function (entry, i) {
      var s = score(q, entry[0]);
      if (s !== null) scored.push([s, entry[0], entry[1], i]);
    });
    // nearest first; among equals, the list's order (a page title, then the site's own spelling of a
    // term before what readers type for it, then the glossary)
    scored.sort(function (x, y) { return x[0] - y[0] || x[3] - y[3]; });
    return scored.filter(function (x) {
      var key = x[2] + "|" + fold(x[1]);
      if (seen[key] || seen[x[1]]) return false;
      seen[key] = seen[x[1]] = true;
      return true;
    }).slice(0, 8);
  }

  function link(label, path) {
    var a = document.createElement("a");
    a.href = new URL(path, base).href;
    a.textContent = label;
    return a;
  }

  function show(query) {
    box.textContent = "";
    var p = document.createElement("p");
    p.append("换个说法，或者从这里找：", link("术语表（glossary）", terms.glossary), "：全站缩写与术语的中英对照；",
             link("题库（question bank）", terms.questions), "：按层列出的面试题，链接到回答它的小节。");
    box.appendChild(p);
    var near = nearest(query);
    if (near.length) {
      var q = document.createElement("p");
      q.className = "search-suggest__terms";
      q.append("相近的词（related terms）：");
      near.forEach(function (x, i) {
        if (i) q.append(" · ");
        q.appendChild(link(x[1], x[2]));
      });
      box.appendChild(q);
    }
    box.hidden = false;
  }

  function update() {
    var query = input.value.trim();
    if (!query || meta.textContent.trim() !== none) { box.hidden = true; return; }
    if (terms) return show(query);
    fetch(new URL("search/terms.json", base)).then(function (r) { return r.json(); }).then(function (data) {
      terms = data;
      if (input.value.trim() && meta.textContent.trim() === none) show(input.value.trim());
    }).catch(function (e) { console.error("search suggestions: " + e.message); });
  }

  new MutationObserver(update).observe(meta, { childList: true, characterData: true, subtree: true });
  // a click on a suggestion closes the search like a click on a result does
  box.addEventListener("click", function (e) {
    if (e.target.closest("a")) {
      var toggle = document.querySelector("[data-md-toggle=search]");
      if (toggle) toggle.checked = false;
    }
  });
})();
