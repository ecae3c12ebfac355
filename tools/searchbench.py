"""Search as a reader meets it across a visit, in Chromium (Playwright): shared by tools/sitebench.py
(`make bench-site` reports the figure) and tests/test_search.py (which asserts the behaviour).

The figure: the reader searches on a first page (the index is fetched and built then), follows a link
to a second page, and searches again; how long from the key-up of that query to its first result.
With instant navigation (tools/instant_nav.py) the second page is swapped into the same document, so
the worker that holds the index is still there; without it every page rebuilt the index (1.7–2.2 s).

Material engages instant navigation only for links listed in sitemap.xml, whose addresses are the
deployed site's (site_url). A site served on a localhost port is given the sitemap the deployment
would have (the same pages at the server's address), so it is measured as readers get it.
"""
from __future__ import annotations

import re
from urllib.parse import urlparse

_TIMER = """() => {
    if (window.__searchTimer) return;
    window.__searchTimer = true;
    const input = document.querySelector('.md-search__input');
    const list = document.querySelector('.md-search-result__list');
    input.addEventListener('keyup', () => { window.__t0 = performance.now(); window.__t1 = null; }, true);
    new MutationObserver(() => {
        if (window.__t0 && window.__t1 === null && list.querySelector('.md-search-result__item'))
            window.__t1 = performance.now();
    }).observe(list, {childList: true, subtree: true});
}"""


def serve_sitemap_here(context, base: str) -> None:
    """Answer sitemap.xml with the deployed site's pages at `base` (see the module docstring)."""
    def handle(route):
        response = route.fetch()
        body = response.text()
        first = re.search(r"<loc>([^<]*)</loc>", body)
        if first:  # the first entry is the home page: its address is the site_url prefix
            body = body.replace(f"<loc>{first.group(1)}", f"<loc>{base}")
        route.fulfill(response=response, body=body)

    context.route(re.compile(r".*/sitemap\.xml$"), handle)


def clear(page) -> None:
    """Empty the search box and wait until Material shows its prompt again (no results, no count)."""
    box = page.locator(".md-search__input")
    box.fill("")
    page.keyboard.press("End")
    page.wait_for_function("""() => {
        const prompt = JSON.parse(document.getElementById('__config').textContent).translations['search.result.placeholder'];
        const meta = document.querySelector('.md-search-result__meta');
        return !document.querySelector('.md-search-result__item') && (!meta || meta.textContent.trim() === prompt);
    }""", timeout=60_000)  # the first search of a page waits for the index to be built


def timed_query(page, query: str, timeout_ms: int = 60_000, settled: bool = True) -> float:
    """Milliseconds from the key-up that makes Material search `query` to its first result on screen.
    settled: wait for the search to be ready first (otherwise the wait for the index is part of it, as
    for a reader who types at once on a page whose index is not built yet)."""
    page.evaluate(_TIMER)
    box = page.locator(".md-search__input")
    box.click()
    if settled:
        clear(page)
    box.fill(query)  # no key events: the search starts at the key-up below, as a reader's last key
    page.evaluate("() => { window.__t0 = null; window.__t1 = null; }")
    page.keyboard.press("End")
    page.wait_for_function("window.__t1 !== null && window.__t0 !== null", timeout=timeout_ms)
    return page.evaluate("window.__t1 - window.__t0")


def follow_link(page, path: str) -> bool:
    """Click the first link to `path` on the page (search closed), wait for that page; True if the
    document stayed the same (instant navigation), False if the browser loaded a new one."""
    page.evaluate("() => { const t = document.querySelector('[data-md-toggle=search]'); if (t) t.checked = false; "
                  "window.__sameDocument = true; }")
    page.evaluate("""(path) => {
        const a = [...document.querySelectorAll('a[href]')].find(a => new URL(a.href, location.href).pathname.endsWith('/' + path));
        if (!a) throw new Error('no link to ' + path);
        a.click();
    }""", path)
    page.wait_for_function("(path) => location.pathname.endsWith('/' + path) && document.readyState === 'complete'",
                           arg=path, timeout=30_000)
    page.wait_for_load_state("networkidle")
    return bool(page.evaluate("window.__sameDocument === true"))


def ready_after_navigation(browser, base: str, first: str = "operator/", second: str = "operator/vector-add/",
                           queries: tuple[str, ...] = ("FlashAttention", "共享内存", "NCCL", "量化")) -> dict:
    """Search on `first`, follow a link to `second`, search again at once: from the key-up to the first
    result (with the index built on the first page and kept, milliseconds; rebuilt, seconds). Then a
    few more queries on the second page. Returns the figures and what happened."""
    context = browser.new_context()
    serve_sitemap_here(context, base)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(base + first)
        page.wait_for_load_state("networkidle")
        # the first search of the visit: from focusing the box (the index is fetched and built) to a result
        start = page.evaluate("performance.now()")
        page.locator(".md-search__input").click()
        page.locator(".md-search__input").fill(queries[0])
        page.keyboard.press("End")
        page.wait_for_selector(".md-search-result__item", timeout=60_000)
        first_ms = page.evaluate("performance.now()") - start
        clear(page)
        same = follow_link(page, second)
        after = [timed_query(page, queries[1], settled=False)] + [timed_query(page, q) for q in queries[2:]]
        return {"first page, focus to first result (ms)": first_ms, "after navigation (ms)": after[0], "all after (ms)": after,
                "same document": same,
                "index requests": sum(urlparse(u).path.endswith("search/search_index.json") for u in requests)}
    finally:
        context.close()
