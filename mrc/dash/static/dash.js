// mrc dash: the page. Data comes from /api/stream (server-sent events: one
// "hello", then a "tick" per sample); faults go to POST /api/fault with the
// token the server printed (the URL's ?token=, kept in this tab only).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const WINDOW_S = 60;
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];
const $ = (id) => document.getElementById(id);

const S = {
  layout: null, token: null, readOnly: null, selected: null, qp: null, src: null,
  planeChart: null, hostChart: null, lastT: 0, events: [], timeline: [], nodesDown: new Set(),
};

// ------------------------------------------------------------------ token
(function takeToken() {
  const url = new URL(location.href);
  const t = url.searchParams.get("token");
  if (t) {
    sessionStorage.setItem("mrc-dash-token", t);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search);  // out of the address bar and history
  }
  S.token = sessionStorage.getItem("mrc-dash-token");
})();

function el(tag, attrs, parent, ns) {
  const e = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  if (parent) parent.appendChild(e);
  return e;
}

// ----------------------------------------------------------------- fabric
function drawFabric(L) {
  const svg = $("fabric");
  svg.replaceChildren();
  const PW = Math.max(L.spines, L.leaves, L.hosts) * 46 + 16;
  const W = PW * L.planes, H = 250, Y = { t1: 40, t0: 130, host: 215 };
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const pos = {};
  const xOf = (p, i, n) => p * PW + (i + 0.5) * PW / n;
  for (let p = 0; p < L.planes; p++) {
    el("rect", { x: p * PW + 2, y: 2, width: PW - 4, height: H - 4, fill: p % 2 ? "#fafbfc" : "#f2f5f8", rx: 6 },
       svg, true);
    el("text", { x: p * PW + PW / 2, y: 12, class: "plane-label", text: `plane ${p}` }, svg, true);
  }
  for (const n of L.nodes) {
    if (n.kind === "host") {
      for (let p = 0; p < L.planes; p++) pos[`${n.id}@${p}`] = [xOf(p, n.index, L.hosts), Y.host];
    } else {
      pos[n.id] = [xOf(n.plane, n.index, n.kind === "t1" ? L.spines : L.leaves), Y[n.kind]];
    }
  }
  const end = (node, plane) => pos[node] || pos[`${node}@${plane}`];
  const gl = el("g", {}, svg, true);
  for (const ln of L.links) {
    const [x1, y1] = end(ln.a, ln.plane), [x2, y2] = end(ln.b, ln.plane);
    const line = el("line", { x1, y1, x2, y2, class: "link", "data-link": ln.id, "data-state": "unknown",
                              stroke: "#9aa" }, gl, true);
    // the click target: a band 10 units wide around the line (a polygon, so
    // that a vertical link has an area too)
    const len = Math.hypot(x2 - x1, y2 - y1) || 1, nx = -(y2 - y1) / len * 5, ny = (x2 - x1) / len * 5;
    const band = [[x1 + nx, y1 + ny], [x2 + nx, y2 + ny], [x2 - nx, y2 - ny], [x1 - nx, y1 - ny]];
    const hit = el("polygon", { points: band.map((q) => q.join(",")).join(" "), class: "hit", "data-hit": ln.id },
                   gl, true);
    el("title", { text: ln.id }, hit, true);
    hit.addEventListener("click", () => select("link", ln.id));
    line.dataset.plane = ln.plane;
  }
  for (const n of L.nodes) {
    const places = n.kind === "host" ? [...Array(L.planes).keys()].map((p) => [`${n.id}@${p}`, pos[`${n.id}@${p}`]])
                                     : [[n.id, pos[n.id]]];
    for (const [, [x, y]] of places) {
      const g = el("g", { class: `node ${n.kind}`, "data-node": n.id }, svg, true);
      el("rect", { x: x - 18, y: y - 9, width: 36, height: 18, rx: 3 }, g, true);
      el("text", { x, y, text: n.kind === "host" ? n.id : n.id.replace(/^p\d+/, "") }, g, true);
      el("title", { text: n.id }, g, true);
      if (n.kind !== "host") g.addEventListener("click", () => select("switch", n.id));
    }
  }
}

function loadColour(frac) {
  // idle grey -> green -> blue (full); red, orange and purple mean faults
  const stops = [[0, [165, 172, 178]], [0.05, [60, 170, 90]], [0.5, [20, 130, 170]], [1, [20, 40, 150]]];
  frac = Math.max(0, Math.min(1, frac));
  for (let i = 1; i < stops.length; i++) {
    if (frac <= stops[i][0]) {
      const [a, ca] = stops[i - 1], [b, cb] = stops[i], f = (frac - a) / (b - a);
      return `rgb(${ca.map((c, k) => Math.round(c + f * (cb[k] - c))).join(",")})`;
    }
  }
  return "rgb(20,40,150)";
}

function updateLinks(links) {
  let maxG = 0.5;
  for (const v of Object.values(links)) maxG = Math.max(maxG, v.up_gbps || 0, v.down_gbps || 0);
  const downNodes = new Set();
  for (const line of document.querySelectorAll("#fabric .link")) {
    const v = links[line.dataset.link];
    if (!v) continue;
    line.dataset.state = v.state;
    line.classList.remove("up", "down", "lossy", "limited", "unknown");
    line.classList.add(v.state);
    const g = Math.max(v.up_gbps || 0, v.down_gbps || 0);
    const frac = v.load != null ? v.load : g / maxG;
    line.setAttribute("stroke", v.state === "lossy" ? "#e80" : v.state === "limited" ? "#84c" : loadColour(frac));
    line.setAttribute("stroke-width", v.state === "down" ? 2.5 : (1.5 + 3 * Math.min(1, frac)).toFixed(1));
  }
  // a switch whose links are all down is down
  for (const n of S.layout.nodes) {
    if (n.kind === "host") continue;
    const mine = S.layout.links.filter((l) => l.a === n.id || l.b === n.id);
    if (mine.length && mine.every((l) => links[l.id] && links[l.id].state === "down")) downNodes.add(n.id);
  }
  for (const g of document.querySelectorAll("#fabric .node")) g.classList.toggle("down", downNodes.has(g.dataset.node));
  S.nodesDown = downNodes;
  if (S.selected) showSelection(links);
}

// -------------------------------------------------------------- selection
// a second click on what is selected lets it go; the EV events list then
// shows every path's events again
function select(kind, id) {
  const again = S.selected && S.selected.kind === kind && S.selected.id === id;
  S.selected = again ? null : { kind, id };
  for (const e of document.querySelectorAll("#fabric .sel")) e.classList.remove("sel");
  if (!again) {
    if (kind === "link") document.querySelector(`#fabric .link[data-link="${id}"]`)?.classList.add("sel");
    else for (const g of document.querySelectorAll(`#fabric .node[data-node="${id}"]`)) g.classList.add("sel");
  }
  showSelection(S.lastLinks || {});
  updateButtons();
  showEvents();
}

function showSelection(links) {
  const box = $("sel-info");
  const s = S.selected;
  if (!s) { box.textContent = "Nothing selected."; return; }
  if (s.kind === "link") {
    const v = links[s.id] || {};
    const fmt = (x) => (x == null ? "?" : x.toFixed(2));
    box.textContent = `link ${s.id}: ${v.state || "?"}` + (v.loss != null ? ` (${v.loss}% loss)` : "") +
      `\nup ${fmt(v.up_gbps)} Gb/s, down ${fmt(v.down_gbps)} Gb/s` +
      (v.capacity_bps ? `\ncapacity ${(v.capacity_bps / 1e9).toFixed(2)} Gb/s, load ${v.load}` : "");
  } else {
    box.textContent = `switch ${s.id}: ${S.nodesDown.has(s.id) ? "down (all its links)" : "up"}`;
  }
}

function updateButtons() {
  const rw = !!S.token && !S.readOnly;
  const s = S.selected;
  $("btn-fail").disabled = !rw || !s;
  $("btn-heal").disabled = !rw || !s;
  $("btn-heal-all").disabled = !rw;
  for (const b of ["btn-flap", "btn-loss", "btn-rate"]) $(b).disabled = !rw || !s || s.kind !== "link";
}

async function fault(body) {
  const out = $("fault-result");
  out.classList.remove("err");
  out.textContent = `${body.op} ${body.target || "everything"}...`;
  try {
    const r = await fetch("/api/fault", {
      method: "POST", headers: { "Content-Type": "application/json", "X-MRC-Token": S.token || "" },
      body: JSON.stringify(body),
    });
    const ans = await r.json();
    if (!r.ok) throw new Error(ans.error || r.statusText);
    out.textContent = `${body.op} ${body.target || "everything"}: done`;
  } catch (e) {
    out.classList.add("err");
    out.textContent = String(e.message || e);
  }
}

function wireButtons() {
  const target = () => S.selected && S.selected.id;
  $("btn-fail").onclick = () => fault({ op: "fail", target: target() });
  $("btn-heal").onclick = () => fault({ op: "heal", target: target() });
  $("btn-heal-all").onclick = () => fault({ op: "heal", target: "all" });
  $("btn-flap").onclick = () => fault({ op: "flap", target: target(), period: +$("flap-period").value,
                                        duration: +$("flap-duration").value });
  $("btn-loss").onclick = () => fault({ op: "loss", target: target(), arg: +$("loss-pct").value });
  $("btn-rate").onclick = () => fault({ op: "rate", target: target(), arg: $("rate").value });
}

// ----------------------------------------------------------------- charts
function lineChart(canvas, labels) {
  return new Chart(canvas, {
    type: "line",
    data: { datasets: labels.map((l, i) => ({ label: l, data: [], borderColor: COLOURS[i % COLOURS.length],
                                              borderWidth: 1.5, pointRadius: 0, tension: 0 })) },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
      scales: { x: { type: "linear", title: { display: true, text: "s" } },
                y: { beginAtZero: true, title: { display: true, text: "Gb/s" } } },
      plugins: { legend: { labels: { boxWidth: 10, font: { size: 10 } } } },
    },
  });
}

function addPoints(points) {
  const L = S.layout;
  for (const pt of points) {
    pt.planes.forEach((v, i) => S.planeChart.data.datasets[i].data.push({ x: pt.t, y: v }));
    for (let h = 0; h < L.hosts; h++) {
      const r = pt.hosts[`h${h}`];
      S.hostChart.data.datasets[h].data.push({ x: pt.t, y: r ? r.tx : 0 });
    }
    S.lastT = pt.t;
  }
  for (const c of [S.planeChart, S.hostChart]) {
    for (const d of c.data.datasets) while (d.data.length && d.data[0].x < S.lastT - WINDOW_S) d.data.shift();
    c.options.scales.x.min = Math.max(0, S.lastT - WINDOW_S);
    c.options.scales.x.max = Math.max(WINDOW_S, S.lastT);
    c.update("none");
  }
}

// -------------------------------------------------------------------- QPs
const KIB = (x) => (x / 1024).toFixed(0), MIB = (x) => (x / 1048576).toFixed(1), US = (x) => (x / 1000).toFixed(0);

function updateQPs(contexts) {
  const body = $("qps").tBodies[0];
  body.replaceChildren();
  let any = false;
  for (const c of contexts) {
    for (const q of c.qps) {
      any = true;
      const tr = el("tr", { "data-qp": q.key }, body);
      const who = c.role ? `${c.role} (${c.id})` : c.id;   // "rank 2 of 4, job j1 (4242-rank2)"
      for (const v of [c.host, who, q.qpn, q.state_name, KIB(q.cwnd), KIB(q.inflight), US(q.srtt_ns),
                       US(q.base_rtt_ns), MIB(q.tx_bytes), MIB(q.rtx_bytes), q.losses, q.timeouts, q.ecn_marks,
                       q.trims, `${q.good_evs}/${q.bad_evs}`]) el("td", { text: String(v) }, tr);
      if (q.key === S.qp) tr.classList.add("chosen");
      tr.onclick = () => { S.qp = q.key; connect(); };
    }
  }
  $("no-qps").hidden = any;
}

function updateGrid(grids) {
  const g = (S.qp && grids[S.qp]) || Object.values(grids)[0];
  const box = $("evgrid");
  if (!g) { box.replaceChildren(); $("grid-title").textContent = "no QP"; $("grid-counts").textContent = ""; return; }
  $("grid-title").textContent = `QP ${g.qpn} of ${g.host} (context ${g.ctx})`;
  box.dataset.qp = `${g.ctx}/${g.qpn}`;
  box.replaceChildren();
  g.rows.forEach((row, p) => {
    const line = el("div", { class: "plane", "data-plane": p }, box);
    el("b", { text: `p${p}` }, line);
    for (const [entropy, state, active] of row) {
      el("span", { class: `ev ev-${state}${active ? " active" : ""}`, "data-state": state,
                   title: `plane ${p} entropy ${entropy}: ${state}${active ? " (in the rotation)" : ""}` }, line);
    }
  });
  $("grid-counts").textContent = " | " + Object.entries(g.counts).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`)
    .join(", ");
}

// --------------------------------------------------------------- timeline
// The EV events list: the newest 300, or with a link or a switch selected
// only the events of paths over it (a flood of other paths' events, EVs
// retired and brought back by the hundred on a loaded machine, pushed the
// selected link's out of the list before anyone could read them).
const EVENT_ROWS = 300;

function eventShown(e) {
  const s = S.selected;
  if (!s) return true;
  if (s.kind === "link") return e.links.includes(s.id);
  return e.links.some((l) => l.split("-").includes(s.id));
}

function eventRow(e) {
  return el("li", { "data-links": e.links.join(","), "data-new": e.new,
                    text: `${e.t.toFixed(2)} s  ${e.host} QP ${e.qpn} EV 0x${e.ev.toString(16)} (plane ${e.plane}): ` +
                          `${e.old} → ${e.new}` + (e.links.length ? `  via ${e.links.slice(1, 3).join(", ")}` : "") });
}

function addEvents(evs) {
  const list = $("events");
  for (const e of evs) {
    S.events.push(e);
    if (eventShown(e)) list.prepend(eventRow(e));
  }
  while (list.children.length > EVENT_ROWS) list.lastChild.remove();
  while (S.events.length && S.events[0].t < S.lastT - WINDOW_S) S.events.shift();
}

// the list again from the events of the last 60 s, for what is selected now
function showEvents() {
  const s = S.selected;
  $("events-filter").textContent = s ? `over ${s.id} only (click it again for every path)` : "";
  const rows = S.events.filter(eventShown).slice(-EVENT_ROWS).reverse().map(eventRow);
  $("events").replaceChildren(...rows);
}

function setTimeline(entries) {
  S.timeline = entries;
  const list = $("faults");
  list.replaceChildren();
  for (const f of entries.slice().reverse()) {
    const what = f.op === "state" ? `${f.links.join(", ")}: ${f.from} → ${f.to}`
                                  : `${f.op} ${f.target}${f.arg != null ? " " + f.arg : ""} (from this page)`;
    el("li", { text: `${f.t.toFixed(2)} s  ${what}` }, list);
  }
}

function drawTimeline() {
  const svg = $("timeline");
  const W = 1000, H = 150, P = S.layout.planes, top = 8, rowH = (H - 24) / P;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.replaceChildren();
  const t0 = Math.max(0, S.lastT - WINDOW_S), x = (t) => 30 + (t - t0) / WINDOW_S * (W - 40);
  for (let p = 0; p < P; p++) {
    el("text", { x: 2, y: top + (p + 0.5) * rowH + 3, "font-size": 9, text: `p${p}` }, svg, true);
  }
  for (let s = Math.ceil(t0 / 10) * 10; s <= t0 + WINDOW_S; s += 10) {
    el("text", { x: x(s), y: H - 4, "font-size": 9, "text-anchor": "middle", text: `${s}s` }, svg, true);
  }
  for (const f of S.timeline) {
    if (f.t < t0) continue;
    const bad = f.op === "state" ? f.to !== "up" : f.op !== "heal";
    el("line", { x1: x(f.t), x2: x(f.t), y1: top, y2: H - 16, stroke: bad ? "#d22" : "#2a2",
                 "stroke-width": 1.5, "stroke-dasharray": f.op === "state" ? "" : "3 2" }, svg, true);
  }
  const colour = { GOOD: "#2a2", SKIP: "#fc0", ASSUMED_BAD: "#d22", DENIED: "#555", UNKNOWN: "#bbb" };
  for (const e of S.events) {
    if (e.t < t0) continue;
    el("circle", { cx: x(e.t), cy: top + (e.plane + 0.5) * rowH, r: 2.5, fill: colour[e.new] || "#000" }, svg, true);
  }
}

function updateQueues(queues) {
  const names = Object.keys(queues);
  $("queues-card").hidden = names.length === 0;
  const body = $("queues").tBodies[0];
  body.replaceChildren();
  for (const n of names.sort()) {
    const q = queues[n];
    const tr = el("tr", {}, body);
    for (const v of [n, q.backlog_kb, q.hwm_kb, q.packets, q.marked, q.trimmed, q.dropped]) el("td", { text: String(v) }, tr);
  }
}

// ----------------------------------------------------------------- stream
function hello(h) {
  const first = !S.layout;
  S.layout = h.layout;
  S.readOnly = h.read_only_reason;
  $("fabric-name").textContent = h.layout.name;
  const mode = $("mode");
  if (!S.token) { mode.textContent = "no token: open the URL mrc dash printed (with ?token=)"; }
  else if (S.readOnly) { mode.textContent = S.readOnly; }
  else { mode.textContent = "faults enabled"; mode.classList.add("rw"); }
  if (first) {
    drawFabric(h.layout);
    S.planeChart = lineChart($("planes-chart"), [...Array(h.layout.planes).keys()].map((p) => `plane ${p}`));
    S.hostChart = lineChart($("hosts-chart"), [...Array(h.layout.hosts).keys()].map((i) => `h${i}`));
    wireButtons();
  }
  for (const c of [S.planeChart, S.hostChart]) for (const d of c.data.datasets) d.data = [];
  addPoints(h.series);
  $("events").replaceChildren();
  S.events = [];
  addEvents(h.events);
  setTimeline(h.timeline);
  if (h.tick) tick(h.tick, true);
  updateButtons();
}

function tick(t, fromHello) {
  if (!fromHello && t.planes) addPoints([{ t: t.t, planes: t.planes, hosts: t.hosts }]);
  $("clock").textContent = `${t.t.toFixed(1)} s`;
  if (t.links) { S.lastLinks = t.links; updateLinks(t.links); }
  if (t.contexts) updateQPs(t.contexts);
  if (t.grids) updateGrid(t.grids);
  if (!fromHello && t.events) addEvents(t.events);
  if (t.timeline) setTimeline(t.timeline);
  if (t.queues) updateQueues(t.queues);
  drawTimeline();
  const lines = (t.errors || []).concat((t.passed_over || []).map((p) => `control socket ${p.ctx} passed over: ${p.why}`));
  const errs = $("errors");
  errs.hidden = lines.length === 0;
  errs.textContent = lines.join("\n");
}

function connect() {
  if (S.src) S.src.close();
  const live = $("live");
  if (!S.token) {  // the server shows nothing without one
    $("mode").textContent = "no token: open the URL mrc dash printed (with ?token=)";
    live.textContent = "not connected"; live.className = "pill off";
    return;
  }
  const q = new URLSearchParams();
  if (S.qp) q.set("qp", S.qp);
  if (S.token) q.set("token", S.token);  // reading needs a token too (an EventSource sends no headers)
  S.src = new EventSource("/api/stream" + (q.toString() ? `?${q}` : ""));
  S.src.addEventListener("hello", (m) => { hello(JSON.parse(m.data)); live.textContent = "live"; live.className = "pill on"; });
  S.src.addEventListener("tick", (m) => tick(JSON.parse(m.data), false));
  S.src.onerror = () => { live.textContent = "disconnected (retrying)"; live.className = "pill off"; };
}

connect();
