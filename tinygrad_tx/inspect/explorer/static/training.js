// The training view: the run's curves from metrics.jsonl, redrawn whenever the trainer appends
// to it (server-sent events), and one sentence's cross-attention at each kept checkpoint.
import { api } from "./api.js";
import { el, fmt, heatmap, svg } from "./draw.js";

const CURVES = [  // [title, [[metric, label], ...], log scale]
  ["training loss (label-smoothed)", [["loss", "loss"]], true],
  ["learning rate", [["lr", "lr"]], false],
  ["validation (%)", [["valid_exact_match", "exact match"], ["valid_token_accuracy", "token accuracy"]], false],
];

export async function showTraining(root, info) {
  const records = [];
  const events = new EventSource("/api/events/metrics");
  events.onmessage = (e) => {
    const batch = JSON.parse(e.data);
    if (!batch.records.length) return;  // a keep-alive
    records.splice(batch.from, records.length - batch.from, ...batch.records);
    drawCurves(root.querySelector("#curves"), records);
  };
  const { checkpoints } = await api("/api/metrics");
  const slider = root.querySelector("#ckpt-slider"), sentence = root.querySelector("#ckpt-sentence");
  slider.max = Math.max(0, checkpoints.length - 1);
  sentence.value = info.example || "";
  const show = async () => {
    const name = checkpoints[Number(slider.value)];
    root.querySelector("#ckpt-name").textContent = name || "no checkpoint yet";
    const message = root.querySelector("#ckpt-message");
    message.hidden = true;
    if (!name) return;
    try {
      const a = await api(`/api/checkpoint_attention?name=${encodeURIComponent(name)}&sentence=${encodeURIComponent(sentence.value)}`);
      if (a.problem) throw new Error(a.problem);
      root.querySelector("#ckpt-attention").replaceChildren(el("p", {}, `${name}: ${a.output || "(nothing)"}`),
        el("div", { class: "heads" }, a.map.heads.map((rows, h) => el("figure", { class: "head" }, el("figcaption", {}, `head ${h}`),
          heatmap(rows, { unit: true, rowLabels: a.map.rows, colLabels: a.map.cols, cell: 16 })))));
    } catch (error) {
      message.textContent = error.message;
      message.hidden = false;
    }
  };
  slider.addEventListener("input", show);
  sentence.addEventListener("change", show);
  await show();
}

function drawCurves(holder, records) {
  holder.replaceChildren(...CURVES.map(([title, series, log]) => chart(title, series.map(([key, label]) => ({
    label, points: records.filter((r) => typeof r[key] === "number" && !r.averaged).map((r) => [r.step, r[key]]) })), log)));
}

// One line chart: steps across, values up (log10 when `log`), ticks at the ends of each axis.
function chart(title, series, log) {
  const W = 340, H = 200, L = 64, B = 30, T = 24;
  const all = series.flatMap((s) => s.points).filter(([, y]) => !log || y > 0);
  const picture = svg("svg", { class: "chart", width: W, height: H }, svg("text", { x: L, y: 14, class: "title" }, title));
  if (!all.length) return el("figure", {}, picture, el("figcaption", { class: "note" }, "no records yet"));
  const ty = (y) => (log ? Math.log10(y) : y);
  const xs = all.map(([x]) => x), ys = all.map(([, y]) => ty(y));
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs) || 1, Math.min(...ys), Math.max(...ys)];
  const px = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - 10);
  const py = (y) => H - B - ((ty(y) - y0) / (y1 - y0 || 1)) * (H - B - T);
  picture.append(svg("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, class: "axis" }),
                 svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
                 svg("text", { x: L, y: H - 12, class: "label" }, `step ${x0}`),
                 svg("text", { x: W - 10, y: H - 12, "text-anchor": "end", class: "label" }, `${x1}`),
                 svg("text", { x: L - 4, y: H - B, "text-anchor": "end", class: "label" }, fmt(log ? 10 ** y0 : y0)),
                 svg("text", { x: L - 4, y: T + 8, "text-anchor": "end", class: "label" }, fmt(log ? 10 ** y1 : y1)));
  series.forEach((s, i) => {
    const kept = s.points.filter(([, y]) => !log || y > 0);
    if (!kept.length) return;
    picture.append(svg("polyline", { class: `series s${i}`, points: kept.map(([x, y]) => `${px(x)},${py(y)}`).join(" ") }),
                   svg("text", { x: W - 10, y: T + 12 + 12 * i, "text-anchor": "end", class: `legend s${i}` }, s.label));
  });
  return el("figure", {}, picture);
}
