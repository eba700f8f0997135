// The compiled-step view: the Python `tx.jit` made of this step (forward and backward), each op's
// line (forward and backward) linked to its graph node in the graph's numbers, the lines that only
// fetch the step's arrays folded, and the profiler's time per op, linked to its nodes.
"use strict";
(() => {
  const { el, fmt } = TX.draw;

  async function showCompiled(root) {
    const [compiled, profiled] = await Promise.all([TX.api("/api/compiled"), TX.api("/api/profile")]);
    if (compiled.waiting) {
      root.querySelector("#compiled").replaceChildren(el("p", { class: "message" }, compiled.waiting));
      return;
    }
    const go = (id) => TX.showView("graph").then(() => TX.graph.reveal(id));
    const link = (id, text) => el("a", { href: "#", class: "node-link", "data-node": id,
                                         onclick: (e) => { e.preventDefault(); go(id); } }, text);
    const code = compiled.refused
      ? el("p", { class: "message" }, `tx.jit cannot record this function: ${compiled.refused}`)
      : el("div", {}, el("p", { class: "note" }, compiled.summary,
                         ". A line that runs an op (forward or backward) names its graph node, #k, as the graph does: click it."),
           el("pre", { class: "code compiled" }, codeLines(compiled.lines, go)));
    const rows = profiled.rows.map((r) => el("tr", {},
      el("td", {}, r.op), el("td", {}, r.calls), el("td", {}, fmt(r.forward_ms)), el("td", {}, fmt(r.backward_ms)),
      el("td", {}, (r.held_bytes / 1024).toFixed(1)),
      el("td", { class: "nodes" }, r.nodes.slice(0, 8).map((id) => [link(id, `#${id.slice(2)}`), " "]),
         r.nodes.length > 8 ? el("span", { class: "note" }, `and ${r.nodes.length - 8} more`) : null)));
    root.querySelector("#compiled").replaceChildren(
      el("div", { class: "columns" },
        el("div", {}, el("h3", {}, "the step as tx.jit replays it"), code),
        el("div", {}, el("h3", {}, "time and memory per op (tx.inspect.profile, with the explorer's instruments on)"),
           el("table", { class: "profile" },
             el("tr", {}, ["op", "calls", "forward ms", "backward ms", "held KiB", "graph nodes"].map((h) => el("th", {}, h))),
             rows))));
  }

  // The source's lines: each run of lines that only fetch arrays (V[k] = t3.data) folded into one
  // line you can open, each op's line a link to its node.
  function codeLines(lines, go) {
    const out = [];
    for (let i = 0; i < lines.length;) {
      if (lines[i].kind === "fetch") {
        let j = i;
        while (j < lines.length && lines[j].kind === "fetch") j++;
        out.push(el("details", { class: "fetches" },
          el("summary", {}, `${j - i} lines that fetch the step's arrays (V[k] = ….data): the arguments and the weights`),
          lines.slice(i, j).map((line) => el("span", { class: "line" }, line.text, "\n"))));
        i = j;
        continue;
      }
      const line = lines[i++];
      out.push(line.node
        ? el("a", { href: "#", class: `line linked ${line.kind}`, "data-node": line.node,
                    onclick: (e) => { e.preventDefault(); go(line.node); } }, line.text, "\n")
        : el("span", { class: "line" }, line.text, "\n"));
    }
    return out;
  }

  TX.views.compiled = showCompiled;
})();
