/* gpupool pages: theme toggle, one-click submits, live lease page. No framework beyond htmx. */
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = null;
  try { saved = localStorage.getItem("theme"); } catch (e) { /* private mode */ }
  if (saved) root.setAttribute("data-theme", saved);

  document.addEventListener("click", function (ev) {
    var t = ev.target.closest("[data-theme-toggle]");
    if (!t) return;
    var dark = root.getAttribute("data-theme") === "dark" ||
      (!root.getAttribute("data-theme") && window.matchMedia("(prefers-color-scheme: dark)").matches);
    var next = dark ? "light" : "dark";
    root.setAttribute("data-theme", next);
    try { localStorage.setItem("theme", next); } catch (e) { /* ignore */ }
    t.setAttribute("aria-pressed", String(next === "dark"));
  });

  // A form with data-confirm asks first (no inline handlers: the pages' CSP forbids them).
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) ev.preventDefault();
  }, true);

  // A link or button with data-print prints the page (the printable invoice).
  document.addEventListener("click", function (ev) {
    var el = ev.target.closest && ev.target.closest("[data-print]");
    if (!el) return;
    ev.preventDefault();
    window.print();
  });

  // A second click on a submit button does nothing (the server is idempotent as well).
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.hasAttribute("data-once")) return;
    if (form.dataset.sent === "1") { ev.preventDefault(); return; }
    var submitter = ev.submitter;
    if (submitter && submitter.name === "preview") return;
    form.dataset.sent = "1";
    form.querySelectorAll("button[type=submit]").forEach(function (b) {
      if (b.name !== "preview") { b.setAttribute("aria-disabled", "true"); b.disabled = true; }
    });
  });

  // ---- live lease page -------------------------------------------------------------------
  // Charts have a time axis: the page (and each new socket) brings the last minutes of
  // per-minute history, live samples (every two seconds) append at the right edge.
  var MIN_SPAN = 60000;  // ms: a fresh lease's chart spans at least a minute
  var span = 30 * 60000;  // ms kept and shown at most; the history's window when it says
  var series = {};  // key -> {t: [ms, oldest first], v: {name: [values]}}

  function el(tag, attrs, text) {
    var e = document.createElementNS(tag === "svg" || tag === "polyline" || tag === "line" ?
      "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmt(v, unit) {
    if (v === null || v === undefined) return "–";
    var n = Number(v);
    if (!unit) return n.toFixed(0);
    return (Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(1)) + unit;
  }

  function chart(container, key, title, lines) {
    var id = "chart-" + key.replace(/[^a-zA-Z0-9_-]/g, "_");
    var box = document.getElementById(id);
    if (!box) {
      box = el("div", {"class": "chart", id: id, "data-key": key});
      box.appendChild(el("h3", {}, title));
      var svg = el("svg", {viewBox: "0 0 300 70", preserveAspectRatio: "none", role: "img",
        "aria-label": title});
      [17, 35, 52].forEach(function (y) {
        svg.appendChild(el("line", {x1: "0", x2: "300", y1: String(y), y2: String(y), "class": "grid",
          "vector-effect": "non-scaling-stroke"}));
      });
      lines.forEach(function (l, i) {
        svg.appendChild(el("polyline", {"class": "s" + (i + 1), fill: "none", "stroke-width": "2",
          "vector-effect": "non-scaling-stroke", "data-line": l.name, points: ""}));
      });
      box.appendChild(svg);
      var legend = el("div", {"class": "legend", "aria-live": "off"});
      lines.forEach(function (l, i) {
        var s = el("span", {"class": "k" + (i + 1)});
        s.appendChild(document.createTextNode("■ " + l.label + " "));
        s.appendChild(el("b", {"data-value": l.name}, "–"));
        legend.appendChild(s);
      });
      box.appendChild(legend);
      container.appendChild(box);
    }
    return box;
  }

  // One point in time order; a time already there (a sample polled twice, history sent
  // again) is kept once. True when the point is new.
  function add(key, lines, t, point) {
    if (!isFinite(t)) return false;
    var data = series[key] || (series[key] = {t: [], v: {}});
    var i = data.t.length;
    while (i > 0 && data.t[i - 1] > t) i--;
    if (i > 0 && data.t[i - 1] === t) return false;
    data.t.splice(i, 0, t);
    lines.forEach(function (l) {
      var arr = data.v[l.name] || (data.v[l.name] = data.t.map(function () { return null; }).slice(1));
      var v = point[l.name];
      arr.splice(i, 0, v === null || v === undefined ? null : Number(v));
    });
    return true;
  }

  function addHistory(key, lines, h) {
    (h.t || []).forEach(function (sec, i) {
      var point = {};
      lines.forEach(function (l) { point[l.name] = h[l.name] ? h[l.name][i] : null; });
      add(key, lines, sec * 1000, point);
    });
  }

  function draw(box, key, lines, point) {
    var data = series[key] || (series[key] = {t: [], v: {}});
    var newest = data.t.length ? data.t[data.t.length - 1] : 0;
    while (data.t.length && data.t[0] < newest - span) {  // older than the window: drop
      data.t.shift();
      lines.forEach(function (l) { if (data.v[l.name]) data.v[l.name].shift(); });
    }
    var width = Math.min(span, Math.max(MIN_SPAN, newest - (data.t.length ? data.t[0] : newest)));
    var left = newest - width;  // newest sample at the right edge
    lines.forEach(function (l) {
      var arr = data.v[l.name] || [];
      var max = l.max || Math.max.apply(null, arr.filter(function (x) { return x !== null; }).concat([1]));
      var pts = [];
      arr.forEach(function (x, i) {
        if (x === null) return;
        pts.push(((data.t[i] - left) * 300 / width).toFixed(1) + "," + (68 - 66 * Math.min(x, max) / max).toFixed(1));
      });
      var line = box.querySelector('[data-line="' + l.name + '"]');
      if (line) line.setAttribute("points", pts.join(" "));
      var out = box.querySelector('[data-value="' + l.name + '"]');
      if (out) out.textContent = fmt(point[l.name], l.unit);
    });
  }

  function startLive(root) {
    var url = root.getAttribute("data-ws");
    var t = JSON.parse(document.getElementById("chart-labels").textContent);
    var gpuLines = [{name: "util", label: t.util, unit: " %", max: 100},
      {name: "mem", label: t.mem, unit: " %", max: 100},
      {name: "temp", label: t.temp, unit: " °C", max: 100},
      {name: "power", label: t.power, unit: " W", max: 1000}];
    var portLines = [{name: "tx", label: t.tx, unit: " Gb/s"}, {name: "rx", label: t.rx, unit: " Gb/s"},
      {name: "errors", label: t.errors, unit: ""}];
    var gpuBox = document.getElementById("gpu-charts");
    var portBox = document.getElementById("port-charts");
    var dot = document.getElementById("live-status");
    var state = root.getAttribute("data-state");
    var retry = 1000;
    var fresh = true;

    function plot(container, lines, items, history) {
      var past = {};
      (history || []).forEach(function (h) { past[h.key] = h; });
      items.forEach(function (p) {
        var box = chart(container, p.key, p.label, lines);
        if (past[p.key]) addHistory(p.key, lines, past[p.key]);
        if (p.ts && add(p.key, lines, Date.parse(p.ts), p)) {  // live samples drawn
          box.setAttribute("data-samples", String((box.getAttribute("data-samples") | 0) + 1));
        }
        draw(box, p.key, lines, p);
      });
    }

    function telemetry(msg) {
      if (fresh) { gpuBox.textContent = ""; portBox.textContent = ""; fresh = false; }
      document.getElementById("live-charts").hidden = !(msg.gpus.length || msg.ports.length);
      var history = msg.history || {};
      if (history.minutes) span = history.minutes * 60000;
      plot(gpuBox, gpuLines, msg.gpus, history.gpus);
      plot(portBox, portLines, msg.ports, history.ports);
    }

    var initial = document.getElementById("chart-initial");
    if (initial) telemetry(JSON.parse(initial.textContent));
    if (!url || !window.WebSocket) return;

    function connect() {
      var proto = location.protocol === "https:" ? "wss://" : "ws://";
      var ws = new WebSocket(proto + location.host + url);
      ws.onopen = function () { retry = 1000; if (dot) { dot.classList.add("on"); dot.title = t.connected; } };
      ws.onclose = function (ev) {
        if (dot) { dot.classList.remove("on"); dot.title = t.disconnected; }
        if (ev.code === 4404 || ev.code === 4403) return;
        setTimeout(connect, retry); retry = Math.min(retry * 2, 15000);
      };
      ws.onmessage = function (ev) {
        var msg = JSON.parse(ev.data);
        if (msg.type === "telemetry") {
          telemetry(msg);
        } else if (msg.type === "lease" && (msg.state !== state ||
                                             (msg.event && msg.event.warning))) {
          // A new state, or a warning (expiry, preemption notice): re-render the summary.
          state = msg.state;
          root.setAttribute("data-state", state);
          rerender();
        }
      };
    }

    // One re-render at a time, and never a lost one: htmx drops a request made while
    // another is in flight, so a change that arrives during a render (provisioning, then
    // active 0.3 s later) renders again once the first has been swapped in.
    var rendering = false, again = false;
    function rerender() {
      if (!window.htmx) return;
      if (rendering) { again = true; return; }
      rendering = true; again = false;
      var done = function () { rendering = false; if (again) rerender(); };
      var sent = htmx.ajax("GET", location.pathname,
                           {target: "#lease-main", select: "#lease-main", swap: "outerHTML"});
      if (sent && sent.then) sent.then(done, done); else done();
    }
    connect();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.querySelector("[data-ws]");
    if (live) startLive(live);
  });
})();
