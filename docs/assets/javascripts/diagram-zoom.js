// Diagrams open full screen, with zoom and pan (issue 30). Build-time diagrams (tools/diagrams.py) are
// inline SVG in <div class="diagram">, which the lightbox (images only) cannot open. A click or tap on a
// diagram, its corner button, or Enter on a focused diagram opens it in a modal <dialog>: drag (or
// scroll) to pan; pinch, Ctrl/⌘ + wheel, the + and − buttons or keys to zoom; 0 fits it to the screen;
// Esc or the close button returns it to the page. The SVG itself is moved into the dialog and back,
// so its ids (arrow markers, scoped styles) stay unique. Handlers are delegated from the document, so
// pages swapped in by instant navigation need nothing; what depends on a page's layout (which
// diagrams scroll, and so need to be focusable) runs again on document$ and on resize.
(function () {
  var dialog, stage, canvas, title, opened = null, zoom = 1, fitZoom = 1, natural = null;
  var MIN_LABEL_PX = 13; // labels at least this size when the dialog opens

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text) e.textContent = text;
    return e;
  }

  function button(label, text, action) {
    var b = el("button", { type: "button", "aria-label": label, title: label, "data-zoom-action": action }, text);
    b.className = "diagram-zoom__button";
    return b;
  }

  function build() {
    dialog = el("dialog", { "aria-label": "全屏查看示意图" });
    dialog.className = "diagram-zoom";
    var bar = el("div");
    bar.className = "diagram-zoom__bar";
    title = el("p");
    title.className = "diagram-zoom__title";
    var hint = el("p", {}, "拖动平移 · 双指或 Ctrl+滚轮缩放 · Esc 关闭");
    hint.className = "diagram-zoom__hint";
    bar.append(title, hint, button("缩小", "−", "out"), button("适应屏幕", "⤢", "fit"),
               button("放大", "+", "in"), button("关闭", "×", "close"));
    stage = el("div", { tabindex: "0", role: "group", "aria-label": "示意图（可用方向键滚动，+ − 缩放）" });
    stage.className = "diagram-zoom__stage";
    canvas = el("div");
    canvas.className = "diagram-zoom__canvas";
    stage.appendChild(canvas);
    dialog.append(bar, stage);
    document.body.appendChild(dialog);

    bar.addEventListener("click", function (e) {
      var b = e.target.closest("[data-zoom-action]");
      if (!b) return;
      var action = b.getAttribute("data-zoom-action");
      if (action === "close") dialog.close();
      else if (action === "fit") setZoom(fitZoom);
      else setZoom(zoom * (action === "in" ? 1.25 : 0.8));
    });
    dialog.addEventListener("keydown", function (e) {
      if (e.key === "Tab" || e.key === "Escape") return;
      e.stopPropagation(); // Material's shortcuts (search on "s", "/") must not act behind the dialog
      if (e.key === "+" || e.key === "=") { setZoom(zoom * 1.25); e.preventDefault(); }
      else if (e.key === "-" || e.key === "_") { setZoom(zoom * 0.8); e.preventDefault(); }
      else if (e.key === "0") { setZoom(fitZoom); e.preventDefault(); }
    });
    dialog.addEventListener("close", restore);
    stage.addEventListener("wheel", function (e) {
      if (!e.ctrlKey && !e.metaKey) return; // a plain wheel scrolls (pans)
      e.preventDefault();
      setZoom(zoom * Math.exp(-e.deltaY * 0.002), e.clientX, e.clientY);
    }, { passive: false });

    // one pointer pans, two pointers pinch (touch-action: none on the stage, reader.css)
    var pointers = new Map(), pinch = null;
    stage.addEventListener("pointerdown", function (e) {
      if (e.pointerType === "mouse" && e.button !== 0) return;
      stage.setPointerCapture(e.pointerId);
      pointers.set(e.pointerId, { x: e.clientX, y: e.clientY });
      if (pointers.size === 2) {
        var p = Array.from(pointers.values());
        pinch = { d: Math.hypot(p[0].x - p[1].x, p[0].y - p[1].y) || 1, z: zoom };
      }
    });
    stage.addEventListener("pointermove", function (e) {
      var prev = pointers.get(e.pointerId);
      if (!prev) return;
      var cur = { x: e.clientX, y: e.clientY };
      pointers.set(e.pointerId, cur);
      if (pointers.size === 1) {
        stage.scrollLeft -= cur.x - prev.x;
        stage.scrollTop -= cur.y - prev.y;
      } else if (pinch && pointers.size === 2) {
        var p = Array.from(pointers.values());
        var d = Math.hypot(p[0].x - p[1].x, p[0].y - p[1].y);
        setZoom(pinch.z * d / pinch.d, (p[0].x + p[1].x) / 2, (p[0].y + p[1].y) / 2);
      }
    });
    function up(e) {
      pointers.delete(e.pointerId);
      if (pointers.size < 2) pinch = null;
    }
    stage.addEventListener("pointerup", up);
    stage.addEventListener("pointercancel", up);
  }

  // zoom about a point of the screen (the centre of the stage by default), keeping it in place
  function setZoom(z, cx, cy) {
    if (!opened) return;
    z = Math.min(Math.max(z, Math.min(fitZoom, 1) * 0.5), 8);
    var svg = opened.svg, rect = svg.getBoundingClientRect(), box = stage.getBoundingClientRect();
    if (cx === undefined) { cx = box.left + box.width / 2; cy = box.top + box.height / 2; }
    var fx = rect.width ? (cx - rect.left) / rect.width : 0.5, fy = rect.height ? (cy - rect.top) / rect.height : 0.5;
    zoom = z;
    svg.style.width = natural.w * z + "px";
    svg.style.height = natural.h * z + "px";
    var after = svg.getBoundingClientRect();
    stage.scrollLeft += after.left + fx * after.width - cx;
    stage.scrollTop += after.top + fy * after.height - cy;
    dialog.setAttribute("data-zoom", z.toFixed(3));
  }

  function open(diagram, opener) {
    var views = Array.prototype.filter.call(diagram.children, function (c) { return c.classList.contains("mermaid"); });
    var view = views.filter(function (v) { return v.getClientRects().length > 0; })[0] || views[0];
    var svg = view && view.querySelector(":scope > svg");
    if (!svg) return;
    if (!dialog) build();
    var vb = svg.viewBox && svg.viewBox.baseVal, r = svg.getBoundingClientRect();
    natural = { w: vb && vb.width ? vb.width : r.width, h: vb && vb.height ? vb.height : r.height };
    var inPage = r.width / natural.w; // never open smaller than the page shows it
    var placeholder = el("div", { "aria-hidden": "true" });
    placeholder.className = "diagram-placeholder";
    placeholder.style.height = r.height + "px";
    opened = { svg: svg, view: view, placeholder: placeholder, style: svg.getAttribute("style"), opener: opener };
    view.insertBefore(placeholder, svg);
    canvas.appendChild(svg);
    title.textContent = (view.getAttribute("aria-label") || "示意图").replace(/^示意图：/, "");
    svg.style.maxWidth = "none";
    svg.style.minWidth = "0";
    dialog.showModal();
    var label = parseFloat(svg.getAttribute("data-label-px")) || 16;
    var pad = 32;
    fitZoom = Math.min((stage.clientWidth - pad) / natural.w, (stage.clientHeight - pad) / natural.h);
    var start = Math.max(fitZoom, inPage, MIN_LABEL_PX / label);
    zoom = 0; // so setZoom measures from the start
    setZoom(Math.min(start, Math.max(1.5, inPage, MIN_LABEL_PX / label)));
    stage.scrollLeft = 0;
    stage.scrollTop = 0;
    stage.focus();
  }

  function restore() {
    if (!opened) return;
    var o = opened;
    opened = null;
    if (o.style === null) o.svg.removeAttribute("style"); else o.svg.setAttribute("style", o.style);
    o.view.insertBefore(o.svg, o.placeholder);
    o.placeholder.remove();
    dialog.removeAttribute("data-zoom");
    if (o.opener && document.contains(o.opener)) o.opener.focus();
  }

  document.addEventListener("click", function (e) {
    var trigger = e.target.closest && e.target.closest(".diagram__zoom, .diagram > .mermaid");
    if (!trigger || e.target.closest("a")) return;
    var selection = window.getSelection && window.getSelection();
    if (selection && !selection.isCollapsed && !trigger.classList.contains("diagram__zoom")) return;
    open(trigger.closest(".diagram"), trigger.classList.contains("diagram__zoom") ? trigger : trigger.closest(".diagram").querySelector(".diagram__zoom"));
  });
  document.addEventListener("keydown", function (e) {
    if ((e.key === "Enter" || e.key === " ") && e.target.matches && e.target.matches(".diagram > .mermaid")) {
      e.preventDefault();
      open(e.target.closest(".diagram"), e.target);
    }
  });

  // a diagram wider than the column scrolls: keyboard users must be able to reach it
  function focusable() {
    document.querySelectorAll(".diagram > .mermaid").forEach(function (v) {
      if (v.scrollWidth > v.clientWidth + 1) v.setAttribute("tabindex", "0");
      else v.removeAttribute("tabindex");
    });
  }
  var timer = null;
  window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(focusable, 150); });
  if (typeof document$ !== "undefined") document$.subscribe(focusable);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", focusable);
  else focusable();
})();
