// Each layer's weights and gradients over training, in the training view: one picture whose rows are
// the layers and whose columns are the run's records (its validations), in three blocks: the norm of
// the gradients, of the weights, and the update-to-weight ratio per step, each coloured on its own log
// scale with its colour bar, so that a layer whose gradient vanishes (pale) or explodes (dark) shows at
// a glance. A click on a row shows that layer's distributions over training, as TensorBoard's
// histograms do. The server computes every number (explore_stats.py, layer_stats.py).
"use strict";
(() => {
  const { el, svg, fmt, tick, ticks } = TX.draw;
  const BLOCKS = [["g_norm", "‖gradient‖"], ["w_norm", "‖weight‖"], ["ratio", "‖Δw‖ / ‖w‖ per step"]];
  const RH = 13, TOP = 58, GAP = 26;
  const state = { chosen: null };

  async function draw(root) {
    const stats = await TX.api("/api/layer_stats");
    const holder = root.querySelector("#layer-stats");
    root.querySelector("#stats-source").textContent = stats.note || `${stats.source}. Darker: larger (each block on its own log scale); click a layer for its distributions.`;
    if (!stats.steps.length) { holder.replaceChildren(); return; }
    const rows = stats.layers;
    if (!rows.some((r) => r.name === state.chosen)) state.chosen = rows[rows.length - 1].name;
    const histograms = el("div", { class: "histograms" });
    const choose = (name) => { state.chosen = name; distributions(histograms, stats, rows.find((r) => r.name === name)); };
    holder.replaceChildren(grid(stats, rows, choose, holder.clientWidth || 1000), histograms);
    choose(state.chosen);
  }

  // The colour of a value on a log scale from lo to hi (log10s): pale blue to dark blue.
  function shade(v, lo, hi) {
    const t = hi > lo ? Math.min(1, Math.max(0, (Math.log10(v) - lo) / (hi - lo))) : 0.5;
    const mix = (a, b) => Math.round(a + (b - a) * t);
    return `rgb(${mix(240, 8)}, ${mix(246, 48)}, ${mix(252, 107)})`;
  }

  // `room`: the width it has (a long run's many records get narrower columns, never a cut-off picture).
  function grid(stats, rows, choose, room) {
    const n = stats.steps.length, LW = 12 + 6.2 * Math.max(...rows.map((r) => r.name.length));
    const cw = Math.max(1, Math.min(24, Math.floor((room - 4 - LW - BLOCKS.length * GAP) / BLOCKS.length / n)));
    const bw = n * cw;
    const height = TOP + rows.length * RH + 52, width = LW + BLOCKS.length * (Math.max(bw, 160) + GAP);
    const picture = svg("svg", { class: "layer-grid", width, height });
    picture.append(svg("text", { x: 4, y: TOP - 8, class: "axis-name" }, "layer"));
    rows.forEach((r, i) => picture.append(svg("text", { x: LW - 6, y: TOP + i * RH + RH - 3, "text-anchor": "end",
      class: `label layer-name${r.name === state.chosen ? " chosen" : ""}`, "data-layer": r.name, onclick: () => choose(r.name) }, r.name)));
    BLOCKS.forEach(([key, title], b) => {
      const x0 = LW + b * (Math.max(bw, 160) + GAP);
      const values = rows.flatMap((r) => r[key]).filter((v) => typeof v === "number" && v > 0);
      const lo = Math.floor(Math.log10(Math.min(...values, 1))), hi = Math.ceil(Math.log10(Math.max(...values, 1e-9)));
      picture.append(svg("text", { x: x0, y: 14, class: "title" }, title),
                     svg("text", { x: x0, y: 28, class: "axis-name" }, "training step →"),
                     ...stats.steps.map((s, j) => (cw >= 6.5 * String(s).length + 4 || j === 0 || j === n - 1 ?  // each where it fits
                       svg("text", { x: x0 + j * cw + cw / 2, y: TOP - 6, "text-anchor": "middle", class: "label tick" }, s) : null)));
      rows.forEach((r, i) => r[key].forEach((v, j) => {
        const read = `${r.name} at step ${stats.steps[j]}: ${title} ${typeof v === "number" ? fmt(v) : "none (no previous record)"}`;
        picture.append(svg("rect", { x: x0 + j * cw, y: TOP + i * RH, width: cw - 1, height: RH - 1, "data-read": read,
          class: typeof v === "number" && v > 0 ? "cell" : "cell none", fill: typeof v === "number" && v > 0 ? shade(v, lo, hi) : null,
          onclick: () => choose(r.name) }, svg("title", {}, read)));
      }));
      colourBar(picture, x0, TOP + rows.length * RH + 8, lo, hi);
    });
    const readout = el("div", { class: "readout" }, "point at a cell to read it");
    picture.addEventListener("mouseover", (e) => { const r = e.target.getAttribute && e.target.getAttribute("data-read"); if (r) readout.textContent = r; });
    return el("div", { class: "heatwrap layer-stats-grid" }, picture, readout,
      el("p", { class: "note" }, "grey: no value (the ratio needs a previous record). A gradient norm falling by powers of ten toward the first layers is a vanishing gradient; one growing step after step, an exploding one."));
  }

  // A log colour bar from 10^lo to 10^hi with a tick at each power of ten.
  function colourBar(picture, x0, y, lo, hi) {
    const W = 150, steps = 30;
    for (let k = 0; k < steps; k++) {
      picture.append(svg("rect", { x: x0 + (k * W) / steps, y, width: W / steps + 0.5, height: 9, fill: shade(10 ** (lo + ((k + 0.5) / steps) * (hi - lo)), lo, hi) }));
    }
    picture.append(svg("rect", { x: x0, y, width: W, height: 9, fill: "none", stroke: "#999" }));
    const every = Math.max(1, Math.ceil((hi - lo) / 4));
    for (let k = lo; k <= hi; k += every) {
      const x = x0 + (hi > lo ? (k - lo) / (hi - lo) : 0.5) * W;
      picture.append(svg("line", { x1: x, y1: y + 9, x2: x, y2: y + 13, class: "axis" }),
                     svg("text", { x, y: y + 24, "text-anchor": "middle", class: "label tick bar-tick" }, tick(10 ** k)));
    }
  }

  // The distributions of one layer's parameters over training: for each, its weights and its
  // gradients, a column a record, each bin shaded by the share of that record's values in it.
  function distributions(holder, stats, layer) {
    for (const t of document.querySelectorAll("#layer-stats text.layer-name")) t.classList.toggle("chosen", t.dataset.layer === layer.name);
    holder.replaceChildren(el("h3", {}, `${layer.name}: its values over training (darker: more of that record's values in the bin)`),
      el("div", { class: "heads" }, layer.params.flatMap((name) => [["w", "weights"], ["g", "gradients"]].map(([key, what]) =>
        histogram(`${name.slice(layer.name.length + 1)}: ${what}`, stats.steps, stats.hist[name][key])))));
  }

  function histogram(title, steps, columns) {
    const W = 300, H = 190, L = 58, R = 10, T = 22, B = 34;
    const picture = svg("svg", { class: "chart histogram", width: W, height: H }, svg("text", { x: 6, y: 14, class: "title" }, title));
    const kept = columns.map((c, j) => [c, j]).filter(([c]) => c);
    if (!kept.length) {
      picture.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "label" }, "none recorded"));
      return el("figure", { class: "chart" }, picture);
    }
    const lo = Math.min(...kept.map(([c]) => c.lo)), hi = Math.max(...kept.map(([c]) => c.hi));
    const cw = (W - L - R) / steps.length, py = (v) => H - B - ((v - lo) / (hi - lo || 1)) * (H - B - T);
    for (const [c, j] of kept) {
      const peak = Math.max(...c.counts, 1), bin = (c.hi - c.lo) / c.counts.length;
      c.counts.forEach((count, k) => count && picture.append(svg("rect", { x: L + j * cw, y: py(c.lo + (k + 1) * bin), width: Math.max(cw - 1, 1),
        height: Math.max(py(c.lo + k * bin) - py(c.lo + (k + 1) * bin), 0.5), class: "bin", "fill-opacity": 0.12 + 0.88 * (count / peak) },
        svg("title", {}, `step ${steps[j]}: ${count} values in [${fmt(c.lo + k * bin)}, ${fmt(c.lo + (k + 1) * bin)}]`))));
    }
    picture.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }), svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
                   svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "axis-name" }, "training step"),
                   svg("text", { transform: `translate(11, ${(T + H - B) / 2}) rotate(-90)`, "text-anchor": "middle", class: "axis-name" }, "value"));
    for (const v of ticks(lo, hi, 4)) picture.append(svg("line", { x1: L - 4, y1: py(v), x2: L, y2: py(v), class: "axis" }),
                                                     svg("text", { x: L - 6, y: py(v) + 3, "text-anchor": "end", class: "label tick" }, tick(v)));
    const every = Math.max(1, Math.ceil(steps.length / 4));
    steps.forEach((s, j) => j % every === 0 && picture.append(svg("text", { x: L + j * cw + cw / 2, y: H - B + 13, "text-anchor": "middle", class: "label tick" }, s)));
    return el("figure", { class: "chart" }, picture);
  }

  TX.stats = { draw };
})();
