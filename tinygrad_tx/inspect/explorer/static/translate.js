// The translate view: a sentence's pieces, the beam search as a tree, and every attention map.
// The server translates (the CLI's own `translate`, with best.npz as it is on disk now) and records
// the search; this file draws. When the run writes a new best.npz, the view offers to translate again.
"use strict";
(() => {
  const { el, svg, fmt, heatmap, layout, edgePath, arrowDefs, key } = TX.draw;
  let version, waiting = false;  // best.npz's version; whether the last answer waited for a checkpoint

  function showTranslate(root, info) {
    const input = root.querySelector("#sentence"), beam = root.querySelector("#beam");
    if (!input.value) input.value = info.example || "";  // what the user already typed stays
    beam.max = info.max_beam;
    beam.value = info.beam;
    const form = root.querySelector("#translate-form");
    const news = root.querySelector("#translate-news");
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      news.hidden = true;
      const message = root.querySelector("#translate-message");
      message.hidden = true;
      try {
        const answer = await TX.api("/api/translate", { sentence: input.value, beam: Number(beam.value) });
        waiting = !!answer.waiting;
        root.querySelector("#translate-shows").textContent = answer.shows ? `with ${answer.shows.checkpoint}, step ${answer.shows.step}` : "";
        if (answer.waiting || answer.problem) throw new Error(answer.waiting || answer.problem);
        draw(root, answer);
      } catch (error) {
        message.textContent = error.message;
        message.hidden = false;
        root.querySelector("#translation").replaceChildren();
      }
    });
    TX.onNews((event) => {  // a new best.npz: what is drawn was translated by the old one
      const now = event.versions && event.versions["best.npz"];
      if (now && waiting) { waiting = false; form.requestSubmit(); }  // it waited for the first checkpoint: there now
      if (version !== undefined && now !== version && root.querySelector("#translation").childElementCount) {
        news.hidden = false;
        news.replaceChildren("The run wrote a new best.npz since this translation. ",
                             el("button", { onclick: () => form.requestSubmit() }, "translate again"));
      }
      version = now;
    });
  }

  function draw(root, t) {
    const out = root.querySelector("#translation");
    const whose = t.shows && t.shows.attention ? `: ${t.shows.attention}` : "";  // an ensemble's maps are one model's
    const alignment = el("div", { class: "alignment" });
    out.replaceChildren(
      el("h3", {}, "pieces the model reads"),
      pieces(t.pieces),
      el("h3", {}, `translation (beam ${t.beam}, ${(t.seconds * 1000).toFixed(0)} ms)`),
      el("p", {}, el("span", { id: "output", class: "output" }, t.output),
        t.output ? null : el("span", { class: "note" }, "(nothing: the model's best guess is to stop at once)")),
      el("h3", {}, `which source pieces each output piece looked at (cross-attention, last layer, mean of heads)${whose}`),
      el("div", { class: "pieces" }, t.output_pieces.map((p, i) => el("button", {
        class: "piece", onclick: () => align(alignment, t, i) }, p))),
      alignment,
      el("h3", {}, "beam search: every candidate of every step"),
      key("", [["hyp-live", "kept live for the next step"], ["hyp-finished", "finished: ended with <eos>; score / length penalty"],
               ["hyp-pruned", "pruned: not among the best"], ["hyp-winner", "the winner's path"]]),
      el("p", { class: "note" }, "each box: the piece added and the log-probability of the whole candidate so far"),
      tree(t),
      el("h3", {}, `attention, every layer and head${whose}`),
      attentionMaps(t.attention));
    align(alignment, t, 0);
  }

  // Pieces with their ids, the unknown ones (never seen in training: read as <unk>) flagged.
  function pieces(list) {
    const unknown = list.filter((p) => !p.known).length;
    return el("div", {}, el("div", { class: "pieces" }, list.map((p) => el("span", {
      class: `piece${p.known ? "" : " unknown"}`, title: p.known ? `id ${p.id}` : "never seen in training: read as <unk>",
    }, p.piece, el("sub", {}, p.id)))),
    unknown ? el("p", { class: "note unknown-note" }, `${unknown} piece${unknown > 1 ? "s" : ""} in red never occurred in training: the model reads <unk> there`) : null);
  }

  function align(holder, t, i) {
    const row = t.alignment[i] || [];
    holder.replaceChildren(el("span", { class: "note" }, `${t.output_pieces[i]} ←`),
      ...t.pieces.map((p, j) => el("span", { class: "piece", style: `background: rgba(40, 80, 180, ${row[j] ?? 0})`,
                                              title: fmt(row[j]) }, p.piece)),
      el("span", { class: "note" }, "(darker: more weight)"));
  }

  function tree(t) {
    const winners = new Set(t.winner);
    const nodes = [{ id: "root", lines: ["<bos>", "0"] }].concat(t.tree.map((n) => ({
      id: n.id, node: n, lines: [n.piece, n.final !== undefined ? `${fmt(n.score)} → ${fmt(n.final)}` : fmt(n.score)] })));
    const sized = nodes.map((n) => ({ id: n.id, width: 16 + 7 * Math.max(...n.lines.map((l) => l.length)), height: 32 }));
    const placed = layout(sized, t.tree.map((n) => [n.parent, n.id]), { rankdir: "LR", nodesep: 6, ranksep: 26 });
    const g = svg("g");
    for (const e of placed.edges) {
      g.append(svg("path", { class: `edge${winners.has(e.to) ? " winner" : ""}`, d: edgePath(e.points), "marker-end": "url(#arrow-tree)" }));
    }
    for (const n of nodes) {
      const p = placed.nodes[n.id];
      const cls = n.node ? `${n.node.state}${winners.has(n.id) ? " winner" : ""}` : "live winner";
      g.append(svg("g", { class: `hyp ${cls}`, "data-id": n.id, transform: `translate(${p.x - p.width / 2}, ${p.y - p.height / 2})` },
        svg("rect", { width: p.width, height: p.height, rx: 5 }),
        svg("text", { x: p.width / 2, y: 13, "text-anchor": "middle" }, n.lines[0]),
        svg("text", { x: p.width / 2, y: 26, "text-anchor": "middle", class: "sub" }, n.lines[1]),
        svg("title", {}, n.node ? `step ${n.node.step}, ${n.node.state}, log p ${fmt(n.node.score)}` : "the start")));
    }
    // drawn at full size, its labels as readable as the page's text, in a box that scrolls: a wide
    // beam makes a tall tree, and shrinking it to fit made its labels a few pixels high
    const picture = svg("svg", { class: "tree", width: placed.width + 4, height: placed.height + 4 }, arrowDefs("arrow-tree"), g);
    return el("div", { id: "beam-tree", class: "canvas" }, picture);
  }

  // Which axis is which, by the kind of attention (the server labels rows and columns with pieces).
  const AXES = { "encoder self": ["query: source", "key: source piece it looks at"],
                 "decoder self": ["query: output", "key: piece fed to the decoder"],
                 cross: ["query: output", "key: source piece it looks at"] };

  function attentionMaps(layers) {
    const holder = el("div", { id: "attention" });
    const show = (layer) => {
      for (const b of buttons) b.classList.toggle("active", b.dataset.name === layer.name);
      const [rowName, colName] = AXES[layer.kind];
      grid.replaceChildren(...layer.heads.map((rows, h) => el("figure", { class: "head" },
        el("figcaption", {}, `head ${h}`),
        heatmap(rows, { unit: true, rowLabels: layer.rows, colLabels: layer.cols, cell: 16, rowName, colName }))));
    };
    const buttons = layers.map((layer) => el("button", { "data-name": layer.name, onclick: () => show(layer) },
                                             `${layer.name} (${layer.kind})`));
    const grid = el("div", { class: "heads" });
    holder.append(el("div", { class: "toolbar" }, buttons),
                  el("p", { class: "note" }, "a row is one query position; its weights over the keys sum to 1"), grid);
    if (layers.length) show(layers[layers.length - 1]);
    return holder;
  }

  TX.views.translate = showTranslate;
  TX.translate = { pieces, AXES };
})();
