// Drawing helpers shared by the views: elements, numbers, heat-maps with their colour bar, graph
// layout (dagre), arrowheads, pan and zoom, keys. Everything drawn comes from the server: these
// functions only place and colour it.
"use strict";
(() => {
  const SVG = "http://www.w3.org/2000/svg";

  // el("div", {class: "x"}, "text", child): an HTML element; attributes starting with "on" are listeners.
  function el(tag, attrs = {}, ...children) {
    return build(document.createElement(tag), attrs, children);
  }

  function svg(tag, attrs = {}, ...children) {
    return build(document.createElementNS(SVG, tag), attrs, children);
  }

  function build(node, attrs, children) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  // A number as people read it: 4 significant digits. NaN and ±inf arrive as the texts "NaN",
  // "Infinity", "-Infinity" (JSON has no such numbers: strict_json.py) and are shown as such.
  function fmt(x) {
    if (x === null || x === undefined) return "—";
    if (typeof x === "string") return { NaN: "NaN", Infinity: "+inf", "-Infinity": "-inf" }[x] || x;
    if (Number.isInteger(x)) return String(x);
    return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(3) : x.toPrecision(4);
  }

  const shape = (s) => `(${s.join(", ")}${s.length === 1 ? "," : ""})`;

  // -- heat-maps ----------------------------------------------------------------------------------
  const SPECIAL = { NaN: [176, 79, 196], Infinity: [107, 0, 0], "-Infinity": [0, 0, 107] };  // not on the colour scale
  const PAD = [110, 110, 110, 0.28];  // padding's grey, laid over its row (rgb and opacity)

  // The colour of a value as [r, g, b]: white at 0, red for positive and blue for negative (scaled
  // by `top`), or, for weights in [0, 1] (`unit`), white to dark blue.
  function rgbOf(v, top, unit) {
    if (typeof v === "string") return SPECIAL[v];
    const t = Math.min(1, Math.abs(v) / (top || 1));
    if (unit) return [Math.round(255 - 215 * t), Math.round(255 - 175 * t), Math.round(255 - 75 * t)];
    const fade = Math.round(255 * (1 - t));
    return v >= 0 ? [255, fade, fade] : [fade, fade, 255];
  }

  const colour = (v, top, unit) => `rgb(${rgbOf(v, top, unit).join(", ")})`;

  // A heat-map of rows of numbers, with its key: a colour bar with numbers, the names of its axes,
  // and, under it, a read-out of the cell the pointer is on. `unit` for weights in [0, 1]; labels
  // (one per row or column: the tokens at each position) are optional; a row labelled <pad> is
  // padding, greyed over and named in the key.
  //
  // The cells are a canvas, one pixel a cell, scaled up without smoothing: a walk step on a big
  // model shows thousands of cells, which as elements of their own took ten times longer to draw
  // than the rest of the step. The canvas's `reading(i, j)` is the read-out of cell (i, j), as the
  // pointer shows it; labels, axes and the key are SVG around it.
  function heatmap(rows, { unit = false, rowLabels = null, colLabels = null, cell = 0, rowName = "", colName = "" } = {}) {
    const nRows = rows.length, nCols = rows[0] ? rows[0].length : 0;
    rowLabels = rowLabels && rowLabels.length === nRows ? rowLabels : null;
    colLabels = colLabels && colLabels.length === nCols ? colLabels : null;
    const fit = (n) => Math.max(4, Math.min(22, Math.floor(260 / Math.max(n, 1))));
    // cells are square unless labels need room: a labelled row or column (a token) is at least 12 px, its 10 px text apart
    const width = cell || fit(Math.max(nRows, nCols)), height = Math.max(width, rowLabels ? 12 : 0);
    const wide = Math.max(width, colLabels ? 12 : 0);
    const showRowLabels = !!rowLabels, showColLabels = !!colLabels;
    const left = (showRowLabels ? 58 : 0) + (rowName ? 16 : 0), top = (showColLabels ? 46 : 0) + (colName ? 16 : 0);
    const size = { w: wide, h: height };
    let peak = 0;
    const special = new Set();
    for (const row of rows) for (const v of row) {
      if (typeof v === "string") special.add(v); else peak = Math.max(peak, Math.abs(v));
    }
    const padded = (rowLabels || []).map((l) => l === "<pad>");
    const mapBottom = top + nRows * size.h;
    const picture = svg("svg", { class: "heat", width: Math.max(left + nCols * size.w, 250) + 4, height: mapBottom + 40 });
    const cells = el("canvas", { class: "cells", width: nCols, height: nRows,
                                 style: `left: ${left}px; top: ${top}px; width: ${nCols * size.w}px; height: ${nRows * size.h}px` });
    paint(cells, rows, (v) => rgbOf(v, unit ? 1 : peak, unit), padded);
    cells.reading = (i, j) => `${rowLabels ? rowLabels[i] : `row ${i}`}, ${colLabels ? colLabels[j] : `column ${j}`}: ${fmt(rows[i][j])}`;
    if (showRowLabels) rowLabels.forEach((label, i) => picture.append(
      svg("text", { x: left - 3, y: top + i * size.h + size.h / 2 + 4, "text-anchor": "end", class: `label${padded[i] ? " padlabel" : ""}` }, label)));
    if (showColLabels) colLabels.forEach((label, j) => picture.append(
      svg("text", { transform: `translate(${left + j * size.w + size.w / 2 + 4}, ${top - 3}) rotate(-60)`, class: "label" }, label)));
    if (rowName) picture.append(svg("text", { class: "axis-name", transform: `translate(11, ${top + nRows * size.h / 2}) rotate(-90)`,
                                              "text-anchor": "middle" }, rowName));
    if (colName) picture.append(svg("text", { class: "axis-name", x: left + nCols * size.w / 2, y: 11, "text-anchor": "middle" }, colName));
    colourBar(picture, mapBottom + 6, unit ? 1 : peak, unit, [...special], padded.some(Boolean));
    const readout = el("div", { class: "readout" }, "point at a cell to read it");
    cells.addEventListener("mousemove", (e) => {
      const i = Math.min(nRows - 1, Math.floor(e.offsetY / size.h)), j = Math.min(nCols - 1, Math.floor(e.offsetX / size.w));
      readout.textContent = cells.title = cells.reading(Math.max(i, 0), Math.max(j, 0));
    });
    return el("div", { class: "heatwrap" }, el("div", { class: "heatpic" }, picture, cells), readout);
  }

  // Each cell's colour, one pixel each, padded rows greyed over as the key says.
  function paint(canvas, rows, rgb, padded) {
    if (!canvas.width || !canvas.height) return;
    const image = new ImageData(canvas.width, canvas.height);
    rows.forEach((row, i) => row.forEach((v, j) => {
      const c = padded[i] ? rgb(v).map((x, k) => x * (1 - PAD[3]) + PAD[k] * PAD[3]) : rgb(v);
      image.data.set([c[0], c[1], c[2], 255], 4 * (i * canvas.width + j));
    }));
    canvas.getContext("2d").putImageData(image, 0, 0);
  }

  // The key under a heat-map: the colour scale from its lowest to its highest value, with numbers,
  // then a swatch for each value off the scale (NaN, ±inf) and for padding.
  function colourBar(picture, y, peak, unit, special, padded) {
    const x0 = 4, barWidth = 150, steps = 30;
    const low = unit ? 0 : -peak;
    for (let k = 0; k < steps; k++) {
      const v = low + ((k + 0.5) / steps) * ((unit ? 1 : peak) - low);
      picture.append(svg("rect", { class: "bar", x: x0 + (k * barWidth) / steps, y, width: barWidth / steps + 0.5, height: 9,
                                   fill: colour(v, unit ? 1 : peak, unit) }));
    }
    picture.append(svg("rect", { x: x0, y, width: barWidth, height: 9, fill: "none", stroke: "#999" }));
    const ticks = unit ? [[0, "0"], [0.5, "0.5"], [1, "1"]] : [[0, fmt(-peak)], [0.5, "0"], [1, fmt(peak)]];
    for (const [at, text] of ticks) {
      picture.append(svg("text", { x: x0 + at * barWidth, y: y + 21, "text-anchor": at === 0 ? "start" : at === 1 ? "end" : "middle",
                                   class: "label tick" }, text));
    }
    let x = x0 + barWidth + 10;
    for (const [name, fill, text] of [...special.map((s) => [s, colour(s), fmt(s)]), ...(padded ? [["pad", null, "padding"]] : [])]) {
      picture.append(fill ? svg("rect", { x, y, width: 9, height: 9, fill }) : svg("rect", { x, y, width: 9, height: 9, class: "pad" }),
                     svg("text", { x: x + 12, y: y + 8, class: "label" }, text));
      x += 18 + 6 * text.length;
    }
  }

  // The name of an array's heat-map axes: "axis 1 of (4, 10, 20)" and the like.
  function axisNames(heat, dims) {
    const [r, c] = heat.axes || [null, null];
    return { rowName: r === null ? "" : `axis ${r} (${dims[r]})`, colName: c === null ? "" : `axis ${c} (${dims[c]})` };
  }

  // -- graphs ---------------------------------------------------------------------------------------
  // Lay out a directed graph with dagre. nodes: [{id, width, height}], edges: [[from, to]].
  // Returns {nodes: {id: {x, y, width, height}}, edges: [{from, to, points}], width, height}.
  function layout(nodes, edges, { rankdir = "TB", nodesep = 18, ranksep = 30 } = {}) {
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

  function edgePath(points) {
    return "M" + points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join("L");
  }

  // <defs> with an arrowhead marker named `id` (ids are page-wide: one per picture kind).
  function arrowDefs(id, cls = "") {
    return svg("defs", {}, svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
                                           orient: "auto-start-reverse" },
                               svg("path", { d: "M0,0L10,5L0,10z", class: `arrowhead ${cls}` })));
  }

  // Pan (drag) and zoom (wheel) an SVG whose content is the group `g`. Returns {fit(), centre(x, y),
  // focus(x, y, scale)}: focus brings a point to the middle at a readable scale.
  function panZoom(picture, g, width, height) {
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
    const view = {
      fit(below = 0) {  // the whole picture in view, above `below` pixels kept for a key
        const box = picture.getBoundingClientRect();
        scale = Math.max(0.3, Math.min(1, box.width / (width + 10), (box.height - below) / (height + 10)));
        dx = (box.width - width * scale) / 2; dy = 10;
        apply();
      },
      centre(x, y) {
        const box = picture.getBoundingClientRect();
        dx = box.width / 2 - x * scale; dy = box.height / 2 - y * scale;
        apply();
      },
      focus(x, y, readable = 0.9) {
        scale = Math.max(scale, readable);
        view.centre(x, y);
      },
      get scale() { return scale; },
    };
    return view;
  }

  // A key: rows of [swatch class, text] (a swatch is a small box styled like what it names); with a
  // title, it folds away when clicked (it lies over a picture) and back again.
  function key(title, items) {
    const rows = items.map(([cls, text]) => el("div", { class: "key-row" }, el("span", { class: `swatch ${cls}` }), text));
    if (!title) return el("div", { class: "key" }, rows);
    const box = el("div", { class: "key", title: "click to fold or unfold the key" }, el("b", {}, title), rows);
    box.addEventListener("click", () => box.classList.toggle("folded"));
    return box;
  }

  // Stats of an array as one line: shape dtype, min / mean / max, norm, and NaN/Inf counts.
  function statsLine(s) {
    const parts = [`${shape(s.shape)} ${s.dtype}`];
    if (s.min !== undefined) parts.push(`min ${fmt(s.min)}  mean ${fmt(s.mean)}  max ${fmt(s.max)}  ‖·‖ ${fmt(s.norm)}`);
    if (s.nan || s.inf) parts.push(`${s.nan} NaN, ${s.inf} inf`);
    return parts.join("   ");
  }

  // A tick's number: as short as it can be (0.002, not 0.002000).
  function tick(v) {
    if (v === 0) return "0";
    if (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3) return v.toExponential(1).replace(".0e", "e");
    return String(Number(v.toPrecision(4)));
  }

  // "Nice" tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten.
  function ticks(low, high, count = 5) {
    if (!(high > low)) return [low];
    const raw = (high - low) / count, power = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(low / step) * step; v <= high + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }

  TX.draw = { el, svg, fmt, tick, shape, heatmap, axisNames, layout, edgePath, arrowDefs, panZoom, key, statsLine, ticks };
})();
