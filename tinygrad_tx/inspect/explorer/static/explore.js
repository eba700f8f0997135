// The page's shell: asks which views this explorer has, draws the tabs, starts each view the
// first time it is shown, opens the run's news stream (a run that is training), and offers the
// guided tour on a first visit.
"use strict";
(() => {
  const NAMES = { graph: "graph and backward", update: "the update", translate: "translate", training: "training",
                  compiled: "compiled step and profile" };

  async function main() {
    const info = await TX.api("/api/info");
    document.getElementById("title").textContent = info.title;
    document.title = `${info.title} · explorer`;
    document.getElementById("saved-note").hidden = !TX.saved;
    const started = {};
    const show = async (name) => {
      for (const other of info.views) {
        document.getElementById(`view-${other}`).hidden = other !== name;
        document.getElementById(`tab-${other}`).classList.toggle("active", other === name);
      }
      if (!started[name]) {
        started[name] = true;
        const status = document.getElementById("status");
        status.textContent = "loading…";
        await TX.views[name](document.getElementById(`view-${name}`), info);
        status.textContent = "";
      }
    };
    TX.onShowView(show);
    const tabs = document.getElementById("tabs");
    for (const name of info.views) {
      tabs.append(Object.assign(document.createElement("button"),
        { id: `tab-${name}`, textContent: NAMES[name], onclick: () => show(name) }));
    }
    if (info.live) {  // one stream for every view: metrics appended, checkpoints written
      const events = new EventSource("/api/events/metrics");
      events.onmessage = (e) => TX.news(JSON.parse(e.data));
    }
    if (info.tour) offerTour();
    await show(info.views[0]);
    document.body.dataset.ready = "1";  // for the browser tests: the first view is drawn
  }

  // The tour button, in the header; on a first visit it says so.
  function offerTour() {
    const button = document.getElementById("tour-start");
    button.hidden = false;
    let seen = null;
    try { seen = localStorage.getItem("tx-toured"); } catch (e) { /* no storage: a first visit each time */ }
    if (!seen) button.textContent = "new here? take the tour of one training step";
    button.addEventListener("click", () => { button.textContent = "take the tour"; TX.tour.start(); });
  }

  const start = () => main().catch((e) => { document.getElementById("status").textContent = `error: ${e.message}`; });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);  // the scripts run in <head>
  else start();
})();
