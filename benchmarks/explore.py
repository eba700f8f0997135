"""How live the explorer feels: page ready, a backward step, a beam-4 translation, a big graph.

    python benchmarks/explore.py [--run runs/grammar] [--chromium /usr/bin/chromium] [--skip-m] [--write-docs]

Measured in headless Chromium (Playwright), as a user meets them:
- page ready: from opening the address to the first view drawn, for the autograd
  walkthrough's step graph (the toy graph), for a run's page, and for the M config's
  training step (thousands of ops, drawn with its modules folded, as the page starts);
- a backward step, by module and by op: from the key press to the step's panel (with its
  heat-maps) drawn and painted; and a run's walk's last two steps, the optimizer's (the clip,
  the update);
- translation: a 10-word sentence with beam 4, the server's time and the page's.
Without --run, a tiny `grammar` run is trained first (its sentences are words). The M
config is measured twice: its step graph on a batch of 32 × 64 tokens (a (32, 64, 8000)
gradient of the logits), and an M-sized run (trained for 2 steps on a corpus of 7990 made-up
words, so that its vocabulary is ~8000) for its page and its update.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import tinygrad_tx as tx  # noqa: E402
import tinygrad_tx.functional as F  # noqa: E402
from autograd_walkthrough import inputs, loss_of  # noqa: E402
from models import Transformer  # noqa: E402
from tinygrad_tx.inspect.explorer import Explorer, explorer_for  # noqa: E402
from report import written_to_docs  # noqa: E402

SENTENCE = "the small cat eats the red apple and the big dog"  # 10 words of the grammar task (or near)
M = dict(d_model=256, heads=8, layers=3, d_ff=1024, vocab=8000, batch=32, length=64)  # benchmarks/train_step.py


def serve(explorer: Explorer) -> tuple[str, callable]:
    server = explorer.server("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/", server.shutdown


def page_ready(browser, url: str, repeat: int = 3) -> float:
    """Median seconds from goto to the first view drawn (a fresh tab each time)."""
    times = []
    for _ in range(repeat):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("body[data-ready]", timeout=120_000)
        times.append(time.perf_counter() - started)
        page.close()
    return statistics.median(times)


def opened(browser, url: str):
    """A fresh tab on `url`, its first view drawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector("body[data-ready]")
    return page


def painted(page) -> None:
    """Wait until the page has painted a frame with what is in it now (two animation frames: the
    next one starts after this one is painted)."""
    page.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def backward_steps(browser, url: str, level: str, steps: int = 10) -> float:
    """Median seconds from the key press to the step's panel drawn with its heat-maps and painted,
    walking by `level` ("module" or "op"); each press waits for the last step's paint."""
    page = opened(browser, url)
    page.click(f"#level-{level}")
    heading = "module step" if level == "module" else "backward step"
    times = []
    for n in range(1, steps + 1):
        painted(page)
        started = time.perf_counter()
        page.keyboard.press("ArrowRight")
        page.wait_for_selector(f"#panel h2:text-matches('^{heading} {n}[: ]')")
        page.wait_for_selector("#panel svg.heat")
        painted(page)
        times.append(time.perf_counter() - started)
    page.close()
    return statistics.median(times)


def floor(browser, url: str, repeat: int = 10) -> float:
    """Median seconds the same timing gives a key that does nothing: what the measurement itself takes."""
    page = opened(browser, url)
    times = []
    for _ in range(repeat):
        painted(page)
        started = time.perf_counter()
        page.keyboard.press("Shift")
        page.wait_for_selector("#panel")
        painted(page)
        times.append(time.perf_counter() - started)
    page.close()
    return statistics.median(times)


def update_steps(browser, url: str, last: int, repeat: int = 5) -> list[float]:
    """Median seconds from the key press to each of the walk's two optimizer steps drawn and painted
    (the clip, then the update), walking on from module step `last`, the last of backward (a fresh
    tab each time)."""
    times = []
    for _ in range(repeat):
        page = opened(browser, url)
        page.evaluate(f"TX.walk.stepTo({last})")
        page.wait_for_selector(f"#panel h2:text-matches('^module step {last} of')")
        for n in (last + 1, last + 2):
            painted(page)
            started = time.perf_counter()
            page.keyboard.press("ArrowRight")
            page.wait_for_selector(f"#panel h2:text-matches('^step {n}: ')")
            painted(page)
            times.append(time.perf_counter() - started)
        page.close()
    return [statistics.median(times[0::2]), statistics.median(times[1::2])]


def run_page(browser, explorer: Explorer, steps: int = 10) -> str:
    """A run's page in one line: page ready, a walk step at each level, the optimizer's two steps."""
    modules = len(explorer.get["/api/walk"]({})["modules"])
    url, stop = serve(explorer)
    ready = page_ready(browser, url)
    by_module, by_op = backward_steps(browser, url, "module", steps), backward_steps(browser, url, "op", steps)
    clip, update = update_steps(browser, url, modules)
    stop()
    return (f"page ready {ready:.2f} s; a backward step by module {by_module * 1e3:.0f} ms, by op {by_op * 1e3:.0f} ms; "
            f"the optimizer's two: clip {clip * 1e3:.0f} ms, update {update * 1e3:.0f} ms")


def unfold(browser, url: str, box: str | None) -> float:
    """Seconds from a click (on the box named `box`, or on "unfold all") to the graph redrawn."""
    page = opened(browser, url)
    before = page.locator("#graph .node").count()
    started = time.perf_counter()
    if box is None:
        page.click("#unfold")
    else:
        page.locator("#graph .node.module", has_text=box).first.dispatch_event("click")
    while page.locator("#graph .node").count() == before:  # (the page's CSP refuses wait_for_function's eval)
        page.wait_for_timeout(5)
    seconds = time.perf_counter() - started
    page.close()
    return seconds


def m_config_loss() -> tx.Tensor:
    rng = np.random.default_rng(0)
    model = Transformer(M["vocab"], M["vocab"], d_model=M["d_model"], num_heads=M["heads"],
                        num_encoder_layers=M["layers"], num_decoder_layers=M["layers"], d_ff=M["d_ff"])
    ids = lambda: rng.integers(3, M["vocab"], size=(M["batch"], M["length"]))  # noqa: E731
    return F.cross_entropy(model(ids(), ids()), ids())


def m_run(directory: Path) -> Path:
    """A run of the M config's size: 2 training steps (enough for a checkpoint with its optimizer's
    state) on made-up pairs, each sentence and its reverse, over 7990 words."""
    rng = np.random.default_rng(0)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "po", "si", "de", "gu", "ba", "fe", "zo", "xi", "wa", "qu"]
    words = sorted({"".join(rng.choice(syllables, 4)) for _ in range(40_000)})[:7990]
    lines = []
    for _ in range(12_000):
        sentence = list(rng.choice(words, rng.integers(8, 21)))
        lines.append(" ".join(sentence) + "\t" + " ".join(reversed(sentence)))
    (directory / "pairs.tsv").write_text("\n".join(lines) + "\n")
    out = directory / "m"
    subprocess.run([sys.executable, "-m", "models", "train", "--data", str(directory / "pairs.tsv"), "--tokenizer",
                    "word", "--out", str(out), "--d-model", str(M["d_model"]), "--num-heads", str(M["heads"]),
                    "--num-encoder-layers", str(M["layers"]), "--num-decoder-layers", str(M["layers"]),
                    "--d-ff", str(M["d_ff"]), "--no-tie-output", "--steps", "2", "--eval-every", "2",
                    "--batch-size", str(M["batch"]), "--max-len", str(M["length"]), "--no-jit"], check=True,
                   cwd=Path(__file__).resolve().parents[1], capture_output=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", help="a trained run directory (default: train a tiny grammar run)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    parser.add_argument("--skip-m", action="store_true", help="leave out the M config's graph")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from models.translate.explore import open_explorer

    run = args.run
    if run is None:
        run = str(Path(tempfile.mkdtemp()) / "grammar")
        subprocess.run([sys.executable, "-m", "models", "train", "--task", "grammar", "--out", run, "--steps", "300",
                        "--d-model", "64", "--num-encoder-layers", "2", "--num-decoder-layers", "2",
                        "--eval-every", "300"], check=True,
                       cwd=Path(__file__).resolve().parents[1], capture_output=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        x, weights, target = inputs()
        toy, stop_toy = serve(explorer_for(loss_of, x, *weights, target))
        print(f"toy step graph: page ready {page_ready(browser, toy):.2f} s (goal 1 s)")
        print(f"a backward step, key to panel painted: by module {backward_steps(browser, toy, 'module') * 1e3:.0f} ms, "
              f"by op {backward_steps(browser, toy, 'op') * 1e3:.0f} ms (goal 100 ms; a key that does nothing: "
              f"{floor(browser, toy) * 1e3:.0f} ms, two frames)")
        stop_toy()

        explorer = open_explorer(run)
        print(f"a trained {Path(run).name} run: {run_page(browser, explorer)}")
        server_times = [explorer.post["/api/translate"]({"sentence": SENTENCE, "beam": 4})["seconds"] for _ in range(5)]
        url, stop_run = serve(explorer)
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("body[data-ready]")
        page.click("#tab-translate")
        page.fill("#sentence", SENTENCE)
        started = time.perf_counter()
        page.click("#translate-form button")
        page.wait_for_selector("#attention svg.heat")
        in_page = time.perf_counter() - started
        print(f"beam-4 translation of a 10-word sentence: {statistics.median(server_times) * 1e3:.0f} ms on the "
              f"server, {in_page * 1e3:.0f} ms to the page with tree and attention drawn (goal 1 s)")
        stop_run()

        if not args.skip_m:
            started = time.perf_counter()
            explorer = explorer_for(m_config_loss)
            recorded = time.perf_counter() - started
            nodes = len(explorer.get["/api/graph"]({})["nodes"])
            url, stop_m = serve(explorer)
            print(f"M config step graph: {nodes} nodes, recorded with backward in {recorded:.1f} s; page ready "
                  f"(modules folded) {page_ready(browser, url, repeat=1):.2f} s (goal 2 s)")
            print(f"  a backward step: by module {backward_steps(browser, url, 'module', 6) * 1e3:.0f} ms, "
                  f"by op {backward_steps(browser, url, 'op', 6) * 1e3:.0f} ms (goal 100 ms)")
            print(f"  opening the encoder's box {unfold(browser, url, 'encoder'):.2f} s, "
                  f"every box {unfold(browser, url, None):.2f} s")
            stop_m()
            with tempfile.TemporaryDirectory() as scratch:  # (its checkpoints: 120 MB)
                made = m_run(Path(scratch))
                started = time.perf_counter()
                explorer = open_explorer(made)
                opened = time.perf_counter() - started
                vocabulary = len(json.loads((made / "vocab.json").read_text())["tgt"]["tokens"])
                print(f"M-sized run (vocabulary {vocabulary}), its step graph and update made in {opened:.1f} s "
                      f"before the address is printed: {run_page(browser, explorer)}")
        browser.close()


if __name__ == "__main__":
    with written_to_docs("explore"):
        main()
