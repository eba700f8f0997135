// The graph view: the step's graph (module calls folded into boxes) and a node's panel; the
// backward walk over it is walk.js. Orders and values come from the server (/api/graph,
// /api/node, /api/walk); this file decides only what is folded and where things go.
//
// One numbering: "#k" is the k-th node backward visits, so backward step k is node #k, and the
// compiled view, the profile and the module walk's op lists use the same numbers.
"use strict";
(() => {
  const { el, svg, fmt, shape, heatmap, axisNames, layout, edgePath, arrowDefs, panZoom, key, statsLine } = TX.draw;
  const state = { graph: null, byId: {}, calls: {}, users: {}, folded: new Set(), placed: {}, owner: {}, view: null,
                  version: undefined, shown: null };

  async function showGraph(root, info) {
    state.update = !!(info && info.views.includes("update"));
    root.querySelector("#fold").addEventListener("click", () => { foldTo(1); draw(); });
    root.querySelector("#unfold").addEventListener("click", () => { foldTo(Infinity); draw(); });
    TX.walk.wire(root);
    TX.onNews((news) => {  // last.npz written (again): the step graph of its weights
      const version = news.versions && news.versions["last.npz"];
      if (version === undefined) return;
      if (!state.graph || (state.version !== undefined && version !== state.version)) load();
      state.version = version;
    });
    await load();
  }

  // Ask for the graph and the walk (again, when the run wrote a new checkpoint): what is folded,
  // the step the walk is at and the node shown stay as they were.
  async function load() {
    const [graph, walk] = await Promise.all([TX.api("/api/graph"), TX.api("/api/walk")]);
    const waiting = document.getElementById("graph-waiting");
    waiting.hidden = !graph.waiting;
    if (graph.waiting) {
      waiting.textContent = graph.waiting;
      return;
    }
    const first = state.graph === null;
    state.graph = graph;
    state.byId = {};
    state.calls = {};
    state.users = {};
    for (const n of graph.nodes) state.byId[n.id] = n;
    for (const c of graph.calls) state.calls[c.id] = c;
    for (const n of graph.nodes) for (const i of n.inputs) (state.users[i] ||= []).push(n);
    shows(graph.shows);
    if (first) foldTo(1);
    TX.walk.loaded(walk, state.update);
    draw();
    if (!(await TX.walk.resume()) && state.shown) showNode(state.shown);
  }

  // Which checkpoint and step the view shows (a run's views; nothing for a function's graph).
  function shows(about) {
    document.getElementById("graph-shows").textContent = about && about.checkpoint
      ? `the step graph of ${about.checkpoint}, step ${about.step} (${about.mode})` : "";
  }

  // -- folding --------------------------------------------------------------------------------
  function depth(call) {
    let d = 0;
    for (let c = call; c.parent; c = state.calls[c.parent]) d++;
    return d;
  }

  // Fold every module call `level` deep (the model itself is depth 0): 1 shows encoder, decoder, ...
  function foldTo(level) {
    state.folded = new Set(state.graph.calls.filter((c) => depth(c) === level).map((c) => c.id));
  }

  // The module calls holding node `id`: an op's scope, or, for a leaf, its first user's.
  function scopeOf(id) {
    const n = state.byId[id];
    return n.kind === "op" ? n.scope : ((state.users[id] || [])[0] || { scope: [] }).scope;
  }

  // The folding that draws node `id` itself: the calls holding it open, their other calls folded,
  // and everything else folded as at the start.
  function foldingFor(id) {
    const chain = scopeOf(id);
    return new Set(state.graph.calls.filter((c) => !chain.includes(c.id) &&
      (depth(c) === 1 || (c.parent && chain.includes(c.parent)))).map((c) => c.id));
  }

  // The box a node is drawn in (its outermost folded call), or null when it is drawn itself.
  function boxOf(node) {
    for (const c of node.scope) if (state.folded.has(c)) return c;
    if (node.kind === "op") return null;
    const users = (state.users[node.id] || []).map(boxOf);  // a weight used in one box only is drawn in it
    return users.length && users.every((b) => b !== null && b === users[0]) ? users[0] : null;
  }

  // What is drawn: nodes and boxes, and the edges between them (each once).
  function visible() {
    const owner = {}, items = new Map(), edges = new Map();
    for (const n of state.graph.nodes) owner[n.id] = boxOf(n) || n.id;
    for (const n of state.graph.nodes) {
      const id = owner[n.id];
      if (!items.has(id)) items.set(id, id === n.id ? { id, node: n } : { id, box: state.calls[id], count: 0 });
      if (id !== n.id && n.kind === "op") items.get(id).count++;
      for (const input of n.inputs) {
        const from = owner[input];
        if (from !== id) edges.set(`${from}>${id}`, [from, id]);
      }
    }
    return { owner, items: [...items.values()], edges: [...edges.values()] };
  }

  // How a node is named everywhere on the page: "#k Op", or a leaf's or constant's name.
  const nameOf = (n) => (n.kind === "op" ? `#${n.number} ${n.title}` : n.title);

  function label(item) {
    if (item.box) return [item.box.name, `${item.box.kind} · ${item.count} op${item.count === 1 ? "" : "s"}`];
    const n = item.node;
    return [nameOf(n), `${shape(n.shape)} ${n.dtype}`];
  }

  // -- drawing --------------------------------------------------------------------------------
  function draw() {
    const holder = document.getElementById("graph");
    const shown = visible();
    const sized = shown.items.map((item) => {
      const lines = label(item);
      return { id: item.id, width: 14 + 7 * Math.max(...lines.map((l) => l.length)), height: 36 };
    });
    const placed = layout(sized, shown.edges);
    const g = svg("g");
    for (const e of placed.edges) {
      g.append(svg("path", { class: "edge", d: edgePath(e.points), "marker-end": "url(#arrow-graph)", "data-from": e.from, "data-to": e.to }));
    }
    for (const item of shown.items) {
      const p = placed.nodes[item.id], [top, bottom] = label(item);
      const kind = item.box ? "module" : item.node.kind;
      const box = svg("g", { class: `node ${kind}`, "data-id": item.id, transform: `translate(${p.x - p.width / 2}, ${p.y - p.height / 2})`,
                             onclick: () => (item.box ? unfold(item.id) : showNode(item.id)) },
        svg("rect", { width: p.width, height: p.height, rx: kind === "op" ? 6 : 14 }),
        svg("text", { x: p.width / 2, y: 15, "text-anchor": "middle", class: "title" }, top),
        svg("text", { x: p.width / 2, y: 29, "text-anchor": "middle", class: "sub" }, bottom),
        svg("title", {}, item.box ? "a module call: click to open it" : item.node.line || item.node.title));
      g.append(box);
    }
    const picture = svg("svg", { class: "graph", width: "100%", height: "100%" }, arrowDefs("arrow-graph"), g);
    const legend = graphKey();
    holder.replaceChildren(picture, legend);
    state.placed = placed.nodes;
    state.owner = shown.owner;
    state.view = panZoom(picture, g, placed.width, placed.height);
    state.view.fit(legend.offsetHeight);
    TX.walk.mark();
  }

  function graphKey() {
    return key("key (click to fold):", [
      ["op", "op; #k: k-th in backward's order"], ["leaf", "leaf: requires grad"], ["const", "constant"],
      ["module", "module call: click to open"], ["arrow", "where an output goes"],
      ["current", "backward: this step"], ["receives", "gets a gradient now"], ["done", "visited"],
      ["selected", "in the panel"]]);
  }

  function unfold(id) {
    state.folded.delete(id);
    for (const c of state.graph.calls) if (c.parent === id) state.folded.add(c.id);  // its children stay boxes
    draw();
  }

  // Draw node `id` itself (opening the boxes around it) and bring it to the middle, readable.
  function bringIntoView(id) {
    if (state.owner[id] !== id) {
      state.folded = foldingFor(id);
      draw();
    }
    const p = state.placed[state.owner[id]];
    state.view.focus(p.x, p.y);
  }

  // Show node `id` from elsewhere (the compiled view, the tour): its boxes open, selected, centred.
  function reveal(id) {
    bringIntoView(id);
    return showNode(id);
  }

  function fold(id) {
    for (const c of state.graph.calls) {  // fold `id`, forgetting what was open inside it
      for (let p = c; p; p = state.calls[p.parent]) if (p.id === id) state.folded.delete(c.id);
    }
    state.folded.add(id);
    draw();
  }

  // -- a node's panel -------------------------------------------------------------------------
  const present = (...parts) => parts.filter((p) => p !== null);  // the sections a node has

  function section(title, ...content) {
    return el("section", {}, el("h3", {}, title), ...content);
  }

  function source(frame, cls) {
    return el("div", { class: cls }, el("div", { class: "where" }, `${frame.file}:${frame.line} in ${frame.function}`),
              frame.code ? el("pre", { class: "code" }, frame.code) : null);
  }

  // An array: its statistics, and a heat-map with its key, axes named and rows labelled where the
  // server could (the tokens at each position).
  function arrayView(a) {
    const stride = strided(a.heat.stride);
    return el("div", {}, el("div", { class: "stats" }, statsLine(a)),
              el("div", { class: "note" }, `${a.heat.where ? `shown: slice ${a.heat.where}; ` : ""}${stride}red > 0 > blue`),
              heatmap(a.heat.rows, { rowLabels: a.heat.row_labels, colLabels: a.heat.col_labels, ...axisNames(a.heat, a.shape) }));
  }

  // A node's array read as a table (a run's prediction beside its target): columns and rows as sent.
  function tableView(t) {
    return el("table", { class: "reading" }, el("tr", {}, t.columns.map((c) => el("th", {}, c))),
              t.rows.map((r) => el("tr", {}, r.map((v) => el("td", {}, typeof v === "number" && !Number.isInteger(v) ? fmt(v) : v)))));
  }

  // Which cells a thinned heat-map shows, in words: "every 2nd column shown; ".
  function strided([rows, cols]) {
    const nth = (k) => `${k}${[11, 12, 13].includes(k % 100) ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[k % 10] || "th")}`;
    const parts = [rows > 1 ? `every ${nth(rows)} row` : null, cols > 1 ? `every ${nth(cols)} column` : null];
    const said = parts.filter(Boolean).join(" and ");
    return said ? `${said} shown; ` : "";
  }

  // An op's docstring in paragraphs, each marked whether it is math: a clause `y = ...` or one
  // `dx = ...` per input, the convention every op follows (the walk shows these alone).
  const paragraphs = (doc) => (doc || "").split(/\n\s*\n/).map((text) => ({ text, math: /^\s*(y|d\w*)\s*=/.test(text) }));

  // An op's docstring: its math set as formulas, its prose as paragraphs.
  function docText(doc) {
    if (!doc) return el("p", { class: "note" }, "(this op has no docstring yet)");
    return el("div", { class: "doc" }, paragraphs(doc).map((p) =>
      p.math ? el("pre", { class: "math" }, p.text) : el("p", {}, p.text.split("\n").join(" "))));
  }

  function nodeLink(id) {
    const n = state.byId[id];
    return el("a", { href: "#", class: "node-link", onclick: (e) => { e.preventDefault(); reveal(id); } },
              `${nameOf(n)} ${shape(n.shape)}`);
  }

  async function showNode(id) {
    const n = await TX.api(`/api/node?id=${encodeURIComponent(id)}`);
    state.shown = id;
    const scope = n.scope.map((c) => el("button", { class: "scope", title: "fold this module call into a box",
                                                    onclick: () => fold(c) }, state.calls[c].name));
    const kind = n.kind === "leaf" ? "leaf, requires grad" : "constant, no gradient";
    fill(present(
      el("h2", {}, n.kind === "op" ? nameOf(n) : `${n.title} (${kind})`),
      n.op ? docText(n.op.doc) : null,
      n.frames && n.frames.length ? section("created by", source(n.frames[0], "frame"),
                                            ...n.frames.slice(1).map((f) => source(f, "caller"))) : null,
      scope.length ? section("inside", ...scope) : null,
      n.inputs.length ? section("inputs", el("ul", {}, n.inputs.map((i) => el("li", {}, nodeLink(i))))) : null,
      n.used_by.length ? section("used by", el("ul", {}, n.used_by.map((i) => el("li", {}, nodeLink(i))))) : null,
      n.op && n.op.name === "Attention" ? section("attention, opened into its parts",
        el("button", { id: "open-parts", onclick: (e) => TX.parts.open(e.target.parentNode, id) }, "open into its parts"),
        el("p", { class: "note" }, "scores, scale, mask, softmax and the weighted sum, recomputed from this node's " +
                                   "inputs with plain ops, and walked backward from the gradient it received")) : null,
      n.reading ? section(n.reading.title, tableView(n.reading)) : null,
      section("value", arrayView(n.value)),
      section("gradient after backward (d result / d this; a leaf's .grad)",
              n.grad ? arrayView(n.grad) : el("p", { class: "note" }, "none: no gradient reaches it")),
      n.saved ? section("saved for backward", n.saved.length ? savedList(n.saved)
        : el("p", { class: "note" }, "nothing beyond its inputs")) : null,
      n.params && n.params.length ? section("params", valueList(n.params)) : null,
      n.op ? section(`${n.op.name}: forward and backward, as written`,
                     el("div", { class: "where" }, `${n.op.forward.file}:${n.op.forward.line}`),
                     el("pre", { class: "code source-forward" }, n.op.forward.code),
                     el("pre", { class: "code source-backward" }, n.op.backward.code)) : null), n.shows);
    for (const g of document.querySelectorAll("#graph .node.selected")) g.classList.remove("selected");
    drawnAs(id)?.classList.add("selected");
  }

  // What an op saved: each array with its statistics and, folded, its heat-map (attention's weights,
  // a softmax's output); anything else as it prints.
  function savedList(values) {
    return el("ul", {}, values.map((s) => el("li", {}, s.heat
      ? el("details", { class: "saved" }, el("summary", {}, `${s.name}: `, el("span", { class: "stats" }, statsLine(s))),
           arrayView(s))
      : [`${s.name}: `, s.repr !== undefined ? s.repr : s.items ? `${s.items.length} arrays` : statsLine(s)])));
  }

  function valueList(values) {
    return el("ul", {}, values.map((s) => el("li", {}, `${s.name}: `,
      s.repr !== undefined ? s.repr : s.items ? `${s.items.length} arrays` : statsLine(s))));
  }

  // The panel's content, from its top (a new node never opens where the last one was scrolled to).
  function fill(children, about) {
    const panel = document.getElementById("panel");
    panel.scrollTop = 0;  // before the new content: set after it, it would lay the whole panel out at once
    panel.replaceChildren(...children);
    if (about) shows(about);
  }

  // The drawn box or node that shows node `id` (its outermost folded call, or itself).
  function drawnAs(id) {
    return document.querySelector(`#graph .node[data-id="${state.owner[id]}"]`);
  }

  TX.views.graph = showGraph;
  TX.graph = { reveal, showNode, bringIntoView, drawnAs, fill, arrayView, tableView, paragraphs, nodeLink, section, present,
               nameOf: (id) => nameOf(state.byId[id]), node: (id) => state.byId[id], call: (id) => state.calls[id],
               ready: () => state.graph !== null };
})();
