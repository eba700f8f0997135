// Backward, step by step, over the graph view, at two levels: by module (one step per module call,
// what arrives at its output and what it sends to its input and to each of its weights, the
// plumbing ops folded in and marked) and by op (every node the engine visits, #k at step k), one
// click apart. Each step says in one plain sentence what it does here, beside its op's math. The
// server groups and words the steps (module_walk.py, words.py); this file draws them.
"use strict";
(() => {
  const { el, shape } = TX.draw;
  const state = { level: "module", at: 0, steps: [], modules: [], seeded: "1", update: false };
  const G = () => TX.graph;

  function wire(root) {
    root.querySelector("#back-next").addEventListener("click", () => stepTo(state.at + 1));
    root.querySelector("#back-prev").addEventListener("click", () => stepTo(state.at - 1));
    root.querySelector("#back-reset").addEventListener("click", () => stepTo(0));
    for (const level of ["module", "op"]) {
      root.querySelector(`#level-${level}`).addEventListener("click", () => setLevel(level));
    }
    document.addEventListener("keydown", (e) => {
      if (root.hidden || e.target.closest("input, textarea")) return;
      if (e.key === "ArrowRight") stepTo(state.at + 1);
      if (e.key === "ArrowLeft") stepTo(state.at - 1);
    });
  }

  // `update`: a run's walk goes on, after backward's steps, into the optimizer's step (the clip of
  // the gradients, then the update), which the update view draws (update.js).
  function loaded(walk, update) {
    state.steps = walk.steps;
    state.modules = walk.modules;
    state.seeded = walk.seeded_with;
    state.update = !!update;
  }

  // After the graph was drawn again (a new checkpoint): the walk where it was. Whether it was started.
  async function resume() {
    if (!state.at) return false;
    await stepTo(state.at);
    return true;
  }

  const backward = (level) => (level === "module" ? state.modules : state.steps);
  const tail = () => (state.update ? [{ update: "clip", sends: [] }, { update: "step", sends: [] }] : []);
  const list = () => [...backward(state.level), ...tail()];

  // Switch levels, staying at the same place of the walk: the module step holding the current op,
  // or the first op of the current module step.
  function setLevel(level, at) {
    if (level === state.level && at === undefined) return Promise.resolve();
    let to = at;
    if (to === undefined && state.at) {
      const past = state.at - backward(state.level).length;  // > 0: in the optimizer's step
      to = past > 0 ? backward(level).length + past
        : level === "module" ? state.steps[state.at - 1].module : state.modules[state.at - 1].ops[0];
    }
    state.level = level;
    for (const l of ["module", "op"]) document.getElementById(`level-${l}`).classList.toggle("active", l === level);
    return stepTo(to || 0);
  }

  function stepTo(at) {
    if (!G().ready()) return Promise.resolve();
    state.at = Math.max(0, Math.min(at, list().length));
    if (state.at > 0 && !current().update) G().bringIntoView(current().node);
    mark();
    if (!state.at) return Promise.resolve();
    if (current().update) return TX.update.walkStep({ ...current(), number: state.at }, G().fill);
    return state.level === "module" ? showModule(current()) : showOp(current());
  }

  const current = () => list()[state.at - 1];
  const nodesOf = (s) => (s.update ? [] : state.level === "module" ? s.nodes : [s.node]);

  // Classes on the drawn nodes: done (visited), current (this step), receives (gets a gradient now).
  function mark() {
    const status = document.getElementById("back-pos");
    for (const g of document.querySelectorAll("#graph .node")) g.classList.remove("done", "current", "receives");
    if (state.at === 0) { status.textContent = "not started"; return; }
    const s = current();
    status.textContent = `${state.level === "module" ? "module step" : "step"} ${state.at} of ${list().length}`;
    for (const earlier of list().slice(0, state.at - 1)) for (const id of nodesOf(earlier)) G().drawnAs(id)?.classList.add("done");
    for (const send of s.sends) G().drawnAs(send.to)?.classList.add("receives");
    for (const id of nodesOf(s)) G().drawnAs(id)?.classList.add("current");
  }

  // A module call's or node's name set as a name, not as words: `out`, `decoder.layers.0.ff`.
  const named = (text) => el("code", { class: "name" }, text);

  // The math of an op's docstring (its `y = …` and `dx = …` paragraphs), under a small title.
  function math(doc, title) {
    const paras = G().paragraphs(doc).filter((p) => p.math);
    return paras.length ? el("div", { class: "step-math" }, title ? el("div", { class: "note" }, title) : null,
                             paras.map((p) => el("pre", { class: "math" }, p.text))) : null;
  }

  const words = (text) => el("p", { class: "words" }, text);

  function moduleLink(number, text) {
    return el("a", { href: "#", class: "module-link", onclick: (e) => { e.preventDefault(); setLevel("module", number); } },
              text || [`module step ${number}: `, named(state.modules[number - 1].name)]);
  }

  function opLink(number) {
    const s = state.steps[number - 1];
    return el("a", { href: "#", class: "op-link", onclick: (e) => { e.preventDefault(); setLevel("op", number); } },
              G().nameOf(s.node));
  }

  // -- a step of the op level ------------------------------------------------------------------
  async function showOp(step) {
    const arrays = await TX.api(`/api/walk_step?n=${step.number}`);
    if (state.level !== "op" || state.at !== step.number) return;  // stepped on meanwhile
    const { section, present, arrayView, nodeLink, fill } = G();
    const node = G().node(step.node), module = state.modules[step.module - 1];
    const inside = node.scope.length ? [" in ", named(G().call(node.scope[node.scope.length - 1]).name)] : [];
    fill(present(
      el("h2", {}, `backward step ${step.number}: ${G().nameOf(step.node)}`, ...inside),
      words(arrays.words),
      math(arrays.doc),
      el("p", { class: "note" }, step.number === 1 ? `backward starts here, from a gradient of ${state.seeded}` :
         "every node that uses this one's output has sent its share, so its gradient is complete"),
      el("p", { class: "level-note" }, module.folded.includes(step.number) ? "folded, at the module level, into " : "part of ",
         moduleLink(module.number), ` (${module.kind})`),
      ...arrays.readings.map((r) => section(r.title, G().tableView(r))),
      section("gradient arriving (d result / d its output)", arrayView(arrays.grad)),
      section("sends", step.sends.length ? el("ul", { class: "sends" }, step.sends.map((s, i) => el("li", {},
        el("b", {}, s.arrival > 1 ? "+= " : "→ "), nodeLink(s.to), "  ", fanOut(s), arrayView(arrays.sends[i]))))
        : el("p", { class: "note" }, "nothing: no input needs a gradient")),
      section("released after this step", step.releases.length ? el("ul", {}, step.releases.map((r) => el("li", {}, r)))
        : el("p", { class: "note" }, "nothing (the graph is kept)")),
      el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); G().showNode(step.node); } }, "the node itself"))),
      arrays.shows);
  }

  function fanOut(s) {
    return [s.arrival > 1 ? el("div", { class: "note" }, `fan-out: gradient number ${s.arrival} to reach it, added to the ones before`) : null,
            s.summed_from ? el("div", { class: "note" }, `broadcast: summed back from ${shape(s.summed_from)} to ${shape(s.shape)}`) : null];
  }

  // -- a step of the module level --------------------------------------------------------------
  async function showModule(m) {
    const arrays = await TX.api(`/api/module_step?n=${m.number}`);
    if (state.level !== "module" || state.at !== m.number) return;
    const { section, present, arrayView, fill } = G();
    fill(present(
      el("h2", {}, `module step ${m.number} of ${list().length}: `, m.call ? named(m.name) : m.name, ` (${m.kind})`),
      words(arrays.words),
      ...arrays.docs.map((d) => math(d.doc, `#${d.number} ${d.op}`)),
      section("its ops (the op level: click one)", el("ul", { class: "ops" },
        m.ops.filter((n) => !m.folded.includes(n)).map((n) => el("li", {}, opLink(n))),
        m.folded.length ? el("li", { class: "folded-ops" }, el("span", { class: "folded" }, "folded, they only move numbers: "),
                             m.folded.map((n, i) => [i ? " · " : "", opLink(n)])) : null)),
      ...arrays.readings.map((r) => section(r.title, G().tableView(r))),
      section(`arrives (d result / d its output${m.arrives.length > 1 ? "s" : ""})`, m.arrives.map((a, i) => el("div", {},
        el("div", { class: "note" }, `at the output of ${G().nameOf(a.node)} ${shape(a.shape)}`), arrayView(arrays.arrives[i])))),
      section("sends", m.sends.length ? el("ul", { class: "sends" }, m.sends.map((s, i) => el("li", {},
        el("b", {}, s.arrival > 1 ? "+= " : "→ "), receiver(s), el("span", { class: "note" }, ` (from #${s.from})`),
        fanOut(s), arrayView(arrays.sends[i]))))
        : el("p", { class: "note" }, "nothing: no input needs a gradient"))),
      arrays.shows);
  }

  // Where a module step's gradient goes: a weight by its name, or the input of a later module step.
  function receiver(s) {
    const n = G().node(s.to);
    if (s.kind === "weight") return ["weight ", named(n.title)];
    if (s.to_step === null) return ["input: ", G().nameOf(s.to)];
    return ["input: the output of ", moduleLink(s.to_step)];
  }

  // The step holding node `id` at the current level (for the tour); past the end for a leaf.
  function stepToNode(id) {
    const op = state.steps.find((s) => s.node === id);
    if (!op) return stepTo(backward(state.level).length);
    return stepTo(state.level === "module" ? op.module : op.number);
  }

  TX.walk = { wire, loaded, resume, mark, stepTo, stepToNode, setLevel };
})();
