// Accessibility fixes for Material's markup, checked by axe-core in tests/test_browser.py.
// The search overlay has role="dialog" but no accessible name.
(function () {
  var search = document.querySelector(".md-search[role=dialog]");
  if (search && !search.hasAttribute("aria-label")) {
    search.setAttribute("aria-label", "搜索");
  }
})();
