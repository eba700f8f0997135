// The compiled-step view: the Python `tx.jit` made of this step (forward and backward), each
// op's line linked to its graph node, and the profiler's time per op, linked to its nodes.
import { el, fmt } from "./draw.js";
import { api, showView } from "./api.js";
import { reveal } from "./graph.js";

export async function showCompiled(root) {
  const [compiled, profiled] = await Promise.all([api("/api/compiled"), api("/api/profile")]);
  const go = (id) => showView("graph").then(() => reveal(id));
  const code = compiled.refused
    ? el("p", { class: "message" }, `tx.jit cannot record this function: ${compiled.refused}`)
    : el("div", {}, el("p", { class: "note" }, compiled.summary,
                       ". A line with an op is linked to its graph node: click it."),
         el("pre", { class: "code compiled" }, compiled.lines.map((line) => line.node
           ? el("a", { href: "#", class: "line linked", "data-node": line.node,
                       onclick: (e) => { e.preventDefault(); go(line.node); } }, line.text, "\n")
           : el("span", { class: "line" }, line.text, "\n"))));
  const rows = profiled.rows.map((r) => el("tr", {},
    el("td", {}, r.nodes.length ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); go(r.nodes[0]); } }, r.op) : r.op),
    el("td", {}, r.calls), el("td", {}, fmt(r.forward_ms)), el("td", {}, fmt(r.backward_ms)),
    el("td", {}, (r.held_bytes / 1024).toFixed(1)), el("td", { class: "note" }, r.nodes.slice(0, 6).join(" "))));
  root.querySelector("#compiled").replaceChildren(
    el("div", { class: "columns" },
      el("div", {}, el("h3", {}, "the step as tx.jit replays it"), code),
      el("div", {}, el("h3", {}, "time and memory per op (tx.inspect.profile, with the explorer's instruments on)"),
         el("table", { class: "profile" },
           el("tr", {}, ["op", "calls", "forward ms", "backward ms", "held KiB", "nodes"].map((h) => el("th", {}, h))),
           rows))));
}
