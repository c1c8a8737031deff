// The dashboard's only script: it swaps in fragments the server rendered and listens to event streams.
// No framework and no build step: EventSource (server-sent events) and fetch are enough for a
// read-only view, and every row it inserts was rendered (and escaped) by the server.
"use strict";

// Elements with data-refresh="URL": their content is replaced by GET URL every `every` ms.
function refresh(element, every) {
  const tick = async () => {
    try {
      const response = await fetch(element.dataset.refresh, { credentials: "same-origin" });
      if (response.ok) {
        const html = await response.text();
        if (element.innerHTML !== html) element.innerHTML = html;
      }
    } catch (_) {
      /* the server is restarting: the next tick tries again */
    }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

// The timeline: new rows arrive as `record` events (HTML rows), newest on top.
function timeline(tbody) {
  const state = document.getElementById("live-state");
  let url = tbody.dataset.stream;
  const source = new EventSource(url);
  source.addEventListener("record", (event) => {
    const empty = tbody.querySelector("tr.empty");
    if (empty) empty.remove();
    tbody.insertAdjacentHTML("afterbegin", event.data);
    const row = tbody.firstElementChild;
    row.classList.add("fresh");
    setTimeout(() => row.classList.remove("fresh"), 1500);
  });
  source.onopen = () => { if (state) { state.textContent = "live"; state.className = "live"; } };
  source.onerror = () => { if (state) { state.textContent = "reconnecting"; state.className = "live off"; } };
}

// A run's output: `snapshot` events carry {status, stdout, stderr, exit_code, live, note}.
function output(box) {
  const stdout = document.getElementById("stdout");
  const stderr = document.getElementById("stderr");
  const status = document.getElementById("run-status");
  const exit = document.getElementById("run-exit");
  const note = document.getElementById("run-note");
  const source = new EventSource(box.dataset.stream);
  source.addEventListener("snapshot", (event) => {
    const snap = JSON.parse(event.data);
    stdout.textContent = snap.stdout || "";
    stderr.textContent = snap.stderr || "";
    status.textContent = snap.status;
    exit.textContent = snap.exit_code === null || snap.exit_code === undefined ? "-" : snap.exit_code;
    note.textContent = snap.note || (snap.live ? "live" : "");
    box.dataset.status = snap.status;
  });
  source.addEventListener("done", () => source.close());
}

document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll("[data-refresh]")) refresh(element, 1000);
  const tbody = document.getElementById("timeline");
  if (tbody) timeline(tbody);
  const box = document.getElementById("output");
  if (box) output(box);
});
