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
  var POINTS = 30;  // one minute at one sample every two seconds
  var series = {};  // key -> {name: [values]}

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

  function draw(box, key, lines, point) {
    var data = series[key] || (series[key] = {});
    var samples = box.getAttribute("data-samples") | 0;
    box.setAttribute("data-samples", String(samples + 1));
    lines.forEach(function (l) {
      var arr = data[l.name] || (data[l.name] = []);
      var v = point[l.name];
      arr.push(v === null || v === undefined ? null : Number(v));
      if (arr.length > POINTS) arr.shift();
      var max = l.max || Math.max.apply(null, arr.filter(function (x) { return x !== null; }).concat([1]));
      var pts = [];
      var offset = POINTS - arr.length;  // newest sample at the right edge
      arr.forEach(function (x, i) {
        if (x === null) return;
        pts.push(((offset + i) * 300 / (POINTS - 1)).toFixed(1) + "," + (68 - 66 * Math.min(x, max) / max).toFixed(1));
      });
      var line = box.querySelector('[data-line="' + l.name + '"]');
      if (line) line.setAttribute("points", pts.join(" "));
      var out = box.querySelector('[data-value="' + l.name + '"]');
      if (out) out.textContent = fmt(v, l.unit);
    });
  }

  function startLive(root) {
    var url = root.getAttribute("data-ws");
    if (!url || !window.WebSocket) return;
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
          if (fresh) { gpuBox.textContent = ""; portBox.textContent = ""; fresh = false; }
          document.getElementById("live-charts").hidden = !(msg.gpus.length || msg.ports.length);
          msg.gpus.forEach(function (g) { draw(chart(gpuBox, g.key, g.label, gpuLines), g.key, gpuLines, g); });
          msg.ports.forEach(function (p) { draw(chart(portBox, p.key, p.label, portLines), p.key, portLines, p); });
        } else if (msg.type === "lease" && msg.state !== state) {
          state = msg.state;
          root.setAttribute("data-state", state);
          if (window.htmx) {
            htmx.ajax("GET", location.pathname, {target: "#lease-main", select: "#lease-main", swap: "outerHTML"});
          }
        }
      };
    }
    connect();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.querySelector("[data-ws]");
    if (live) startLive(live);
  });
})();
