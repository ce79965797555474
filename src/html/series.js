// The interactive time series of `sim report`: one panel per backend (running, waiting,
// the slot limit dashed, idle-while-queued shaded), all panels sharing one time axis.
// Drag across a panel to zoom into that stretch, scroll to zoom around the pointer,
// double-click or "Reset zoom" to see the whole run; `#zoom=A,B` in the address opens the
// page zoomed to A..B seconds. No library, no network: the data is inline.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message || e));
    document.body.setAttribute("data-errors", errors.join(" | "));
  });

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  // Round steps (1, 2, 5 x 10^k) giving about n ticks over [lo, hi].
  function ticks(lo, hi, n) {
    var span = hi - lo;
    if (!(span > 0)) return { step: 1, list: [lo] };
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), step = p;
    [1, 2, 5, 10].some(function (m) { step = m * p; return span / step <= n; });
    var list = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) list.push(v);
    return { step: step, list: list };
  }

  function fmt(v, step) {
    var d = step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step)));
    return v.toFixed(d);
  }

  // Seconds as the axis shows them: seconds, or hours and minutes past an hour.
  function fmtTime(v, step) {
    if (step >= 600 && v >= 3600) {
      var h = Math.floor(v / 3600), m = Math.round((v - h * 3600) / 60);
      return h + " h" + (m ? " " + m + " min" : "");
    }
    return fmt(v, step);
  }

  // The index of the last sample at or before t (0 if none).
  function at(ts, t) {
    var lo = 0, hi = ts.length - 1;
    if (hi < 0 || ts[0] > t) return 0;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (ts[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  // A step path of ys over [x0, x1]; several samples within one pixel become one vertical
  // stroke from their least to their greatest value, so a day-long series stays light.
  function stepPath(ts, ys, x0, x1, X, Y) {
    if (!ts.length) return "";
    var i = at(ts, x0), prev = ys[i], d = "M" + X(x0).toFixed(1) + "," + Y(prev).toFixed(1);
    var col = null, lo = 0, hi = 0, last = prev;
    function flush() {
      if (col === null) return;
      d += "H" + col + "V" + Y(lo).toFixed(1) + "V" + Y(hi).toFixed(1) + "V" + Y(last).toFixed(1);
    }
    for (var k = i + 1; k < ts.length && ts[k] <= x1; k++) {
      var px = Math.round(X(ts[k]));
      if (px !== col) {
        flush();
        col = px; lo = Math.min(last, ys[k]); hi = Math.max(last, ys[k]);
      } else {
        lo = Math.min(lo, ys[k]); hi = Math.max(hi, ys[k]);
      }
      last = ys[k];
    }
    flush();
    return d + "H" + X(x1).toFixed(1);
  }

  function Chart(root, data) {
    var self = this;
    this.root = root;
    this.data = data;
    this.full = [0, Math.max(data.end_s, 1e-9)];
    this.view = this.full.slice();
    var bar = document.createElement("div");
    bar.className = "zoombar";
    this.label = document.createElement("span");
    var reset = document.createElement("button");
    reset.textContent = "Reset zoom";
    reset.addEventListener("click", function () { self.zoom(self.full[0], self.full[1]); });
    bar.appendChild(reset);
    bar.appendChild(this.label);
    root.appendChild(bar);
    this.tip = document.createElement("div");
    this.tip.className = "tip";
    root.appendChild(this.tip);
    this.svg = el("svg", { "class": "series", role: "img", "aria-label": data.title });
    root.appendChild(this.svg);
    this.panelH = 130;
    this.m = { l: 56, r: 14, t: 22, b: 8 };
    this.ymax = data.backends.map(function (b) {
      var m = b.slots || 1;
      b.running.forEach(function (v) { if (v > m) m = v; });
      b.waiting.forEach(function (v) { if (v > m) m = v; });
      return m * 1.1;
    });
    this.bindMouse();
    window.addEventListener("resize", function () { self.draw(); });
  }

  Chart.prototype.width = function () {
    return Math.max(480, this.root.clientWidth || 960);
  };

  Chart.prototype.X = function () {
    var w = this.width(), m = this.m, v = this.view;
    return function (t) { return m.l + (t - v[0]) / (v[1] - v[0]) * (w - m.l - m.r); };
  };

  Chart.prototype.zoom = function (a, b) {
    var f = this.full;
    a = Math.max(f[0], Math.min(a, f[1]));
    b = Math.max(f[0], Math.min(b, f[1]));
    if (b - a < (f[1] - f[0]) * 1e-6) return;
    this.view = [a, b];
    this.draw();
    var whole = a <= f[0] && b >= f[1];
    try {
      history.replaceState(null, "", whole ? location.pathname : "#zoom=" + a.toFixed(3) + "," + b.toFixed(3));
    } catch (e) { /* a file:// page may refuse it; the zoom stands */ }
  };

  Chart.prototype.draw = function () {
    var d = this.data, svg = this.svg, m = this.m, w = this.width(), ph = this.panelH;
    var n = d.backends.length, axisH = 40, h = n * ph + axisH;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var v = this.view, X = this.X(), xt = ticks(v[0], v[1], Math.max(3, Math.floor(w / 110)));
    var clip = el("clipPath", { id: "plotclip" }, el("defs", {}, svg));
    el("rect", { x: m.l, y: 0, width: w - m.l - m.r, height: h }, clip);
    for (var i = 0; i < n; i++) this.panel(i, i * ph, X, xt);
    var y0 = n * ph + 4;
    xt.list.forEach(function (t) {
      el("line", { x1: X(t), x2: X(t), y1: y0 - 4, y2: y0 + 2, "class": "axis" }, svg);
      el("text", { x: X(t), y: y0 + 16, "text-anchor": "middle" }, svg).textContent = fmtTime(t, xt.step);
    });
    el("text", { x: m.l + (w - m.l - m.r) / 2, y: y0 + 34, "text-anchor": "middle", "class": "desc" }, svg)
      .textContent = d.x_desc + " (s)";
    this.label.textContent = " showing " + fmt(v[0], xt.step / 10) + " s to " + fmt(v[1], xt.step / 10) +
      " s of " + fmt(this.full[1], 0.1) + " s: drag across a panel to zoom, scroll to zoom around the pointer, double-click to reset";
    this.root.setAttribute("data-x0", v[0].toFixed(3));
    this.root.setAttribute("data-x1", v[1].toFixed(3));
  };

  Chart.prototype.panel = function (i, top, X, xt) {
    var b = this.data.backends[i], svg = this.svg, m = this.m, w = this.width(), v = this.view;
    var y0 = top + m.t, y1 = top + this.panelH - m.b, ymax = this.ymax[i];
    var Y = function (y) { return y1 - y / ymax * (y1 - y0); };
    var g = el("g", { "class": "panel", "data-backend": b.name }, svg);
    el("rect", { x: m.l, y: y0, width: w - m.l - m.r, height: y1 - y0, "class": "frame" }, g);
    var plot = el("g", { "clip-path": "url(#plotclip)" }, g);
    this.data.stranded.forEach(function (s) {
      if (s[1] < v[0] || s[0] > v[1]) return;
      var a = X(Math.max(s[0], v[0])), c = X(Math.min(s[1], v[1]));
      el("rect", { x: a, y: y0, width: Math.max(1, c - a), height: y1 - y0, "class": "stranded" }, plot);
    });
    xt.list.forEach(function (t) {
      el("line", { x1: X(t), x2: X(t), y1: y0, y2: y1, "class": "grid" }, plot);
    });
    var yt = ticks(0, ymax / 1.1, 4);
    yt.list.forEach(function (y) {
      el("line", { x1: m.l, x2: w - m.r, y1: Y(y), y2: Y(y), "class": "grid" }, g);
      el("text", { x: m.l - 6, y: Y(y) + 4, "text-anchor": "end" }, g).textContent = fmt(y, Math.max(1, yt.step));
    });
    if (b.slots) {
      el("line", { x1: m.l, x2: w - m.r, y1: Y(b.slots), y2: Y(b.slots), "class": "slots" }, plot);
    }
    el("path", { d: stepPath(b.t, b.waiting, v[0], v[1], X, Y), "class": "waiting" }, plot);
    el("path", { d: stepPath(b.t, b.running, v[0], v[1], X, Y), "class": "running" }, plot);
    el("text", { x: m.l + 4, y: top + 15, "class": "name" }, g).textContent =
      b.name + (b.slots ? " (" + b.slots + " slots)" : "");
  };

  // The values of every backend at time t, for the pointer's read-out.
  Chart.prototype.readout = function (t) {
    var parts = this.data.backends.map(function (b) {
      var k = at(b.t, t);
      return b.name + " " + (b.t.length ? b.running[k] + " running + " + b.waiting[k] + " waiting" : "-");
    });
    return "t = " + t.toFixed(1) + " s: " + parts.join(" | ");
  };

  Chart.prototype.bindMouse = function () {
    var self = this, svg = this.svg, start = null, band = null;
    function tAt(ev) {
      var r = svg.getBoundingClientRect(), m = self.m, w = self.width(), v = self.view;
      var px = Math.max(m.l, Math.min(ev.clientX - r.left, w - m.r));
      return { px: px, t: v[0] + (px - m.l) / (w - m.l - m.r) * (v[1] - v[0]) };
    }
    svg.addEventListener("mousedown", function (ev) {
      if (ev.button !== 0) return;
      ev.preventDefault();
      start = tAt(ev);
      band = el("rect", { x: start.px, y: 0, width: 0, height: svg.getAttribute("height"), "class": "band" }, svg);
    });
    svg.addEventListener("mousemove", function (ev) {
      var p = tAt(ev);
      self.tip.textContent = self.readout(p.t);
      if (start && band) {
        band.setAttribute("x", Math.min(start.px, p.px));
        band.setAttribute("width", Math.abs(p.px - start.px));
      }
    });
    window.addEventListener("mouseup", function (ev) {
      if (!start) return;
      var p = tAt(ev), a = start;
      start = null;
      if (band && band.parentNode) band.parentNode.removeChild(band);
      band = null;
      if (Math.abs(p.px - a.px) > 3) self.zoom(Math.min(a.t, p.t), Math.max(a.t, p.t));
    });
    svg.addEventListener("dblclick", function () { self.zoom(self.full[0], self.full[1]); });
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var p = tAt(ev), v = self.view, f = ev.deltaY > 0 ? 1.25 : 0.8;
      self.zoom(p.t - (p.t - v[0]) * f, p.t + (v[1] - p.t) * f);
    }, { passive: false });
  };

  function start() {
    var holder = document.getElementById("series");
    var src = document.getElementById("series-data");
    if (holder && src) {
      var chart = new Chart(holder, JSON.parse(src.textContent));
      var z = /^#zoom=([0-9.eE+-]+),([0-9.eE+-]+)$/.exec(location.hash);
      if (z) chart.zoom(parseFloat(z[1]), parseFloat(z[2])); else chart.draw();
      Array.prototype.forEach.call(document.querySelectorAll("button[data-zoom]"), function (btn) {
        btn.addEventListener("click", function () {
          var ab = btn.getAttribute("data-zoom").split(",").map(parseFloat);
          chart.zoom(ab[0], ab[1]);
          holder.scrollIntoView();
        });
      });
    }
    document.body.setAttribute("data-ready", "1");
  }

  // How many figures decoded, once everything has loaded (a test reads it).
  window.addEventListener("load", function () {
    var imgs = Array.prototype.slice.call(document.images);
    document.body.setAttribute("data-figures", String(imgs.length));
    document.body.setAttribute("data-figures-shown", String(imgs.filter(function (i) {
      return i.complete && i.naturalWidth > 0;
    }).length));
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
