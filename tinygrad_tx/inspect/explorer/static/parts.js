// An attention node opened into its parts (scores, scale, mask, softmax, weighted sum), drawn in
// the node's panel as a small graph of its own that can be clicked and walked backward like the
// main one. The server builds the parts from the node's inputs with plain tensor ops and checks
// them against the fused op (parts.py): this file draws what it sends (/api/parts, /api/part_node,
// /api/part_step).
"use strict";
(() => {
  const { el, svg, fmt, shape, heatmap, axisNames, layout, edgePath, arrowDefs, panZoom, key, statsLine } = TX.draw;

  async function open(holder, nid) {
    const parts = await TX.api(`/api/parts?id=${encodeURIComponent(nid)}`);
    const state = { at: 0, parts, nid, byId: Object.fromEntries(parts.graph.nodes.map((n) => [n.id, n])) };
    const name = (id) => {
      const n = state.byId[id];
      // no "#k" here: the page's #k are the main graph's nodes, and these parts are not among them
      return n.kind === "op" ? `${parts.roles[id] || n.title} (${n.title})` : n.title;
    };
    state.name = name;
    const picture = drawParts(state);
    const position = el("span", { class: "parts-pos" }, "not started");
    const detail = el("div", { class: "parts-detail" });
    state.picture = picture;
    state.position = position;
    state.detail = detail;
    const step = (at) => stepTo(state, at);
    holder.replaceChildren(el("h3", {}, "attention, opened into its parts"),
      el("div", { class: "check" }, el("b", {}, "check: "), parts.check.map((c) =>
        el("span", { class: "check-item" }, `${c.what} as the fused op's: max |difference| ${fmt(c.max_abs_diff)}`))),
      el("div", { class: "toolbar" }, "backward through the parts",
         el("button", { class: "parts-prev", onclick: () => step(state.at - 1) }, "◀"), position,
         el("button", { class: "parts-next", onclick: () => step(state.at + 1) }, "▶")),
      el("div", { class: "parts-canvas canvas" }, picture.svg),
      key("", [["leaf", "q, k, v: the node's inputs"], ["const", "constants: the scale, a mask"], ["op", "a part (a plain op)"],
               ["arrow", "where an output goes"], ["current", "backward: this step"], ["receives", "gets a gradient now"],
               ["done", "visited"], ["selected", "shown below"]]), detail);
    picture.view.fit();
    holder.scrollIntoView({ block: "start" });  // the parts in view, not the panel's top
  }

  function drawParts(state) {
    const nodes = state.parts.graph.nodes;
    const lines = (n) => [state.parts.roles[n.id] || state.name(n.id), `${shape(n.shape)}`];
    const sized = nodes.map((n) => ({ id: n.id, width: 16 + 6.5 * Math.max(...lines(n).map((l) => l.length)), height: 34 }));
    const edges = nodes.flatMap((n) => n.inputs.map((i) => [i, n.id]));
    const placed = layout(sized, edges, { nodesep: 12, ranksep: 24 });
    const g = svg("g");
    for (const e of placed.edges) g.append(svg("path", { class: "edge", d: edgePath(e.points), "marker-end": "url(#arrow-parts)" }));
    for (const n of nodes) {
      const p = placed.nodes[n.id], [top, bottom] = lines(n);
      g.append(svg("g", { class: `node part ${n.kind}`, "data-id": n.id, transform: `translate(${p.x - p.width / 2}, ${p.y - p.height / 2})`,
                          onclick: () => showPart(state, n.id) },
        svg("rect", { width: p.width, height: p.height, rx: n.kind === "op" ? 6 : 14 }),
        svg("text", { x: p.width / 2, y: 14, "text-anchor": "middle", class: "title" }, top),
        svg("text", { x: p.width / 2, y: 27, "text-anchor": "middle", class: "sub" }, bottom)));
    }
    const picture = svg("svg", { class: "graph parts", width: "100%", height: Math.min(420, placed.height + 10) },
                        arrowDefs("arrow-parts"), g);
    return { svg: picture, view: panZoom(picture, g, placed.width, placed.height) };
  }

  async function showPart(state, part) {
    const n = await TX.api(`/api/part_node?id=${encodeURIComponent(state.nid)}&part=${encodeURIComponent(part)}`);
    select(state, "selected", [part]);
    state.detail.replaceChildren(el("h3", {}, state.name(part)),
      el("div", { class: "stats" }, "value ", statsLine(n.value)),
      heatmap(n.value.heat.rows, { rowLabels: n.value.heat.row_labels, colLabels: n.value.heat.col_labels, ...axisNames(n.value.heat, n.shape) }),
      n.grad ? el("div", {}, el("div", { class: "stats" }, "gradient ", statsLine(n.grad)),
                  heatmap(n.grad.heat.rows, { rowLabels: n.grad.heat.row_labels, colLabels: n.grad.heat.col_labels, ...axisNames(n.grad.heat, n.shape) }))
        : el("p", { class: "note" }, "no gradient reaches it"));
  }

  async function stepTo(state, at) {
    const walk = state.parts.walk.steps;
    state.at = Math.max(0, Math.min(at, walk.length));
    state.position.textContent = state.at ? `parts step ${state.at} of ${walk.length}` : "not started";
    if (!state.at) { select(state, "current", []); return; }
    const step = walk[state.at - 1];
    select(state, "done", walk.slice(0, state.at - 1).map((s) => s.node));
    select(state, "current", [step.node]);
    select(state, "receives", step.sends.map((s) => s.to));
    const arrays = await TX.api(`/api/part_step?id=${encodeURIComponent(state.nid)}&n=${state.at}`);
    if (state.at !== step.number) return;
    state.detail.replaceChildren(el("h3", {}, `parts step ${step.number}: ${state.name(step.node)}`),
      el("p", { class: "words" }, arrays.words),
      el("div", { class: "stats" }, "gradient arriving ", statsLine(arrays.grad)),
      heatmap(arrays.grad.heat.rows, { rowLabels: arrays.grad.heat.row_labels, colLabels: arrays.grad.heat.col_labels, ...axisNames(arrays.grad.heat, arrays.grad.shape) }),
      el("ul", { class: "sends" }, step.sends.map((s, i) => el("li", {}, s.arrival > 1 ? "+= " : "→ ", state.name(s.to), "  ",
                                                            el("span", { class: "stats" }, statsLine(arrays.sends[i]))))));
  }

  function select(state, cls, ids) {
    for (const g of state.picture.svg.querySelectorAll(`.node.${cls}`)) g.classList.remove(cls);
    for (const id of ids) state.picture.svg.querySelector(`.node[data-id="${id}"]`)?.classList.add(cls);
  }

  TX.parts = { open };
})();
