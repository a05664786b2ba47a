"use strict";
// Shared by the pages: the signed-in user, JSON fetches, the header, small formatting helpers.
const App = {
  me: null,
  async json(url, options) {
    const response = await fetch(url, Object.assign({credentials: "same-origin"}, options || {}));
    if (response.status === 401) { location.href = "/login"; throw new Error("log in first"); }
    return response;
  },
  header(overview) {
    App.me = overview.me;
    const device = overview.device || {};
    document.getElementById("device").textContent = device.name || device.id || "appliance";
    const me = document.getElementById("me");
    me.textContent = `${overview.me.user} (${overview.me.role})`;
    if (overview.me.login) {
      const form = document.createElement("form");
      form.method = "post"; form.action = "/logout"; form.style.display = "inline";
      form.innerHTML = ' <button type="submit">Log out</button>';
      me.appendChild(form);
    }
  },
  text(value, suffix) { return value === null || value === undefined ? "-" : `${value}${suffix || ""}`; },
  time(utc) { return new Date(utc * 1000).toLocaleTimeString(); },
  eventText(e) {
    const where = e.zone ? `zone ${e.zone}` : e.line ? `line ${e.line}${e.direction ? " " + e.direction : ""}` : "";
    return `${App.time(e.capture_time)} ${e.camera_id} ${e.event} ${where} #${e.track_id} ${e.class_name}`;
  },
  eventItem(e) {
    const li = document.createElement("li");
    li.dataset.type = e.event; li.dataset.camera = e.camera_id; li.dataset.name = e.zone || e.line || "";
    li.dataset.event = e.event_id;
    li.dataset.time = e.capture_time;
    if (e.snapshot_id) {
      const img = document.createElement("img");
      img.src = `/events/${e.event_id}.jpg`; img.loading = "lazy"; img.alt = "snapshot";
      img.onerror = () => img.remove();
      li.appendChild(img);
    }
    const span = document.createElement("span");
    span.textContent = App.eventText(e);
    li.appendChild(span);
    if (e.clip) App.clipButton(li, e.clip);
    return li;
  },
  clipButton(li, url) {
    // The clip is written once its post-capture seconds are recorded: played on request, not preloaded.
    const button = document.createElement("button");
    button.type = "button"; button.className = "play-clip"; button.textContent = "Play clip";
    button.onclick = () => {
      const video = document.createElement("video");
      video.controls = true; video.autoplay = true; video.muted = true; video.src = url;
      video.onerror = () => { button.textContent = "Clip not ready (try again)"; video.remove(); };
      li.appendChild(video);
    };
    li.appendChild(button);
  },
};
