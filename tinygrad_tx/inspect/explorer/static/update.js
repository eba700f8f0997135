// The update view: the step's end, after backward. The server takes the optimizer's own step on a copy
// of the checkpoint's weights, from the optimizer state saved with them (explore_update.py, update.py):
// the learning rate, the optimizer's state, the clipping, the loss before and after, and for each
// parameter its Δw beside its gradient and its size against the weight's. This file draws; it also
// gives the walk its last two steps (the clip and the update) and the tour its last stop.
"use strict";
(() => {
  const { el, svg, fmt, tick, heatmap, axisNames, statsLine, shape } = TX.draw;
  const state = { summary: null, selected: null, version: undefined, root: null };

  async function showUpdate(root) {
    state.root = root;
    TX.onNews((news) => {  // last.npz written again: the update from its state
      const version = news.versions && news.versions["last.npz"];
      if (version === undefined) return;
      if (state.version !== undefined && version !== state.version) load();
      state.version = version;
    });
    await load();
  }

  async function load() {
    const u = await TX.api("/api/update");
    const message = state.root.querySelector("#update-message");
    message.hidden = !u.waiting;
    message.textContent = u.waiting || "";
    if (u.waiting) { state.root.querySelector("#update").replaceChildren(); return; }
    state.summary = u;
    state.root.querySelector("#update-shows").textContent =
      `the step after ${u.shows.checkpoint}'s step ${u.shows.step} (the optimizer's step ${u.t}) · ${u.shows.mode}`;
    state.root.querySelector("#update").replaceChildren(facts(u), el("div", { class: "update-columns" },
      el("div", {}, el("h3", {}, "each parameter's step against its size"), table(u)),
      el("div", { id: "update-detail" })));
    await select(state.selected && u.params.some((p) => p.name === state.selected) ? state.selected : u.params[0].name);
  }

  // The four facts of the step: its learning rate, the optimizer's state, the clipping, the loss.
  function facts(u) {
    const hyper = Object.entries(u.hyperparameters).map(([k, v]) => `${k} ${Array.isArray(v) ? `(${v.map(tick).join(", ")})` : tick(v)}`);
    const card = (title, big, ...rest) => el("div", { class: "fact" }, el("h3", {}, title), el("div", { class: "big" }, big), ...rest);
    return el("div", { class: "facts" },
      card("learning rate", fmt(u.lr), el("p", { class: "note" }, u.schedule)),
      card("optimizer state, as saved", `${u.optimizer}, t = ${u.t_saved} → ${u.t}`,
           el("p", { class: "note" }, `${hyper.join(", ")}; its state per parameter: ${(u.params[0] || { state: [] }).state.join(" and ")}`),
           u.rule ? el("details", {}, el("summary", {}, `the rule, as optim.${u.optimizer} states it`), el("pre", { class: "math" }, u.rule)) : null),
      card("clipping", u.clip ? `‖g‖ ${fmt(u.clip.norm)} → ${fmt(u.clip.norm_after)}` : "none", el("p", { class: "note" }, u.words.clip)),
      card("loss on this batch", `${fmt(u.loss_before)} → ${fmt(u.loss_after)}`, el("p", { class: "note" }, u.words.loss)));
  }

  // A row a parameter: its norms, and ‖Δw‖/‖w‖ as a bar on one log scale for all rows.
  function table(u) {
    const ratios = u.params.map((p) => p.ratio).filter((r) => r > 0);
    const lo = Math.floor(Math.log10(Math.min(...ratios, 1e-3))), hi = Math.ceil(Math.log10(Math.max(...ratios, 1e-3)));
    const W = 100, P = 14, at = (r) => (r > 0 ? ((Math.log10(r) - lo) / Math.max(hi - lo, 1)) * W : 0);
    const axis = svg("svg", { width: W + 2 * P, height: 22, class: "ratio-axis" });
    for (let k = lo; k <= hi; k++) axis.append(svg("line", { x1: at(10 ** k) + P, y1: 14, x2: at(10 ** k) + P, y2: 20, class: "axis" }),
                                               svg("text", { x: at(10 ** k) + P, y: 11, "text-anchor": "middle", class: "label tick" }, tick(10 ** k)));
    const rows = u.params.map((p) => el("tr", { "data-name": p.name, onclick: () => select(p.name) },
      el("td", { class: "pname" }, p.name), el("td", {}, shape(p.shape)), el("td", {}, fmt(p.w_norm)),
      el("td", {}, fmt(p.g_norm)), el("td", {}, fmt(p.dw_norm)), el("td", {}, fmt(p.ratio)),
      el("td", {}, svg("svg", { width: W + 2 * P, height: 10 }, svg("rect", { x: P, y: 1, width: Math.max(at(p.ratio), 1), height: 8, class: "ratio-bar" })))));
    return el("div", { class: "update-table" }, el("table", { class: "profile params" },
      el("tr", {}, ["parameter", "shape", "‖w‖", "‖g‖ (used)", "‖Δw‖", "‖Δw‖/‖w‖", el("span", {}, "on a log scale", axis)].map((h) => el("th", {}, h))),
      rows), el("p", { class: "note" }, "‖g‖ (used): the gradient as the optimizer got it, after the clipping. Click a row for its arrays."));
  }

  // One parameter: its gradient and its Δw side by side, the optimizer's state as saved, its weight.
  async function select(name) {
    state.selected = name;
    for (const tr of state.root.querySelectorAll("table.params tr[data-name]")) tr.classList.toggle("chosen", tr.dataset.name === name);
    const a = await TX.api(`/api/update_param?name=${encodeURIComponent(name)}`);
    if (a.waiting || state.selected !== name) return;
    const row = state.summary.params.find((p) => p.name === name);
    const picture = (title, arr) => el("figure", { class: "update-array" }, el("figcaption", {}, title),
      el("div", { class: "stats" }, statsLine(arr)), heatmap(arr.heat.rows, axisNames(arr.heat, arr.shape)));
    const saved = Object.entries(a.saved), after = Object.entries(a.after);
    state.root.querySelector("#update-detail").replaceChildren(
      el("h3", {}, `${name} ${shape(row.shape)}: ‖Δw‖/‖w‖ = ${fmt(row.ratio)}`),
      row.node ? el("a", { href: "#", class: "node-link", onclick: (e) => { e.preventDefault(); TX.showView("graph").then(() => TX.graph.reveal(row.node)); } },
                    "its node in the graph") : null,
      el("p", { class: "note" }, a.words),
      el("div", { class: "update-pair" },
        a.grad ? picture("gradient the optimizer got (after clipping)", a.grad) : el("p", { class: "note" }, "no gradient"),
        picture("Δw = w after the step − w before", a.dw)),
      el("p", { class: "note" }, "red > 0 > blue, each picture on its own scale"),
      saved.length ? el("h3", {}, `${state.summary.optimizer}'s state as saved (after ${state.summary.t_saved} steps)`) : null,
      el("div", { class: "update-pair" }, saved.map(([k, arr]) => picture(k, arr))),
      after.length ? el("div", { class: "stats" }, after.map(([k, s]) => el("div", {}, `${k} after this step: ${statsLine(s)}`))) : null,
      el("h3", {}, "the weight before the step"), picture("w", a.w));
  }

  // The walk's last two steps, after backward's: the clip and the optimizer's update, drawn in the
  // graph view's panel (`fill`) from the same answer as this view.
  async function walkStep(step, fill) {
    const u = await TX.api("/api/update");
    if (u.waiting) return fill([el("h2", {}, `step ${step.number}`), el("p", { class: "message" }, u.waiting)]);
    const open = el("button", { onclick: () => TX.showView("update") }, "open the update view");
    if (step.update === "clip") {
      return fill([el("h2", {}, `step ${step.number}: clipping the gradients`),
        el("p", {}, u.words.clip), u.clip ? el("p", { class: "note" }, `the bound is --clip-norm ${fmt(u.clip.max_norm)}: ` +
          "one norm over every parameter's gradient, so all of them are scaled alike and the step keeps its direction") : null,
        el("ul", {}, u.params.slice().sort((a, b) => b.g_raw_norm - a.g_raw_norm).slice(0, 8).map((p) =>
          el("li", {}, `${p.name}: ‖g‖ ${fmt(p.g_raw_norm)} → ${fmt(p.g_norm)}`))),
        el("p", { class: "note" }, "the 8 largest gradients; the update view lists them all"), open], u.shows);
    }
    return fill([el("h2", {}, `step ${step.number}: ${u.optimizer}'s update`),
      el("p", {}, `${u.optimizer} (its step ${u.t}) moves every parameter at the learning rate ${fmt(u.lr)}: Δw against ‖w‖ per parameter below. ${u.words.loss}`),
      el("ul", {}, u.params.slice().sort((a, b) => b.ratio - a.ratio).slice(0, 8).map((p) =>
        el("li", {}, `${p.name}: ‖Δw‖/‖w‖ = ${fmt(p.ratio)}`))),
      el("p", { class: "note" }, "the 8 that moved most against their size"), open], u.shows);
  }

  TX.views.update = showUpdate;
  TX.update = { select, walkStep };
})();
