"""Instant navigation (Material's `navigation.instant`, mkdocs.yml): the page stays loaded when the
reader follows a link, and only its content is swapped, so the search index built by the worker on
the first search serves every later page of the visit (tools/searchindex.py, issue 30: after the first
page, the first result in at most 300 ms; rebuilding the index on every page took 1.7–2.2 s).

Material re-runs the scripts inside the swapped content, not the ones a page loads at its end
(overrides/main.html loads KaTeX only on pages that need it): docs/assets/javascripts/instant-pages.js
loads those for the page swapped in. Two things cannot follow the swap and are handled here:

- without build-time diagrams (no Chromium) Material would fetch Mermaid from a CDN for the first
  page with a diagram reached by a swap, so the build turns instant navigation off then;
- nbconvert's template leaves `<script src=""> </script>` (its MathJax loader with no URL) in every
  lab; Material re-creates it on a swap and waits for a load event an empty src never fires. It
  loads nothing, so it goes;
- Material makes every link of a page absolute before a swap by assigning `el.href = el.href`, which
  throws on a link inside an inline SVG (its `href` cannot be assigned): the home page's stack map
  logged a TypeError, and a swap to a page with such a link would have stopped instant navigation
  for the rest of the visit. The bundle is patched to leave SVG links as they are (a click on one is
  an ordinary navigation anyway: Material skips links whose `target` is set, and an SVG link's is).

Any script that changes page content must run again for each page: subscribe to Material's
`document$` (it emits on the first load and after every swap), not to DOMContentLoaded.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

from tools import diagrams

log = logging.getLogger("mkdocs.plugins.handbook")
FEATURE = "navigation.instant"
_EMPTY_SCRIPT = '<script src=""> </script>'


def configure(config) -> None:
    features = config["theme"]["features"] if "features" in config["theme"] else []
    if FEATURE in features and diagrams.chromium() is None:
        features.remove(FEATURE)
        log.info("no Chromium, so diagrams are rendered in the browser: instant navigation is off for this build "
                 "(a swapped-in page would fetch Mermaid from a CDN)")


def page_html(html: str) -> str:
    return html.replace(_EMPTY_SCRIPT, "")


# Material's resolve(): for (el of "[href], [src]") ... el[key] = el[key]; break
_RESOLVE = re.compile(r"(\w)\[(\w)\]=\1\[\2\];break")


class BundleError(RuntimeError):
    pass


def patch_bundle(site_dir: Path) -> None:
    bundles = sorted((site_dir / "assets" / "javascripts").glob("bundle.*.min.js"))
    if len(bundles) != 1:
        raise BundleError(f"expected one Material bundle, found {len(bundles)} (fix: re-check patch_bundle in tools/instant_nav.py)")
    text = bundles[0].read_text(encoding="utf-8")
    if "instanceof SVGElement||" in text:  # a dirty rebuild kept the patched copy
        return
    found = _RESOLVE.findall(text)
    if len(found) != 1:
        raise BundleError("Material's bundle changed: instant navigation's link resolution is no longer the "
                          "assignment tools/instant_nav.py patches, so an SVG link may break it (fix: check how "
                          "the new bundle resolves links before a swap, then update or remove patch_bundle)")
    text = _RESOLVE.sub(lambda m: f"{m[1]} instanceof SVGElement||({m[1]}[{m[2]}]={m[1]}[{m[2]}]);break", text)
    bundles[0].write_text(text, encoding="utf-8")
