// Drawing helpers shared by the views: elements, heat-maps, graph layout (dagre), pan and zoom.
// Everything drawn here comes from the server: these functions only place and colour it.

const SVG = "http://www.w3.org/2000/svg";

// el("div", {class: "x"}, "text", child): an HTML element; attributes starting with "on" are listeners.
export function el(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function svg(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// A number as people read it: 4 significant digits, "NaN/Inf" for the nulls JSON carries instead.
export function fmt(x) {
  if (x === null || x === undefined) return "—";
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(3) : x.toPrecision(4);
}

export const shape = (s) => `(${s.join(", ")}${s.length === 1 ? "," : ""})`;

// The colour of a value: white at 0, red for positive and blue for negative (scaled by `top`),
// or, for weights in [0, 1] (`unit`), white to dark blue.
function colour(v, top, unit) {
  if (v === null) return "#999";
  const t = Math.min(1, Math.abs(v) / (top || 1));
  if (unit) return `rgb(${Math.round(255 - 215 * t)}, ${Math.round(255 - 175 * t)}, ${Math.round(255 - 75 * t)})`;
  const fade = Math.round(255 * (1 - t));
  return v >= 0 ? `rgb(255, ${fade}, ${fade})` : `rgb(${fade}, ${fade}, 255)`;
}

// A heat-map of rows of numbers as an SVG: `unit` for attention weights (0..1); labels optional.
export function heatmap(rows, { unit = false, rowLabels = null, colLabels = null, cell = 0 } = {}) {
  const nRows = rows.length, nCols = rows[0] ? rows[0].length : 0;
  const size = cell || Math.max(4, Math.min(22, Math.floor(260 / Math.max(nRows, nCols, 1))));
  const left = rowLabels ? 60 : 0, top = colLabels ? 50 : 0;
  let peak = 0;
  for (const row of rows) for (const v of row) if (v !== null) peak = Math.max(peak, Math.abs(v));
  const picture = svg("svg", { class: "heat", width: left + nCols * size + 2, height: top + nRows * size + 2 });
  rows.forEach((row, i) => row.forEach((v, j) => {
    picture.append(svg("rect", { x: left + j * size, y: top + i * size, width: size, height: size,
                                 fill: colour(v, unit ? 1 : peak, unit) },
                       svg("title", {}, `[${i}, ${j}] ${fmt(v)}`)));
  }));
  (rowLabels || []).forEach((label, i) => picture.append(
    svg("text", { x: left - 3, y: top + i * size + size / 2 + 4, "text-anchor": "end", class: "label" }, label)));
  (colLabels || []).forEach((label, j) => picture.append(
    svg("text", { transform: `translate(${left + j * size + size / 2 + 4}, ${top - 3}) rotate(-60)`,
                  class: "label" }, label)));
  return picture;
}

// Lay out a directed graph with dagre. nodes: [{id, width, height}], edges: [[from, to]].
// Returns {nodes: {id: {x, y, width, height}}, edges: [{from, to, points}], width, height}.
export function layout(nodes, edges, { rankdir = "TB", nodesep = 18, ranksep = 28 } = {}) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir, nodesep, ranksep, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of nodes) g.setNode(n.id, { width: n.width, height: n.height });
  for (const [from, to] of edges) g.setEdge(from, to);
  dagre.layout(g);
  const placed = {};
  for (const id of g.nodes()) placed[id] = g.node(id);
  const routed = g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points }));
  return { nodes: placed, edges: routed, width: g.graph().width, height: g.graph().height };
}

export function edgePath(points) {
  return "M" + points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join("L");
}

// Pan (drag) and zoom (wheel) an SVG whose content is the group `g`. Returns {centre(x, y), fit()}.
export function panZoom(picture, g, width, height) {
  let scale = 1, dx = 0, dy = 0, drag = null;
  const apply = () => g.setAttribute("transform", `translate(${dx}, ${dy}) scale(${scale})`);
  picture.addEventListener("wheel", (e) => {
    e.preventDefault();
    const box = picture.getBoundingClientRect();
    const x = e.clientX - box.left, y = e.clientY - box.top;
    const factor = Math.exp(-e.deltaY * 0.0015);
    dx = x - (x - dx) * factor; dy = y - (y - dy) * factor; scale *= factor;
    apply();
  }, { passive: false });
  picture.addEventListener("pointerdown", (e) => { drag = [e.clientX - dx, e.clientY - dy]; });
  picture.addEventListener("pointermove", (e) => {
    if (drag && e.buttons) { dx = e.clientX - drag[0]; dy = e.clientY - drag[1]; apply(); }
  });
  picture.addEventListener("pointerup", () => { drag = null; });
  return {
    fit() {
      const box = picture.getBoundingClientRect();
      scale = Math.max(0.3, Math.min(1, box.width / (width + 10), box.height / (height + 10)));
      dx = (box.width - width * scale) / 2; dy = 10;
      apply();
    },
    centre(x, y) {
      const box = picture.getBoundingClientRect();
      dx = box.width / 2 - x * scale; dy = box.height / 2 - y * scale;
      apply();
    },
  };
}

// Stats of an array as one line: shape dtype, min / mean / max, norm, and NaN/Inf counts.
export function statsLine(s) {
  const parts = [`${shape(s.shape)} ${s.dtype}`];
  if (s.min !== undefined) parts.push(`min ${fmt(s.min)}  mean ${fmt(s.mean)}  max ${fmt(s.max)}  ‖·‖ ${fmt(s.norm)}`);
  if (s.nan || s.inf) parts.push(`${s.nan} NaN, ${s.inf} Inf`);
  return parts.join("   ");
}
