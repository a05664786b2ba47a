"use strict";
// The kept events (the newest the appliance holds since it started), filtered, a page at a time, newest first.
// The filters live in the address (?camera=&type=&name=&since=&until=&before=), so a page can be linked.
const PAGE = 50;
const params = new URLSearchParams(location.search);

function utcSeconds(local) { return local ? String(new Date(local).getTime() / 1000) : ""; }
function localInput(seconds) {
  if (!seconds) return "";
  const d = new Date(Number(seconds) * 1000), pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:` +
    `${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function go(changes) {
  const next = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) { if (v) next.set(k, v); else next.delete(k); }
  location.search = next.toString();
}

async function show() {
  const query = new URLSearchParams(params);
  query.set("limit", String(PAGE));
  const page = await (await App.json(`/api/events?${query}`)).json();
  document.getElementById("events").replaceChildren(...page.events.map(App.eventItem));
  document.getElementById("summary").textContent = !page.events.length ? "no kept event matches" :
    `${page.events.length} of ${page.matched} matching event(s)${params.get("before") ? " from here on" : ""}, ` +
    `newest first (the appliance keeps its newest ${page.kept} since it started)`;
  const older = document.getElementById("older");
  older.disabled = page.older === null;
  older.onclick = () => go({before: String(page.older)});
  document.getElementById("newest").onclick = () => go({before: ""});
  document.body.dataset.ready = "1";
}

async function start() {
  const overview = await (await App.json("/api/overview")).json();
  App.header(overview);
  const cameras = document.getElementById("f-camera");
  for (const id of Object.keys(overview.cameras || {}).sort()) {
    const option = document.createElement("option"); option.value = id; option.textContent = id;
    cameras.appendChild(option);
  }
  for (const key of ["camera", "type", "name"]) document.getElementById(`f-${key}`).value = params.get(key) || "";
  for (const key of ["since", "until"]) document.getElementById(`f-${key}`).value = localInput(params.get(key));
  document.getElementById("filters").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = (id) => document.getElementById(id).value.trim();
    go({camera: value("f-camera"), type: value("f-type"), name: value("f-name"),
        since: utcSeconds(value("f-since")), until: utcSeconds(value("f-until")), before: ""});
  });
  await show();
}
start();
