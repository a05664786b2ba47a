"use strict";
// One camera: the live picture with detections, zones and lines drawn over it; the zone and line editor.
const cameraId = decodeURIComponent(location.pathname.split("/").pop());
const canvas = document.getElementById("picture"), ctx = canvas.getContext("2d");
const S = {frame: null, detections: [], layout: null, shapes: [], selected: -1, drawing: null, drag: null,
           problems: {}, counts: null};
const HIT = 12;  // pixels of the frame a click may miss a corner by

// -- shapes: zones and lines in frame pixels while edited; units restored on the way out -------------------
function toPixels(item, kind) {
  const w = S.layout.width, h = S.layout.height, k = item.units === "normalized" ? [w, h] : [1, 1];
  const pts = kind === "zone" ? item.points : [item.a, item.b];
  return {kind, item: Object.assign({}, item), points: pts.map(([x, y]) => [x * k[0], y * k[1]])};
}
function fromPixels(shape) {
  const w = S.layout.width, h = S.layout.height, item = Object.assign({}, shape.item);
  const norm = item.units === "normalized";
  const pts = shape.points.map(([x, y]) => norm ? [+(x / w).toFixed(4), +(y / h).toFixed(4)]
                                                : [Math.round(x), Math.round(y)]);
  if (shape.kind === "zone") item.points = pts; else { item.a = pts[0]; item.b = pts[1]; }
  return item;
}
function classFilter() {
  // "person: 0.3, car" -> {person: 0.3, car: <min_score>}; empty -> null (every class at min_score)
  const text = document.getElementById("classes").value.trim();
  if (!text) return null;
  const out = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const [name, score] = part.split(":").map((p) => p.trim());
    out[name] = score === undefined || score === "" ? S.layout.min_score : Number(score);
  }
  return out;
}
function draft() {
  return {classes: classFilter(), zones: S.shapes.filter((s) => s.kind === "zone").map(fromPixels),
          lines: S.shapes.filter((s) => s.kind === "line").map(fromPixels)};
}
function loadShapes() {
  S.shapes = S.layout.zones.map((z) => toPixels(z, "zone")).concat(S.layout.lines.map((l) => toPixels(l, "line")));
  S.selected = -1; S.problems = {}; S.drawing = null;
  const filter = S.layout.class_filter;
  document.getElementById("classes").value = filter ?
    Object.entries(filter).map(([name, score]) => `${name}: ${score}`).join(", ") : "";
  document.getElementById("classes-error").textContent = "";
  renderList();
}
function freeName(prefix) {
  const used = new Set(S.shapes.map((s) => s.item.name));
  for (let i = 1; ; i++) if (!used.has(`${prefix}${i}`)) return `${prefix}${i}`;
}

// -- drawing --------------------------------------------------------------------------------------------
function draw() {
  if (S.video) ctx.drawImage(S.video, 0, 0, canvas.width, canvas.height);
  else if (S.frame) ctx.drawImage(S.frame, 0, 0, canvas.width, canvas.height);
  else { ctx.fillStyle = "#000"; ctx.fillRect(0, 0, canvas.width, canvas.height); }
  S.shapes.forEach((shape, i) => drawShape(shape, i === S.selected, !!S.problems[i]));
  if (S.drawing) drawShape(S.drawing, true, false, true);
  ctx.lineWidth = 2; ctx.font = "14px sans-serif";
  for (const d of S.detections) {
    const [x1, y1, x2, y2] = d.box;
    ctx.strokeStyle = d.track_id === null ? "#ffd24d" : "#4cd97b";
    ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
    const label = `${d.track_id === null ? "" : "#" + d.track_id + " "}${d.class_name} ${d.score.toFixed(2)}`;
    ctx.fillStyle = "rgba(0,0,0,.6)"; ctx.fillRect(x1, y1 - 17, ctx.measureText(label).width + 6, 17);
    ctx.fillStyle = ctx.strokeStyle; ctx.fillText(label, x1 + 3, y1 - 4);
  }
}
function drawShape(shape, selected, bad, open) {
  const color = bad ? "#ff5d5d" : shape.kind === "zone" ? "#4fb3ff" : "#ff9f1c";
  const p = shape.points;
  if (!p.length) return;
  ctx.strokeStyle = color; ctx.lineWidth = selected ? 3 : 2;
  ctx.beginPath(); ctx.moveTo(p[0][0], p[0][1]);
  for (const q of p.slice(1)) ctx.lineTo(q[0], q[1]);
  if (shape.kind === "zone" && !open) {
    ctx.closePath(); ctx.fillStyle = bad ? "rgba(255,93,93,.2)" : "rgba(79,179,255,.15)"; ctx.fill();
  }
  ctx.stroke();
  if (shape.kind === "line" && p.length === 2) drawInArrow(p[0], p[1], shape.item.in_side, color);
  ctx.fillStyle = color;
  for (const [x, y] of p) { ctx.beginPath(); ctx.arc(x, y, selected ? 6 : 4, 0, 2 * Math.PI); ctx.fill(); }
  ctx.font = "bold 15px sans-serif"; ctx.fillText(shape.item.name || "", p[0][0] + 8, p[0][1] - 8);
}
function drawInArrow(a, b, side, color) {
  // Looking from a to b on the picture (y down), "right" is (-dy, dx); the arrow points into the "in" side.
  const mx = (a[0] + b[0]) / 2, my = (a[1] + b[1]) / 2, dx = b[0] - a[0], dy = b[1] - a[1];
  const len = Math.hypot(dx, dy) || 1, sign = side === "left" ? -1 : 1;
  const nx = (-dy / len) * sign, ny = (dx / len) * sign, tip = [mx + nx * 40, my + ny * 40];
  ctx.strokeStyle = color; ctx.beginPath(); ctx.moveTo(mx, my); ctx.lineTo(tip[0], tip[1]); ctx.stroke();
  ctx.beginPath(); ctx.moveTo(tip[0], tip[1]);
  ctx.lineTo(tip[0] - nx * 10 - ny * 7, tip[1] - ny * 10 + nx * 7);
  ctx.lineTo(tip[0] - nx * 10 + ny * 7, tip[1] - ny * 10 - nx * 7); ctx.closePath();
  ctx.fillStyle = color; ctx.fill(); ctx.fillText("in", tip[0] + nx * 8, tip[1] + ny * 8);
}

// -- the list of shapes beside the picture ----------------------------------------------------------------
function renderList() {
  const box = document.getElementById("shapes"), edit = App.me && App.me.can_edit;
  box.replaceChildren();
  S.shapes.forEach((shape, i) => {
    const div = document.createElement("div");
    div.className = "shape" + (i === S.selected ? " selected" : "");
    div.dataset.name = shape.item.name;
    const it = shape.item;
    div.innerHTML = `<b>${shape.kind}</b> <input type="text" class="name" aria-label="name">` +
      (shape.kind === "line" ? ` in: <select class="in-side"><option>left</option><option>right</option></select>`
                             : ` dwell s: <input type="number" class="dwell" min="0" step="1">`) +
      ` <button class="delete">Delete</button><div class="error problem"></div>`;
    const name = div.querySelector(".name"); name.value = it.name || "";
    name.oninput = () => { it.name = name.value.trim(); draw(); };
    if (shape.kind === "line") {
      const sel = div.querySelector(".in-side"); sel.value = it.in_side || "right";
      sel.onchange = () => { it.in_side = sel.value; draw(); };
    } else {
      const dwell = div.querySelector(".dwell"); dwell.value = it.dwell_s ?? "";
      dwell.oninput = () => { if (dwell.value === "") delete it.dwell_s; else it.dwell_s = +dwell.value; };
    }
    div.querySelector(".delete").onclick = () => { S.shapes.splice(i, 1); S.selected = -1; S.problems = {};
      renderList(); draw(); };
    div.querySelector(".problem").textContent = (S.problems[i] || []).join("\n");
    div.onclick = (ev) => { if (ev.target === div || ev.target.tagName === "B") { S.selected = i; renderList(); draw(); } };
    for (const input of div.querySelectorAll("input, select, button")) input.disabled = !edit;
    box.appendChild(div);
  });
  for (const id of ["add-line", "add-zone", "apply", "revert", "classes"]) document.getElementById(id).disabled = !edit;
  document.getElementById("hint").hidden = !edit;
}

// -- the mouse ----------------------------------------------------------------------------------------------
function at(ev) {
  const r = canvas.getBoundingClientRect();
  return [(ev.clientX - r.left) * canvas.width / r.width, (ev.clientY - r.top) * canvas.height / r.height];
}
function nearCorner(p) {
  for (let i = S.shapes.length - 1; i >= 0; i--) {
    const k = S.shapes[i].points.findIndex(([x, y]) => Math.hypot(x - p[0], y - p[1]) <= HIT);
    if (k >= 0) return [i, k];
  }
  return null;
}
function nearEdge(p) {
  for (let i = S.shapes.length - 1; i >= 0; i--) {
    const s = S.shapes[i];
    if (s.kind !== "zone") continue;
    for (let k = 0; k < s.points.length; k++) {
      const a = s.points[k], b = s.points[(k + 1) % s.points.length];
      const dx = b[0] - a[0], dy = b[1] - a[1], len2 = dx * dx + dy * dy || 1;
      const t = Math.max(0, Math.min(1, ((p[0] - a[0]) * dx + (p[1] - a[1]) * dy) / len2));
      if (Math.hypot(a[0] + t * dx - p[0], a[1] + t * dy - p[1]) <= HIT / 2) return [i, k + 1];
    }
  }
  return null;
}
canvas.addEventListener("mousedown", (ev) => {
  if (!App.me || !App.me.can_edit) return;
  const p = at(ev);
  if (S.drawing) {
    S.drawing.points.push(p);
    if (S.drawing.kind === "line" && S.drawing.points.length === 2) finishDrawing();
    draw(); return;
  }
  const corner = nearCorner(p);
  if (corner) { S.selected = corner[0]; S.drag = corner; renderList(); draw(); return; }
  const edge = nearEdge(p);
  if (edge) { S.shapes[edge[0]].points.splice(edge[1], 0, p); S.selected = edge[0]; S.drag = edge; renderList(); draw(); }
});
canvas.addEventListener("mousemove", (ev) => {
  if (!S.drag) return;
  S.shapes[S.drag[0]].points[S.drag[1]] = at(ev); draw();
});
window.addEventListener("mouseup", () => { S.drag = null; });
canvas.addEventListener("dblclick", (ev) => {
  if (!App.me || !App.me.can_edit || S.drawing) return;
  const corner = nearCorner(at(ev));
  if (!corner) return;
  const s = S.shapes[corner[0]];
  if (s.kind === "zone" && s.points.length > 3) { s.points.splice(corner[1], 1); draw(); }
});
function startDrawing(kind) {
  const item = kind === "line" ? {name: freeName("line"), in_side: "right"} : {name: freeName("zone")};
  S.drawing = {kind, item, points: []};
  document.getElementById("finish").hidden = kind !== "zone";
}
function finishDrawing() {
  const d = S.drawing;
  S.drawing = null; document.getElementById("finish").hidden = true;
  if ((d.kind === "line" && d.points.length === 2) || (d.kind === "zone" && d.points.length >= 3)) {
    S.shapes.push(d); S.selected = S.shapes.length - 1;
  }
  renderList(); draw();
}
document.getElementById("add-line").onclick = () => startDrawing("line");
document.getElementById("add-zone").onclick = () => startDrawing("zone");
document.getElementById("finish").onclick = finishDrawing;
document.getElementById("revert").onclick = () => { loadShapes(); draw(); };

// -- Apply and Copy YAML -------------------------------------------------------------------------------------
function yamlOf(d) {
  const part = (k, items) => items.length ? `${k}:\n` + items.map((i) => `  - ${JSON.stringify(i)}\n`).join("")
                                          : `${k}: []\n`;
  return `classes: ${d.classes === null ? "null" : JSON.stringify(d.classes)}\n` + part("zones", d.zones) +
    part("lines", d.lines);
}
document.getElementById("apply").onclick = async () => {
  const d = draft(), error = document.getElementById("apply-error");
  error.textContent = "";
  const response = await App.json(`/api/cameras/${encodeURIComponent(cameraId)}/layout`, {
    method: "POST", headers: {"Content-Type": "application/json", "X-CSRF-Token": App.me.csrf},
    body: JSON.stringify(d)});
  const result = await response.json();
  S.problems = {};
  if (response.ok && result.applied) {
    document.getElementById("applied").textContent = `Applied: ${result.source}`;
    await loadLayout();
  } else {
    const zones = S.shapes.map((s, i) => [s, i]).filter(([s]) => s.kind === "zone").map(([, i]) => i);
    const lines = S.shapes.map((s, i) => [s, i]).filter(([s]) => s.kind === "line").map(([, i]) => i);
    const loose = [], classes = [];
    for (const p of result.problems || []) {
      const index = p.path[0] === "zones" ? zones[p.path[1]] : p.path[0] === "lines" ? lines[p.path[1]] : undefined;
      if (p.path[0] === "classes") classes.push(p.message);
      else if (index === undefined) loose.push(p.message);
      else (S.problems[index] = S.problems[index] || []).push(p.message);
    }
    document.getElementById("classes-error").textContent = classes.join("\n");
    error.textContent = ["Not applied.", ...loose, result.error || ""].join("\n").trim();
    renderList();
  }
  draw();
};
document.getElementById("copy-yaml").onclick = async () => {
  const text = yamlOf(draft()), area = document.getElementById("yaml");
  area.hidden = false; area.value = `# cameras: - id: ${cameraId} ... analytics:\n` + text;
  try { await navigator.clipboard.writeText(text); } catch (e) { area.select(); }
};

// -- the live picture, the counts, the events ---------------------------------------------------------------
async function frames() {
  try {
    const response = await fetch(`/api/cameras/${encodeURIComponent(cameraId)}/frame.jpg`, {cache: "no-store"});
    if (response.status === 200) {
      const meta = JSON.parse(response.headers.get("X-Frame"));
      S.frame = await createImageBitmap(await response.blob());
      S.detections = meta.detections;
      document.getElementById("frame-info").textContent =
        `frame ${meta.seq} at ${App.time(meta.capture_time)}; ${meta.detections.length} detection(s)` +
        `; pictures, not video: ${S.fallback}`;
      draw();
    }
  } catch (e) { /* the appliance restarting: try again */ }
  setTimeout(frames, 250);
}
// The annotated stream as video, drawn into the same canvas (so the editor stays aligned); else the pictures.
async function video() {
  const info = await (await App.json(`/api/cameras/${encodeURIComponent(cameraId)}/video`)).json();
  if (!info.video) return fallback(info.reason);
  const el = Object.assign(document.createElement("video"), {id: "video", muted: true, autoplay: true,
                                                              playsInline: true});
  el.style.cssText = "position:absolute;left:0;top:0;width:4px;height:4px;opacity:0.01";  // playing, not shown
  el.addEventListener("error", () => fallback(`the video failed (media error ${el.error ? el.error.code : "?"})`));
  el.addEventListener("playing", () => {
    if (S.fallback) return;
    S.video = el; S.detections = [];
    document.getElementById("frame-info").textContent =
      "video: the annotated stream (H.264); boxes, zones and counts drawn by the appliance";
    const paint = () => { if (S.video === el) { draw(); requestAnimationFrame(paint); } };
    requestAnimationFrame(paint);
  });
  document.body.appendChild(el);
  el.src = info.video;
  setTimeout(() => { if (!S.video) fallback("the video did not start within 20 s"); }, 20000);
}
function fallback(reason) {
  if (S.fallback) return;
  S.fallback = reason; S.video = null;
  const el = document.getElementById("video");
  if (el) { el.removeAttribute("src"); el.load(); }
  frames();
}
function counts(state) {
  const a = state.analytics || {}, rows = [];
  for (const [name, c] of Object.entries(a.zones || {})) rows.push([`zone ${name}`, c.current, c.entered, c.exited, "", ""]);
  for (const [name, c] of Object.entries(a.lines || {})) rows.push([`line ${name}`, "", "", "", c.in, c.out]);
  document.getElementById("counts").replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.name = r[0];
    for (const v of r) { const td = document.createElement("td"); td.textContent = v; tr.appendChild(td); }
    return tr;
  }));
  document.getElementById("source").textContent = state.layout_source ?
    `zones and lines from ${state.layout_source === "config" ? "the config file" : state.layout_source}` : "";
}
async function loadLayout() {
  const response = await App.json(`/api/cameras/${encodeURIComponent(cameraId)}/layout`);
  if (response.status === 404) { document.getElementById("editor").hidden = true; return; }
  S.layout = await response.json();
  canvas.width = S.layout.width; canvas.height = S.layout.height;
  loadShapes();
}
async function start() {
  document.getElementById("camera").textContent = cameraId;
  document.title = `${cameraId} - appliance`;
  const overview = await (await App.json("/api/overview")).json();
  App.header(overview);
  await loadLayout();
  draw(); video().catch((e) => fallback(`no video: ${e}`));
  const list = document.getElementById("events");
  const recent = await (await App.json(`/api/events?camera=${encodeURIComponent(cameraId)}&limit=100`)).json();
  list.replaceChildren(...recent.events.map(App.eventItem));  // what happened before the page was opened
  const stream = new EventSource(`/api/stream?camera=${encodeURIComponent(cameraId)}`);
  stream.addEventListener("state", (m) => counts(JSON.parse(m.data)));
  stream.addEventListener("analytics", (m) => {
    list.prepend(App.eventItem(JSON.parse(m.data)));
    while (list.children.length > 100) list.lastChild.remove();
  });
  document.body.dataset.ready = "1";
}
start();
