"use strict";
// The overview: the appliance's facts, each camera with a live thumbnail, and the events as they come.
const cards = {};

function facts(o) {
  const inf = o.inference || {}, lat = inf.latency_ms || {}, engine = o.engine || {}, spool = o.spool || {};
  const ota = o.ota || {};
  const rows = [
    ["status", o.status], ["version", o.version], ["model", o.model],
    ["engine", engine.builder ? `${engine.builder} ${engine.precision || ""} (${engine.triton_kind || ""})` : engine.state],
    ["inference", `${App.text(inf.per_s, "/s")} (p50 ${App.text(lat.p50, " ms")}, p99 ${App.text(lat.p99, " ms")})`],
    ["spool", `${App.text(spool.backlog)} waiting; MQTT ${App.text(spool.mqtt)}`],
    ["OTA", ota.active_version ? `version ${ota.active_version}` : "base model" + (ota.last ? `; ${JSON.stringify(ota.last)}` : "")],
  ];
  const dl = document.getElementById("facts");
  dl.replaceChildren(...rows.flatMap(([k, v]) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k; dd.textContent = v === undefined || v === null ? "-" : v;
    return [dt, dd];
  }));
  const verdict = document.getElementById("verdict");
  const level = o.level || (o.ok ? "ok" : "failed");  // ok, degraded or failed, with the reasons beside it
  verdict.textContent = level.toUpperCase() + (o.reasons && o.reasons.length ? `: ${o.reasons.join("; ")}` : "");
  verdict.className = level === "ok" ? "state-running" : "state-failed";
}

function camerasPanel(o) {
  const box = document.getElementById("cameras");
  const select = document.getElementById("f-camera");
  for (const [id, cam] of Object.entries(o.cameras || {})) {
    let card = cards[id];
    if (!card) {
      card = cards[id] = document.createElement("a");
      card.className = "camera-card panel"; card.href = `/camera/${encodeURIComponent(id)}`;
      card.innerHTML = `<img alt="live picture of ${id}"><div class="line"></div>`;
      box.appendChild(card);
      const option = document.createElement("option"); option.textContent = id; select.appendChild(option);
    }
    card.querySelector(".line").innerHTML = "";
    const line = card.querySelector(".line");
    line.textContent = `${id}: `;
    const state = document.createElement("span");
    state.className = `state-${cam.state}`; state.textContent = cam.state;
    line.append(state, ` ${App.text(cam.fps)} fps`);
  }
}

async function thumbnails() {
  for (const [id, card] of Object.entries(cards)) {
    const response = await fetch(`/api/cameras/${encodeURIComponent(id)}/frame.jpg?size=thumb`);
    if (response.status === 200) {
      const url = URL.createObjectURL(await response.blob());
      const img = card.querySelector("img");
      if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
      img.src = url;
    }
  }
  setTimeout(thumbnails, 1000);
}

function filtered() {
  const camera = document.getElementById("f-camera").value, type = document.getElementById("f-type").value;
  const name = document.getElementById("f-name").value.trim();
  for (const li of document.getElementById("events").children) {
    li.hidden = (camera && li.dataset.camera !== camera) || (type && li.dataset.type !== type) ||
      (name && li.dataset.name !== name);
  }
}

async function start() {
  const overview = await (await App.json("/api/overview")).json();
  App.header(overview); facts(overview); camerasPanel(overview);
  const list = document.getElementById("events");
  for (const e of (await (await App.json("/api/events?limit=200")).json()).events) list.appendChild(App.eventItem(e));
  filtered();
  for (const id of ["f-camera", "f-type", "f-name"]) document.getElementById(id).addEventListener("input", filtered);
  const stream = new EventSource("/api/stream");
  stream.addEventListener("state", (m) => { const o = JSON.parse(m.data); facts(o); camerasPanel(o); });
  stream.addEventListener("analytics", (m) => {
    list.prepend(App.eventItem(JSON.parse(m.data)));
    while (list.children.length > 200) list.lastChild.remove();
    filtered();
  });
  thumbnails();
}
start();
