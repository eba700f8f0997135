// The page's shell: asks the server which views this explorer has, draws the tabs, and
// starts each view the first time it is shown.
import { api, onShowView } from "./api.js";

const VIEWS = {
  graph: ["graph and backward", async (root) => (await import("./graph.js")).showGraph(root)],
  translate: ["translate", async (root, info) => (await import("./translate.js")).showTranslate(root, info)],
  training: ["training", async (root, info) => (await import("./training.js")).showTraining(root, info)],
  compiled: ["compiled step and profile", async (root) => (await import("./compiled.js")).showCompiled(root)],
};

async function main() {
  const info = await api("/api/info");
  document.getElementById("title").textContent = info.title;
  document.title = `${info.title} · explorer`;
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
      await VIEWS[name][1](document.getElementById(`view-${name}`), info);
      status.textContent = "";
    }
  };
  onShowView(show);
  const tabs = document.getElementById("tabs");
  for (const name of info.views) {
    tabs.append(Object.assign(document.createElement("button"),
      { id: `tab-${name}`, textContent: VIEWS[name][0], onclick: () => show(name) }));
  }
  await show(info.views[0]);
  document.body.dataset.ready = "1";  // for the browser tests: the first view is drawn
}

main().catch((e) => { document.getElementById("status").textContent = `error: ${e.message}`; });
