/* The live dashboard of django-delayq (admin): polls the JSON view named by the
 * container's data-url every data-poll-ms and redraws the queues, the two charts and the
 * workers. Every value is inserted as text (textContent) or as an SVG attribute, never
 * as HTML; no inline script or style is needed, so a strict Content-Security-Policy holds.
 */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var W = 300, H = 110, LEFT = 34, BOTTOM = 16, TOP = 6;

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (cls) { node.className = cls; }
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) { node.textContent = String(text); }
    return node;
  }

  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }

  function age(seconds) {
    if (seconds === null || seconds === undefined) { return "-"; }
    if (seconds < 120) { return seconds.toFixed(1) + " s"; }
    if (seconds < 7200) { return (seconds / 60).toFixed(1) + " min"; }
    return (seconds / 3600).toFixed(1) + " h";
  }

  function time(ms) {
    if (ms === null || ms === undefined) { return "-"; }
    var d = new Date(ms);
    return d.toISOString().replace("T", " ").slice(0, 19) + "Z";
  }

  function num(value) { return el("td", value, "num"); }

  function drawQueues(body, queues) {
    clear(body);
    queues.forEach(function (q) {
      var tr = el("tr", null, q.paused ? "delayq-paused" : "");
      tr.setAttribute("data-queue", q.queue);
      var name = el("th", q.queue); name.setAttribute("scope", "row");
      tr.appendChild(name);
      tr.appendChild(el("td", q.paused ? "paused" : "active", "delayq-queue-state"));
      [["due_now", q.due_now], ["scheduled", q.scheduled], ["inflight", q.inflight],
       ["dead", q.dead]].forEach(function (pair) {
        var td = num(pair[1]); td.setAttribute("data-count", pair[0]); tr.appendChild(td);
      });
      tr.appendChild(el("td", time(q.next_due_ms)));
      tr.appendChild(el("td", q.limit || "-"));
      body.appendChild(tr);
    });
  }

  function drawGroups(body, groups) {
    clear(body);
    (groups || []).forEach(function (g) {
      var tr = el("tr", null, g.paused ? "delayq-paused" : "");
      tr.appendChild(el("td", g.queue));
      tr.appendChild(el("td", g.group));
      tr.appendChild(num(g.due));
      tr.appendChild(num(g.running));
      tr.appendChild(el("td", g.limit || "-"));
      tr.appendChild(el("td", g.paused ? "paused" : g.held ? "held by its limit" : "active"));
      body.appendChild(tr);
    });
  }

  function jobLink(template, id) {
    var a = el("a", id, "delayq-job-link");
    a.href = template.replace("JOB-ID", encodeURIComponent(id));
    return a;
  }

  function drawJobs(cell, jobs, template) {
    if (!jobs.length) { cell.textContent = "-"; return; }
    var list = el("ul", null, "delayq-running");
    jobs.forEach(function (job) {
      var li = el("li");
      li.setAttribute("data-job", job.id);
      li.appendChild(jobLink(template, job.id));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(el("code", job.callable));
      li.appendChild(el("span", " " + job.queue + ", " + age(job.age_s), "quiet"));
      if (job.progress) {
        li.appendChild(document.createTextNode(" "));
        li.appendChild(el("span", job.progress, "delayq-progress"));
      }
      list.appendChild(li);
    });
    cell.appendChild(list);
  }

  function drawWorkers(body, workers, template) {
    clear(body);
    if (!workers.length) {
      var none = el("td", "no worker registered", "quiet");
      none.setAttribute("colspan", "8");
      body.appendChild(el("tr")).appendChild(none);
      return;
    }
    workers.forEach(function (w) {
      var tr = el("tr", null, w.malformed ? "delayq-malformed" : "");
      tr.setAttribute("data-worker", w.id);
      tr.appendChild(el("td", w.id));
      tr.appendChild(el("td", w.malformed ? "(info malformed)" : w.host));
      tr.appendChild(num(w.pid === null ? "-" : w.pid));
      tr.appendChild(num(w.processes === null ? "-" : w.processes));
      tr.appendChild(num(age(w.heartbeat_age_s)));
      tr.appendChild(num(w.running === null ? "-" : w.running));
      tr.appendChild(num(w.prefetched === null ? "-" : w.prefetched));
      var jobs = el("td");
      drawJobs(jobs, w.jobs, template);
      tr.appendChild(jobs);
      body.appendChild(tr);
    });
  }

  function drawHolding(node, holding) {
    node.hidden = !holding;
    if (!holding) { return; }
    ["in_flight", "running", "prefetched", "settling"].forEach(function (key) {
      node.querySelector("[data-count=" + key + "]").textContent = String(holding[key]);
    });
  }

  function axes(node, max, minutes) {
    var plotH = H - BOTTOM - TOP;
    node.appendChild(svg("line", {x1: LEFT, y1: TOP + plotH, x2: W, y2: TOP + plotH,
                                  "class": "delayq-axis"}));
    node.appendChild(svg("text", {x: LEFT - 3, y: TOP + 8, "text-anchor": "end",
                                  "class": "delayq-tick"}, Math.round(max)));
    node.appendChild(svg("text", {x: LEFT - 3, y: TOP + plotH, "text-anchor": "end",
                                  "class": "delayq-tick"}, 0));
    if (minutes.length) {
      node.appendChild(svg("text", {x: LEFT, y: H - 3, "class": "delayq-tick"},
                           time(minutes[0].start_ms).slice(11, 16)));
      node.appendChild(svg("text", {x: W, y: H - 3, "text-anchor": "end",
                                    "class": "delayq-tick"},
                           time(minutes[minutes.length - 1].start_ms).slice(11, 16)));
    }
    return plotH;
  }

  function drawThroughput(node, minutes) {
    clear(node);
    var max = Math.max(1, Math.max.apply(null, minutes.map(function (m) { return m.finished; })));
    var plotH = axes(node, max, minutes);
    var step = (W - LEFT) / Math.max(1, minutes.length);
    minutes.forEach(function (m, i) {
      var h = plotH * m.finished / max;
      var bar = svg("rect", {x: LEFT + i * step + 1, y: TOP + plotH - h,
                             width: Math.max(1, step - 2), height: h, "class": "delayq-bar"});
      bar.appendChild(svg("title", {}, time(m.start_ms).slice(11, 16) + ": " + m.finished));
      node.appendChild(bar);
    });
    node.setAttribute("data-total", String(minutes.reduce(function (n, m) {
      return n + m.finished; }, 0)));
  }

  function line(node, minutes, key, max, plotH, cls) {
    var step = (W - LEFT) / Math.max(1, minutes.length);
    var points = [];
    var dots = [];
    minutes.forEach(function (m, i) {
      if (m[key] !== null) {
        var x = (LEFT + (i + 0.5) * step).toFixed(1);
        var y = (TOP + plotH - plotH * m[key] / max).toFixed(1);
        points.push(x + "," + y);
        var dot = svg("circle", {cx: x, cy: y, r: 2, "class": cls + "-dot"});
        dot.appendChild(svg("title", {}, time(m.start_ms).slice(11, 16) + " " +
                            key.replace("_ms", "") + ": " + Math.round(m[key]) + " ms"));
        dots.push(dot);
      }
    });
    node.appendChild(svg("polyline", {points: points.join(" "), "class": cls}));
    dots.forEach(function (dot) { node.appendChild(dot); });
  }

  function drawLateness(node, minutes) {
    clear(node);
    var values = minutes.map(function (m) { return m.p95_ms || 0; });
    var max = Math.max(1, Math.max.apply(null, values));
    var plotH = axes(node, max, minutes);
    line(node, minutes, "p50_ms", max, plotH, "delayq-line-p50");
    line(node, minutes, "p95_ms", max, plotH, "delayq-line-p95");
  }

  function start(root) {
    var url = root.getAttribute("data-url");
    var template = root.getAttribute("data-job-url");
    var every = parseInt(root.getAttribute("data-poll-ms"), 10) || 3000;
    var updated = document.getElementById("delayq-updated");
    var error = document.getElementById("delayq-error");
    var polls = 0;

    function show(data) {
      polls += 1;
      root.setAttribute("data-polls", String(polls));
      error.hidden = !data.redis_error;
      error.textContent = data.redis_error ? "Redis did not answer: " + data.redis_error : "";
      drawQueues(document.querySelector("#delayq-queues tbody"), data.queues);
      drawGroups(document.querySelector("#delayq-groups tbody"), data.groups);
      drawWorkers(document.querySelector("#delayq-workers tbody"), data.workers, template);
      drawHolding(document.getElementById("delayq-holding"), data.holding);
      drawThroughput(document.getElementById("delayq-throughput"), data.minutes);
      drawLateness(document.getElementById("delayq-lateness"), data.minutes);
      updated.textContent = "Updated " + time(data.now_ms) + (data.sampled ? " (lateness sampled)" : "");
    }

    function poll() {
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (r) {
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.json();
        })
        .then(show)
        .catch(function (exc) {
          error.hidden = false;
          error.textContent = "Could not refresh: " + exc.message;
        })
        .then(function () { window.setTimeout(poll, every); });
    }
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.querySelector(".delayq-dashboard");
    if (root) { start(root); }
  });
}());
