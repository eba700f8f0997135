"""The explorer in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright.

Each test reads what the page shows and checks it against an independent truth: the graph's
keys and scales are drawn, every gradient the page shows is the `.grad` a plain backward gives,
a backward step opens the box holding its node and shows it readably, the compiled view and the
profile name nodes in the graph's numbers, attention opens into its parts, the tour visits its
stops, a translation is the CLI's, a page opened on a run while it trains follows it (and
translates as the CLI does at that moment), and a saved page opens from disk (and in a notebook's
iframe) with no request to any server. No test may leave an error in the browser's console.

On the way it takes a screenshot of each view: into docs/, which docs/inspect.md shows, when
TINYGRAD_TX_SCREENSHOTS=docs (how those pictures are made), else into a temporary folder, so that
running the tests never changes the checkout.

`.ci/run` installs chromium and playwright, and there (CI set) a missing browser fails the
test; elsewhere the tests skip and say what to install.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tinygrad_tx.inspect import retain_grads, tensors_in_graph, trace_backward
from tinygrad_tx.inspect.explorer import explorer_for

from .conftest import REPO, TINY, run_cli, serving

sys.path.insert(0, str(REPO / "examples"))
from autograd_walkthrough import inputs, loss_of  # noqa: E402

CHROMIUM = next(filter(None, (shutil.which(name) for name in ("chromium", "chromium-browser"))), None)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
SCREENSHOTS_TO_DOCS = os.environ.get("TINYGRAD_TX_SCREENSHOTS") == "docs"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where screenshots go: docs/ when asked for, else a temporary folder."""
    return REPO / "docs" if SCREENSHOTS_TO_DOCS else tmp_path_factory.mktemp("screenshots")


def _missing() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed (pip install playwright)"
    if CHROMIUM is None:
        return "no chromium on PATH (Debian/Ubuntu: apt-get install chromium)"
    return ""


if _missing():
    if os.environ.get("CI"):
        raise RuntimeError(f"the browser tests must run in CI, but {_missing()}: see .ci/run")
    pytest.skip(_missing(), allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def new_page(browser, width: int = 1400, height: int = 900):
    """A fresh tab that keeps every console error and uncaught exception in `page.errors`."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(90_000)  # a busy 2-core machine: the server computes one view at a time
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return page


@pytest.fixture
def page(browser):
    page = new_page(browser)
    yield page
    page.close()


@pytest.fixture(scope="module")
def walkthrough_url():
    x, weights, target = inputs()
    with serving(explorer_for(loss_of, x, *weights, target)) as url:
        yield url


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]", timeout=30000)


def open_translate(page) -> None:
    """The translate tab, once it is drawn: its form filled with the run's example sentence
    (typing before that would be overwritten by the example, or submit an unwired form)."""
    page.click("#tab-translate")
    expect(page.locator("#sentence")).not_to_have_value("", timeout=90_000)


def panel_heading(page) -> str:
    return page.inner_text("#panel h2")


# -- the graph: keys, scales, numbers -------------------------------------------------------------

def test_graph_keys_scales_and_one_numbering(page, walkthrough_url, shots):
    open_page(page, walkthrough_url)
    key = page.inner_text("#graph .key")
    for words in ("leaf", "constant", "module call", "backward: this step", "gets a gradient", "visited"):
        assert words in key
    edges = page.locator("#graph path.edge")
    assert edges.count() > 20 and edges.first.get_attribute("marker-end") == "url(#arrow-graph)"
    assert page.locator("#arrow-graph path.arrowhead").count() == 1

    page.locator("#graph .node.op", has_text="Softmax").click()
    page.wait_for_selector("#panel pre.source-backward")
    assert "def backward" in page.inner_text("#panel pre.source-backward")
    assert "walkthrough.py" in page.inner_text("#panel .frame")  # the line that made it
    assert page.locator("#panel .frame, #panel .caller").count() == 2  # the user's two frames, no more
    math = page.inner_text("#panel .doc pre.math")  # the op's own text, its forward and gradient, set as math
    assert math.startswith("y = exp(x - max x)") and "\ndx = " in math
    value = page.locator("#panel section", has_text="value").first
    ticks = value.locator("svg.heat text.tick").all_text_contents()
    assert len(ticks) == 3 and ticks[1] == "0" and float(ticks[2]) > 0  # the colour bar's numbers
    assert "axis 1 (3)" in value.inner_text() and "axis 2 (3)" in value.inner_text()  # the axes, named
    value.locator("canvas.cells").first.hover(position={"x": 1, "y": 1})
    assert re.fullmatch(r"row 0, column 0: \S+", value.locator(".readout").inner_text())  # a hover read-out
    cells = value.locator("canvas.cells").first
    box = cells.bounding_box()
    cells.hover(position={"x": box["width"] - 1, "y": box["height"] - 1})  # the last cell, where the pointer is
    assert value.locator(".readout").inner_text() == readings(value)[-1][-1]
    page.screenshot(path=str(shots / "explorer_graph.png"))

    page.eval_on_selector("#panel", "p => p.scrollTop = p.scrollHeight")
    page.locator("#graph .node.leaf", has_text="W_q").click()
    page.wait_for_selector("#panel h2:has-text('W_q')")
    assert page.eval_on_selector("#panel", "p => p.scrollTop") == 0  # each node's panel starts at its top

    engine = traced_steps()
    page.click("#level-op")  # the walk by op: step k visits node #k
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_selector("#back-pos:text-matches('^step 3 of')")
    page.wait_for_selector("#panel h2:has-text('backward step 3')")
    current = page.locator("#graph .node.current")
    assert current.get_attribute("data-id") == f"op{engine[2].number}" == "op3"  # step k visits node #k
    assert current.text_content().startswith(f"#3 {engine[2].op}")
    page.screenshot(path=str(shots / "explorer_backward.png"))

    page.click("#tab-compiled")
    page.wait_for_selector("pre.compiled")
    assert page.locator("details.fetches").count() == 1 and not page.eval_on_selector("details.fetches", "d => d.open")
    code = page.inner_text("pre.compiled")
    assert "backward #1 Mul" in code and "step 0:" not in code  # the graph's numbers, no second numbering
    page.screenshot(path=str(shots / "explorer_compiled.png"))
    line = page.locator("pre.compiled a.linked.backward", has_text="Softmax").first
    number = re.search(r"backward #(\d+) Softmax", line.inner_text())[1]
    line.click()
    page.wait_for_selector(f"#graph .node.selected[data-id='op{number}']")
    assert panel_heading(page) == f"#{number} Softmax"
    page.click("#tab-compiled")
    link = page.locator("table.profile td.nodes a", has_text=f"#{number}")
    assert link.count() == 1  # the profile names Softmax's node as the graph does
    link.click()
    page.wait_for_selector(f"#graph .node.selected[data-id='op{number}']")
    assert page.errors == []


def traced_steps():
    """The nodes the engine's backward visits, in order, on fresh tensors."""
    x, weights, target = inputs()
    loss = loss_of(x, *weights, target)
    with trace_backward() as trace:
        loss.backward()
    return trace.steps


def true_gradients() -> dict[str, np.ndarray]:
    """Every tensor's `.grad` after a plain backward of the same step (retain_grad on the graph),
    by the page's node id: an op's by the step backward visits it at, a leaf's by its name."""
    x, weights, target = inputs()
    loss = loss_of(x, *weights, target)
    retain_grads(loss)
    tensors = {id(t.grad_fn): t for t in tensors_in_graph(loss) if t.grad_fn is not None}
    with trace_backward() as trace:
        loss.backward(retain_graph=True)
    grads = {f"op{s.number}": tensors[id(s.node)].grad.numpy() for s in trace.steps}
    grads.update((t.name, t.grad.numpy()) for t in (x, *weights))
    return grads


def readings(section) -> list[list[str]]:
    """The read-out of each cell of a section's first heat-map (what pointing at cell (i, j) shows), row by row."""
    return section.locator("canvas.cells").first.evaluate(
        "c => Array.from({length: c.height}, (_, i) => Array.from({length: c.width}, (_, j) => c.reading(i, j)))")


def shown_cells(section) -> np.ndarray:
    """The numbers a heat-map shows, read back from its cells (row i, column j: value)."""
    cells = readings(section)
    shown = np.zeros((len(cells), len(cells[0])))
    for i, row in enumerate(cells):
        for j, read in enumerate(row):
            assert re.fullmatch(rf"row {i}, column {j}: \S+", read), read
            shown[i, j] = float(read.rsplit(": ", 1)[1])
    return shown


def test_every_gradient_the_page_shows_equals_grad(page, walkthrough_url):
    truth = true_gradients()
    open_page(page, walkthrough_url)
    page.click("#unfold")
    nodes = page.locator("#graph .node.op, #graph .node.leaf")
    ids = nodes.evaluate_all("gs => gs.map(g => g.getAttribute('data-id'))")
    checked = 0
    for nid in ids:
        node = page.locator(f"#graph .node[data-id='{nid}']")
        node.click()
        title = node.locator("text.title").text_content()
        heading = title if nid.startswith("op") else f"{title} (leaf, requires grad)"
        page.wait_for_selector(f"#panel h2:text-is('{heading}')")
        grad = page.locator("#panel section", has_text="gradient after backward")
        expected = truth[nid if nid.startswith("op") else title]
        plane = np.atleast_2d(expected[(0,) * max(expected.ndim - 2, 0)])  # the slice a heat-map shows
        np.testing.assert_allclose(shown_cells(grad), plane, rtol=2e-3, atol=1e-12, err_msg=f"{nid} {title}")
        norm = float(re.search(r"‖·‖ (\S+)", grad.locator(".stats").inner_text())[1])
        assert norm == pytest.approx(np.linalg.norm(expected), rel=2e-3)
        checked += 1
    assert checked == len(truth) == 26  # 21 ops and 5 leaves
    page.click("#level-op")
    for step in range(1, 22):  # and the gradient arriving at each step of the walk is that node's .grad
        page.keyboard.press("ArrowRight")
        page.wait_for_selector(f"#panel h2:has-text('backward step {step}:')")
        arriving = page.locator("#panel section", has_text="gradient arriving")
        expected = truth[f"op{step}"]
        plane = np.atleast_2d(expected[(0,) * max(expected.ndim - 2, 0)])
        np.testing.assert_allclose(shown_cells(arriving), plane, rtol=2e-3, atol=1e-12, err_msg=f"step {step}")
    assert page.errors == []


# -- a run: the walk, attention's parts, the tour -------------------------------------------------

def test_a_backward_step_opens_the_box_of_its_node_and_shows_it_readably(page, run_url, run_explorer):
    graph = run_explorer.get["/api/graph"]({})
    scoped = {n["id"] for n in graph["nodes"] if n["kind"] == "op" and n["scope"]}
    open_page(page, run_url)
    assert page.locator("#graph .node.module").count() >= 2  # it starts folded
    box = page.locator("#graph").bounding_box()
    page.click("#level-op")
    for step in range(1, 13):
        page.keyboard.press("ArrowRight")
        page.wait_for_selector(f"#panel h2:has-text('backward step {step}:')")
        current = page.locator("#graph .node.current")
        assert current.get_attribute("data-id") == f"op{step}"  # the node itself, not the box holding it
        seen = current.locator("rect").bounding_box()
        assert box["x"] <= seen["x"] and seen["x"] + seen["width"] <= box["x"] + box["width"]
        assert box["y"] <= seen["y"] and seen["y"] + seen["height"] <= box["y"] + box["height"]
        assert seen["height"] >= 0.85 * 36  # at a readable scale (a node is 36 px high at 1)
        assert page.eval_on_selector("#panel", "p => p.scrollTop") == 0
    assert "op5" in scoped  # among them, nodes deep inside the decoder's boxes
    assert page.errors == []


def test_attention_opens_into_its_parts_and_steps(page, run_url, run_explorer, shots):
    cross = next(n["id"] for n in run_explorer.get["/api/graph"]({})["nodes"] if n["title"] == "Attention"
                 and n["number"] < 30)  # the decoder's cross-attention
    open_page(page, run_url)
    page.evaluate(f"TX.graph.reveal('{cross}')")
    page.click("#open-parts")
    page.wait_for_selector(".parts-canvas svg .node")
    checks = page.locator(".check-item").all_inner_texts()
    assert len(checks) == 4 and all(float(c.rsplit(" ", 1)[1]) < 1e-5 for c in checks), checks
    for role in ("scores = q kᵀ", "masked", "weights = softmax(masked)", "out = weights @ v"):
        assert page.locator(".parts-canvas").get_by_text(role, exact=True).count() == 1
    for step in range(1, 4):
        page.click(".parts-next")
        page.wait_for_selector(f".parts-detail h3:has-text('step {step}:')")
    assert page.locator(".parts-canvas .node.current").count() == 1
    page.locator(".parts-canvas .node", has_text="weights = softmax").first.click()
    page.wait_for_selector(".parts-detail h3:has-text('weights = softmax')")
    assert page.locator(".parts-detail svg.heat").count() == 2  # its value and its gradient
    page.screenshot(path=str(shots / "explorer_parts.png"))
    assert page.errors == []


def test_the_guided_tour_visits_each_stop(page, run_url, run_explorer, shots):
    stops = run_explorer.get["/api/tour"]({})["stops"]
    assert 10 <= len(stops) <= 14
    open_page(page, run_url)
    assert "new here" in page.inner_text("#tour-start")
    page.click("#tour-start")
    for k, stop in enumerate(stops, 1):
        page.wait_for_selector(f"#tour .note:has-text('stop {k} of {len(stops)}')")
        assert page.inner_text("#tour .tour-text") == stop["text"]
        mark = "current" if stop["phase"] == "backward" and stop["node"].startswith("op") else "selected"
        if stop["phase"] == "update":  # the last: the update view, at its parameter (test_browser_update.py)
            page.wait_for_selector(f"#view-update tr.chosen[data-name='{stop['param']}']")
        else:
            page.wait_for_selector(f"#graph .node.{mark}[data-id='{stop['node']}']")  # shown itself, not its box
        if k == 3:
            page.screenshot(path=str(shots / "explorer_tour.png"))
        if k < len(stops):
            page.click(".tour-next")
    assert page.is_disabled(".tour-next")
    assert page.errors == []


# -- translate and training -----------------------------------------------------------------------

def test_translate_and_training_views(page, run_url, tiny_run, shots):
    sentence = "abcdefghij"
    cli = run_cli("translate", "--run", str(tiny_run), "--beam", "4", sentence)
    assert cli.returncode == 0, cli.stderr
    open_page(page, run_url)
    page.locator("#graph .node.module", has_text="decoder").first.click()  # a box opens into its parts
    page.wait_for_selector("#graph .node.module >> text=decoder.layers.0")

    open_translate(page)
    page.fill("#sentence", "")
    page.click("#translate-form button")
    page.wait_for_selector("#translate-message:not([hidden])")
    assert "empty" in page.inner_text("#translate-message")
    page.fill("#sentence", sentence)
    page.fill("#beam", "4")
    page.click("#translate-form button")
    page.wait_for_selector("#output")
    assert page.inner_text("#output") == cli.stdout.strip()
    assert page.inner_text("#translate-shows") == "with best.npz, step 300"
    assert page.locator("#beam-tree .hyp.winner").count() >= 2
    assert page.locator("#beam-tree path.edge").first.get_attribute("marker-end") == "url(#arrow-tree)"
    assert "pruned" in page.inner_text("#translation .key")
    heads = page.locator("#attention figure.head")
    assert heads.count() == 2
    assert heads.first.locator("text.tick").all_text_contents() == ["0", "0.5", "1"]
    assert "query: output" in heads.first.inner_text() and "key: source" in heads.first.inner_text()
    page.screenshot(path=str(shots / "explorer_translate.png"), full_page=True)

    page.click("#tab-training")
    page.wait_for_selector("#curves svg.chart polyline")
    page.wait_for_selector("#ckpt-attention svg.heat")
    loss = page.locator("#curves figure.chart").first
    assert len(loss.locator("text.tick").all_text_contents()) >= 5  # ticks on both axes, not just the ends
    assert "training step" in loss.inner_text()
    legend_y = float(loss.locator("text.legend").first.get_attribute("y"))
    axes = loss.locator("line.axis").evaluate_all("ls => ls.map(l => l.getAttribute('y1'))")
    top_of_plot = min(float(y) for y in axes)
    assert legend_y < top_of_plot  # the legend above the plot, never under its lines
    box = loss.locator("svg").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    assert re.match(r"step \d+: loss \S+", loss.locator(".readout").inner_text())  # the hover read-out
    assert page.locator("#ckpt-slider").get_attribute("max") == "4"  # 3 snapshots, last and best
    page.fill("#ckpt-sentence", "ab!c")
    page.press("#ckpt-sentence", "Enter")
    page.wait_for_selector("#ckpt-attention .piece.unknown")  # the checkpoint view flags unknown characters
    assert page.inner_text("#ckpt-attention .piece.unknown").startswith("!")
    page.screenshot(path=str(shots / "explorer_training.png"), full_page=True)
    assert page.errors == []


def test_the_narrow_layout_clips_nothing(browser, run_url):
    page = new_page(browser, 1024, 700)
    try:
        open_page(page, run_url)
        page.click("#tab-compiled")
        page.wait_for_selector("table.profile td.nodes a")
        assert page.evaluate("document.documentElement.scrollWidth") <= 1024
        table = page.locator("table.profile").bounding_box()
        assert table["x"] + table["width"] <= 1024
        assert page.errors == []
    finally:
        page.close()


def test_two_tabs_at_once(browser, run_url):
    first, second = new_page(browser), new_page(browser)
    try:
        open_page(first, run_url)
        open_page(second, run_url)
        for tab in (first, second):
            open_translate(tab)
            tab.fill("#sentence", "abc")
            tab.click("#translate-form button")
        for tab in (first, second):
            tab.wait_for_selector("#output")
        assert first.inner_text("#output") == second.inner_text("#output")
    finally:
        first.close()
        second.close()


# -- live: a page opened on a run before its first validation ----------------------------------------

def test_a_page_opened_on_a_training_run_follows_it(browser, tmp_path):
    from models.translate.explore import open_explorer

    run = tmp_path / "live"
    settings = [*TINY]
    settings[settings.index("--steps") + 1], settings[settings.index("--eval-every") + 1] = "400", "200"
    train = subprocess.Popen([sys.executable, "-m", "models", "train", "--task", "reverse", "--out", str(run),
                              "--snapshots", *settings], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    page = new_page(browser)
    try:
        wait_for(lambda: (run / "valid.tsv").exists() and (run / "metrics.jsonl").exists(), train)
        train.send_signal(signal.SIGSTOP)  # the run's first second, held there while the page opens
        with serving(open_explorer(run)) as url:
            open_page(page, url)
            assert "first validation" in page.inner_text("#graph-waiting")
            open_translate(page)
            page.click("#translate-form button")
            page.wait_for_selector("#translate-message:not([hidden])")
            assert "first validation" in page.inner_text("#translate-message")
            page.click("#tab-training")
            page.wait_for_selector("#ckpt-name:text('no checkpoint yet')")

            train.send_signal(signal.SIGCONT)
            wait_for(lambda: (run / "snapshots" / "step_000200.npz").exists(), train)
            train.send_signal(signal.SIGSTOP)  # after its first validation: the run as it is at that moment
            expect(page.locator("#ckpt-slider")).to_have_attribute("max", "2")  # its snapshot, last and best
            validation = page.locator("#curves figure.chart").nth(2)
            expect(validation.locator("circle")).to_have_count(2)  # one validation: a visible point a series
            assert validation.locator("polyline").count() == 0
            assert_translates_as_the_cli(page, run)
            page.click("#tab-graph")
            page.wait_for_selector("#graph-shows:text('last.npz, step 200')")
            assert page.locator("#graph .node").count() > 3

            train.send_signal(signal.SIGCONT)
            assert train.wait(timeout=300) == 0, train.stderr.read()
            page.click("#tab-training")
            expect(page.locator("#ckpt-slider")).to_have_attribute("max", "3")  # 2 snapshots, last and best
            page.wait_for_selector("#ckpt-name:text-matches('^best.npz')")
            assert_translates_as_the_cli(page, run)
            page.click("#tab-graph")
            page.wait_for_selector("#graph-shows:text('last.npz, step 400')")  # the graph, of the new weights
        assert page.errors == []
    finally:
        train.kill()
        page.close()


def wait_for(condition, process, timeout: float = 120) -> None:
    started = time.monotonic()
    while not condition():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() - started < timeout
        time.sleep(0.02)


def assert_translates_as_the_cli(page, run: Path, sentence: str = "abcdefgh") -> None:
    cli = run_cli("translate", "--run", str(run), "--beam", "4", sentence)
    assert cli.returncode == 0, cli.stderr
    page.click("#tab-translate")
    page.fill("#sentence", sentence)
    page.fill("#beam", "4")
    page.click("#translate-form button")
    page.wait_for_selector(f"#output:text-is('{cli.stdout.strip()}')" if cli.stdout.strip() else "#translation .note")


# -- a page to keep ---------------------------------------------------------------------------------

def opened_from_disk(browser, path: Path):
    """A tab on `path` (file://) that records every request it makes."""
    page = new_page(browser)
    page.requests = []
    page.on("request", lambda r: page.requests.append(r.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready]", timeout=30000)
    return page


def test_a_saved_page_opens_from_disk_with_no_request(browser, tiny_run, tmp_path, shots):
    from models.translate.explore import save_page

    save_page(tiny_run, tmp_path / "run.html")
    page = opened_from_disk(browser, tmp_path / "run.html")
    try:
        assert not page.locator("#saved-note").is_hidden()
        page.keyboard.press("ArrowRight")
        page.wait_for_selector("#panel h2:has-text('module step 1')")
        page.click("#level-op")
        page.wait_for_selector("#panel h2:has-text('backward step 1')")
        page.locator("#graph .node.module", has_text="decoder").first.click()
        page.wait_for_selector("#graph .node.module >> text=decoder.layers.0")
        open_translate(page)
        page.click("#translate-form button")
        page.wait_for_selector("#output")  # the example sentence's translation, saved
        page.fill("#sentence", "abc")
        page.click("#translate-form button")
        page.wait_for_selector("#translate-message:has-text('saved page')")
        page.click("#tab-training")
        page.wait_for_selector("#ckpt-attention svg.heat")
        page.click("#tour-start")
        page.wait_for_selector("#tour:not([hidden])")
        page.screenshot(path=str(shots / "explorer_saved.png"))
        assert page.requests == [(tmp_path / "run.html").resolve().as_uri()]  # the file itself, nothing else
        assert page.errors == []
    finally:
        page.close()


def test_a_saved_function_page_opens_from_disk_and_in_a_notebook(browser, tmp_path):
    import tinygrad_tx as tx
    from IPython.core.formatters import DisplayFormatter

    x, weights, target = inputs()
    saved = tx.inspect.explore(loss_of, x, *weights, target, html=tmp_path / "step.html")
    page = opened_from_disk(browser, tmp_path / "step.html")
    try:
        page.locator("#graph .node.op", has_text="Softmax").click()
        page.wait_for_selector("#panel pre.source-backward")
        page.keyboard.press("ArrowRight")
        page.wait_for_selector("#panel h2:has-text('module step 1')")
        assert page.requests == [(tmp_path / "step.html").resolve().as_uri()] and page.errors == []
    finally:
        page.close()
    formats, _ = DisplayFormatter().format(saved)  # what Jupyter puts in the cell's output
    notebook = tmp_path / "notebook.html"
    notebook.write_text(f"<!doctype html><html><body><div class='output'>{formats['text/html']}</div></body></html>")
    page = new_page(browser)
    page.requests = []
    page.on("request", lambda r: page.requests.append(r.url))
    try:
        page.goto(notebook.as_uri())
        frame = page.frame_locator("iframe")
        frame.locator("body[data-ready]").wait_for(timeout=30000)
        frame.locator("#graph .node.op", has_text="Softmax").click()
        frame.locator("#panel pre.source-backward").wait_for()
        assert all(url in (notebook.as_uri(), "about:srcdoc") for url in page.requests), page.requests
        assert page.errors == []
    finally:
        page.close()
