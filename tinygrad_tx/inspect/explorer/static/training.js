// The training view: the run's curves from metrics.jsonl and its kept checkpoints, redrawn whenever
// the trainer appends to the one or writes another of the other (the run's news: server-sent
// events), each layer's weights and gradients over training (stats.js), and one sentence's
// cross-attention at each kept checkpoint.
"use strict";
(() => {
  const { el, svg, fmt, tick, heatmap, ticks } = TX.draw;

  const CURVES = [  // [title, axis name, [[metric, label], ...], log scale]
    ["training loss (label-smoothed)", "loss", [["loss", "loss"]], true],
    ["learning rate", "learning rate", [["lr", "lr"]], false],
    ["validation", "%", [["valid_exact_match", "exact match"], ["valid_token_accuracy", "token accuracy"]], false],
  ];

  async function showTraining(root, info) {
    const records = [];
    let checkpoints = [], statsShown = false;
    const slider = root.querySelector("#ckpt-slider"), sentence = root.querySelector("#ckpt-sentence");
    sentence.value = info.example || "";
    const news = ({ from, records: added, checkpoints: kept, versions }) => {
      if (added && added.length) {
        records.splice(from, records.length - from, ...added);
        drawCurves(root.querySelector("#curves"), records);
      }
      const stats = versions && versions["layer_stats.jsonl"];
      if (statsShown === false || (stats !== undefined && stats !== statsShown)) {
        statsShown = stats;
        TX.stats.draw(root);  // first, then whenever train appends a record of each layer (at a validation)
      }
      if (kept && kept.join() !== checkpoints.join()) {  // a new snapshot joins the slider
        const atEnd = Number(slider.value) >= checkpoints.length - 1;
        checkpoints = kept;
        slider.max = Math.max(0, checkpoints.length - 1);
        if (atEnd) slider.value = slider.max;
        show();
      }
    };
    const show = async () => {
      const name = checkpoints[Number(slider.value)];
      root.querySelector("#ckpt-name").textContent = name ? `${name} (${Number(slider.value) + 1} of ${checkpoints.length})`
                                                          : "no checkpoint yet";
      const message = root.querySelector("#ckpt-message");
      message.hidden = !!name;
      message.textContent = name ? "" : "no checkpoint yet: the attention appears after the run's first validation";
      if (!name) return;
      try {
        const a = await TX.api(`/api/checkpoint_attention?name=${encodeURIComponent(name)}&sentence=${encodeURIComponent(sentence.value)}`);
        if (checkpoints[Number(slider.value)] !== name) return;  // moved on meanwhile
        if (a.waiting || a.problem) throw new Error(a.waiting || a.problem);
        const [rowName, colName] = TX.translate.AXES.cross;
        root.querySelector("#ckpt-attention").replaceChildren(
          el("p", {}, `${name}, step ${a.shows.step}: `, el("span", { class: "output" }, a.output || "(nothing)")),
          TX.translate.pieces(a.pieces),
          el("div", { class: "heads" }, a.map.heads.map((rows, h) => el("figure", { class: "head" }, el("figcaption", {}, `head ${h}`),
            heatmap(rows, { unit: true, rowLabels: a.map.rows, colLabels: a.map.cols, cell: 16, rowName, colName })))));
      } catch (error) {
        message.textContent = error.message;
        message.hidden = false;
        root.querySelector("#ckpt-attention").replaceChildren();
      }
    };
    slider.addEventListener("input", show);
    sentence.addEventListener("change", show);
    if (info.live) TX.onNews(news);
    else news({ from: 0, ...(await TX.api("/api/metrics")) });  // a saved page: the curves as they were
    if (!records.length) drawCurves(root.querySelector("#curves"), records);
    await show();
  }

  function drawCurves(holder, records) {
    holder.replaceChildren(...CURVES.map(([title, unit, series, log]) => chart(title, unit, series.map(([key, label]) => ({
      label, points: records.filter((r) => r[key] !== undefined && r[key] !== null && !r.averaged).map((r) => [r.step, r[key]]) })), log)));
  }

  // One line chart: steps across, values up (log10 when `log`), ticks on both axes, each point
  // marked (one point is a visible dot), the legend above the plot, and a read-out of the nearest
  // step under the pointer. A value that is not finite (a run that diverged) is marked on the axis.
  function chart(title, unit, series, log) {
    const W = 360, H = 230, L = 66, R = 12, B = 36, T = 40;
    const usable = (y) => typeof y === "number" && (!log || y > 0);
    const all = series.flatMap((s) => s.points).filter(([, y]) => usable(y));
    const picture = svg("svg", { class: "chart", width: W, height: H }, svg("text", { x: 8, y: 15, class: "title" }, title));
    series.forEach((s, i) => picture.append(  // the legend, above the plot: never under the lines
      svg("line", { x1: L + 110 * i, y1: 27, x2: L + 110 * i + 14, y2: 27, class: `series s${i}` }),
      svg("text", { x: L + 110 * i + 18, y: 31, class: `legend s${i}` }, s.label)));
    if (!all.length) {
      picture.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "label" }, "no records yet"));
      return el("figure", { class: "chart" }, picture);
    }
    const ty = (y) => (log ? Math.log10(y) : y);
    const xs = all.map(([x]) => x), ys = all.map(([, y]) => ty(y));
    let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const steps = x0 === x1 ? [x0] : ticks(x0, x1, 4).filter(Number.isInteger);  // whole steps: a step is one
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const py = (y) => H - B - ((ty(y) - y0) / (y1 - y0)) * (H - B - T);
    picture.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }),
                   svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
                   svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "axis-name" }, "training step"),
                   svg("text", { transform: `translate(11, ${(T + H - B) / 2}) rotate(-90)`, "text-anchor": "middle", class: "axis-name" },
                       unit + (log ? " (log scale)" : "")));
    for (const x of steps) {
      picture.append(svg("line", { x1: px(x), y1: H - B, x2: px(x), y2: H - B + 4, class: "axis" }),
                     svg("text", { x: px(x), y: H - B + 14, "text-anchor": "middle", class: "label tick" }, tick(x)));
    }
    for (const y of valueTicks(y0, y1, log)) {
      picture.append(svg("line", { x1: L - 4, y1: py(y), x2: W - R, y2: py(y), class: "grid" }),
                     svg("text", { x: L - 6, y: py(y) + 3, "text-anchor": "end", class: "label tick" }, tick(y)));
    }
    series.forEach((s, i) => {
      const kept = s.points.filter(([, y]) => usable(y));
      if (kept.length > 1) picture.append(svg("polyline", { class: `series s${i}`, points: kept.map(([x, y]) => `${px(x)},${py(y)}`).join(" ") }));
      if (kept.length <= 60) for (const [x, y] of kept) picture.append(svg("circle", { cx: px(x), cy: py(y), r: kept.length === 1 ? 3.5 : 2, class: `dot s${i}` }));
      for (const [x, y] of s.points.filter(([, y]) => typeof y === "string")) {
        picture.append(svg("text", { x: px(x), y: T + 8, "text-anchor": "middle", class: `label nonfinite s${i}` }, fmt(y)));
      }
    });
    const cursor = svg("line", { y1: T, y2: H - B, class: "cursor", visibility: "hidden" });
    const readout = el("figcaption", { class: "readout" }, "point at the chart to read it");
    picture.append(cursor);
    picture.addEventListener("mousemove", (e) => {
      const x = x0 + ((e.clientX - picture.getBoundingClientRect().left - L) / (W - L - R)) * (x1 - x0);
      const near = (points) => points.reduce((best, p) => (Math.abs(p[0] - x) < Math.abs(best[0] - x) ? p : best), points[0]);
      const parts = series.filter((s) => s.points.length).map((s) => { const [sx, sy] = near(s.points); return [sx, `${s.label} ${fmt(sy)}`]; });
      if (!parts.length) return;
      cursor.setAttribute("x1", px(parts[0][0])); cursor.setAttribute("x2", px(parts[0][0]));
      cursor.setAttribute("visibility", "visible");
      readout.textContent = `step ${parts[0][0]}: ${parts.map((p) => p[1]).join(", ")}`;
    });
    return el("figure", { class: "chart" }, picture, readout);
  }

  // The values to mark on a value axis spanning [y0, y1] (in log10 when `log`): round numbers; on a
  // log axis spanning a decade or more, the powers of ten (and 2 and 5 times them when few).
  function valueTicks(y0, y1, log) {
    if (!log) return ticks(y0, y1, 4);
    if (y1 - y0 < 1) return ticks(10 ** y0, 10 ** y1, 6);
    const out = [];
    for (let k = Math.floor(y0); k <= Math.ceil(y1); k++) {
      for (const m of y1 - y0 < 2.5 ? [1, 2, 5] : [1]) if (Math.log10(m * 10 ** k) >= y0 && Math.log10(m * 10 ** k) <= y1) out.push(m * 10 ** k);
    }
    return out;
  }

  TX.views.training = showTraining;
})();
