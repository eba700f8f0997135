// The guided tour: a dozen stops through one training step of the run's own model, from the tokens
// to the loss, back, and into the optimizer's update (the server writes each stop's paragraph with
// the step's values: explore_tour.py). Each stop opens the boxes around its node, shows it, and,
// going backward, puts the walk at that node's step; the last shows the update view.
"use strict";
(() => {
  const { el } = TX.draw;
  const state = { stops: [], at: 0 };

  async function start() {
    await TX.showView("graph");
    const answer = await TX.api("/api/tour");
    const card = document.getElementById("tour");
    if (answer.waiting) {
      card.hidden = false;
      card.replaceChildren(el("p", {}, answer.waiting), el("button", { onclick: stop }, "close"));
      return;
    }
    state.stops = answer.stops;
    try { localStorage.setItem("tx-toured", "1"); } catch (e) { /* a saved page opened from disk may have none */ }
    await go(0);
  }

  async function go(at) {
    state.at = Math.max(0, Math.min(at, state.stops.length - 1));
    const s = state.stops[state.at];
    const card = document.getElementById("tour");
    card.hidden = false;
    card.replaceChildren(
      el("div", { class: "tour-head" }, el("b", {}, s.title), el("span", { class: "note" }, `stop ${state.at + 1} of ${state.stops.length} · ${s.phase}`)),
      el("p", { class: "tour-text" }, s.text),
      el("div", { class: "tour-buttons" },
         el("button", { class: "tour-prev", disabled: state.at === 0, onclick: () => go(state.at - 1) }, "◀ back"),
         el("button", { class: "tour-next", disabled: state.at === state.stops.length - 1, onclick: () => go(state.at + 1) }, "next ▶"),
         el("button", { class: "tour-close", onclick: stop }, "close")));
    if (s.phase === "update") {  // the update view, at the parameter the stop names
      await TX.showView("update");
      await TX.update.select(s.param);  // its row marked; the window stays where the card is
      return;
    }
    await TX.showView("graph");  // (back from the update view)
    // going backward, the walk at this node's step, at the level shown (a leaf: after the whole walk)
    await (s.phase === "backward" ? TX.walk.stepToNode(s.node) : TX.walk.stepTo(0));
    if (s.phase === "backward" && TX.graph.node(s.node).kind === "op") return;  // the step shows what arrives, what it sends
    await TX.graph.reveal(s.node);
    if (s.show === "grad") {  // the gradient, at the top of the panel
      const panel = document.getElementById("panel");
      const heading = [...panel.querySelectorAll("h3")].find((h) => h.textContent.startsWith("gradient"));
      if (heading) panel.scrollTop = heading.offsetTop - panel.offsetTop;
    }
  }

  function stop() {
    document.getElementById("tour").hidden = true;
  }

  TX.tour = { start };
})();
