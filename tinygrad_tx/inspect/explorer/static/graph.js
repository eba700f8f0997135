// The graph view: the step's graph (module calls folded into boxes), a node's panel, and
// backward step by step. Orders and values come from the server (/api/graph, /api/node,
// /api/walk, /api/walk_step); this file decides only what is folded and where things go.
import { api } from "./api.js";
import { edgePath, el, fmt, heatmap, layout, panZoom, shape, statsLine, svg } from "./draw.js";

const state = { graph: null, byId: {}, calls: {}, users: {}, folded: new Set(), walk: null, seeded: "1", at: 0,
                placed: {}, owner: {}, view: null };

export async function showGraph(root) {
  [state.graph, { steps: state.walk, seeded_with: state.seeded }] = await Promise.all([api("/api/graph"), api("/api/walk")]);
  for (const n of state.graph.nodes) state.byId[n.id] = n;
  for (const c of state.graph.calls) state.calls[c.id] = c;
  state.users = {};
  for (const n of state.graph.nodes) for (const i of n.inputs) (state.users[i] ||= []).push(n);
  foldTo(1);
  root.querySelector("#fold").addEventListener("click", () => { foldTo(1); draw(); });
  root.querySelector("#unfold").addEventListener("click", () => { foldTo(Infinity); draw(); });
  root.querySelector("#back-next").addEventListener("click", () => stepTo(state.at + 1));
  root.querySelector("#back-prev").addEventListener("click", () => stepTo(state.at - 1));
  root.querySelector("#back-reset").addEventListener("click", () => stepTo(0));
  document.addEventListener("keydown", (e) => {
    if (root.hidden || e.target.closest("input, textarea")) return;
    if (e.key === "ArrowRight") stepTo(state.at + 1);
    if (e.key === "ArrowLeft") stepTo(state.at - 1);
  });
  draw();
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

// How a node is named everywhere on the page: "#k Op" (k: its place in backward's order), or a leaf's name.
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
  for (const e of placed.edges) g.append(svg("path", { class: "edge", d: edgePath(e.points), "data-from": e.from, "data-to": e.to }));
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
  const picture = svg("svg", { class: "graph", width: "100%", height: "100%" }, svg("defs"), g);
  holder.replaceChildren(picture);
  state.placed = placed.nodes;
  state.owner = shown.owner;
  state.view = panZoom(picture, g, placed.width, placed.height);
  state.view.fit();
  mark();
}

function unfold(id) {
  state.folded.delete(id);
  for (const c of state.graph.calls) if (c.parent === id) state.folded.add(c.id);  // its children stay boxes
  draw();
}

// Show node `id` from elsewhere (the compiled view): open the boxes around it, select it, centre it.
export function reveal(id) {
  for (const c of state.byId[id].scope) state.folded.delete(c);
  for (const c of state.graph.calls) if (state.byId[id].scope.includes(c.parent) && !state.byId[id].scope.includes(c.id)) state.folded.add(c.id);
  draw();
  const p = state.placed[state.owner[id]];
  state.view.centre(p.x, p.y);
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

function arrayView(a) {
  const peak = Math.max(Math.abs(a.min ?? 0), Math.abs(a.max ?? 0));
  const stride = a.heat.stride.some((k) => k > 1) ? `, every ${a.heat.stride.join("×")}-th cell` : "";
  return el("div", {}, el("div", { class: "stats" }, statsLine(a)),
            el("div", { class: "note" }, `${a.heat.where ? `slice ${a.heat.where}${stride}; ` : stride ? `${stride.slice(2)}; ` : ""}` +
                                         `red > 0 > blue, darkest at |x| = ${fmt(peak)}`),
            heatmap(a.heat.rows));
}

export async function showNode(id) {
  const n = await api(`/api/node?id=${encodeURIComponent(id)}`);
  const panel = document.getElementById("panel");
  const link = (input) => el("a", { href: "#", class: "node-link", onclick: (e) => { e.preventDefault(); showNode(input); } },
                             `${nameOf(state.byId[input])} ${shape(state.byId[input].shape)}`);
  const scope = n.scope.map((c) => el("button", { class: "scope", title: "fold this module call into a box",
                                                  onclick: () => fold(c) }, state.calls[c].name));
  panel.replaceChildren(...present(
    el("h2", {}, n.kind === "op" ? nameOf(n) : `${n.title} (${n.kind === "leaf" ? "leaf, requires grad" : "constant"})`),
    n.frames && n.frames.length ? section("created by", source(n.frames[0], "frame"),
                                          ...n.frames.slice(1).map((f) => source(f, "caller"))) : null,
    scope.length ? section("inside", ...scope) : null,
    n.inputs.length ? section("inputs", el("ul", {}, n.inputs.map((i) => el("li", {}, link(i))))) : null,
    section("value", arrayView(n.value)),
    section("gradient after backward", n.grad ? arrayView(n.grad) : el("p", { class: "note" }, "none: no gradient reaches it")),
    n.saved ? section("saved for backward", n.saved.length
      ? el("ul", {}, n.saved.map((s) => el("li", {}, `${s.name}: `, s.repr !== undefined ? s.repr : s.items ? `${s.items.length} arrays` : statsLine(s))))
      : el("p", { class: "note" }, "nothing beyond its inputs")) : null,
    n.op ? section(`${n.op.name}: forward and backward`, el("p", { class: "note" }, n.op.doc),
                   el("div", { class: "where" }, `${n.op.forward.file}:${n.op.forward.line}`),
                   el("pre", { class: "code source-forward" }, n.op.forward.code),
                   el("pre", { class: "code source-backward" }, n.op.backward.code)) : null));
  for (const g of document.querySelectorAll("#graph .node.selected")) g.classList.remove("selected");
  const shown = document.querySelector(`#graph .node[data-id="${state.owner[id]}"]`);
  if (shown) shown.classList.add("selected");
}

// -- backward, step by step -----------------------------------------------------------------
function stepTo(at) {
  state.at = Math.max(0, Math.min(at, state.walk.length));
  mark();
  if (state.at > 0) showStep(state.walk[state.at - 1]);
}

// Classes on the drawn nodes: done (visited), current (this step), receives (gets a gradient now).
function mark() {
  const status = document.getElementById("back-pos");
  for (const g of document.querySelectorAll("#graph .node")) g.classList.remove("done", "current", "receives");
  if (state.at === 0) { status.textContent = "not started"; return; }
  status.textContent = `step ${state.at} of ${state.walk.length}`;
  const find = (id) => document.querySelector(`#graph .node[data-id="${state.owner[id]}"]`);
  for (const s of state.walk.slice(0, state.at - 1)) find(s.node)?.classList.add("done");
  const step = state.walk[state.at - 1];
  for (const send of step.sends) find(send.to)?.classList.add("receives");
  const current = find(step.node);
  if (current) {
    current.classList.add("current");
    const p = state.placed[state.owner[step.node]];
    state.view.centre(p.x, p.y);
  }
}

async function showStep(step) {
  const arrays = await api(`/api/walk_step?n=${step.number}`);
  if (state.at !== step.number) return;  // stepped on meanwhile
  const inBox = state.owner[step.node] !== step.node ? ` (inside ${state.calls[state.owner[step.node]].name})` : "";
  const panel = document.getElementById("panel");
  panel.replaceChildren(...present(
    el("h2", {}, `backward step ${step.number}: #${state.byId[step.node].number} ${step.op}${inBox}`),
    el("p", { class: "note" }, step.number === 1 ? `backward starts here, from a gradient of ${state.seeded}` :
       "every node that uses this one's output has sent its share, so its gradient is complete"),
    section("gradient arriving", arrayView(arrays.grad)),
    section("sends", step.sends.length ? el("ul", { class: "sends" }, step.sends.map((s, i) => el("li", {},
      el("b", {}, s.arrival > 1 ? "+= " : "→ "), `${nameOf(state.byId[s.to])}  `,
      el("span", { class: "stats" }, statsLine(arrays.sends[i])),
      s.arrival > 1 ? el("div", { class: "note" }, `fan-out: gradient number ${s.arrival} to reach it, added to the ones before`) : null,
      s.summed_from ? el("div", { class: "note" }, `broadcast: summed back from ${shape(s.summed_from)} to ${shape(s.shape)}`) : null,
      heatmap(arrays.sends[i].heat.rows, { cell: 6 }))))
      : el("p", { class: "note" }, "nothing: no input needs a gradient")),
    section("released after this step", step.releases.length ? el("ul", {}, step.releases.map((r) => el("li", {}, r)))
      : el("p", { class: "note" }, "nothing (the graph is kept)")),
    el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); showNode(step.node); } }, "the node itself"))));
}

