"""The explorer in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright.

It clicks a node and finds its op's backward source in the panel, steps backward three
times and finds highlighted the node the engine visits third, types a sentence and finds
the translation the CLI prints, and sees no error in the browser's console. On the way it
takes a screenshot of each view: into docs/, which the README shows, when
TINYGRAD_TX_SCREENSHOTS=docs (how those pictures are made), else into a temporary folder,
so that running the tests never changes the checkout.

`.ci/run` installs chromium and playwright, and there (CI set) a missing browser fails the
test; elsewhere the tests skip and say what to install.
"""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from tinygrad_tx.inspect import trace_backward
from tinygrad_tx.inspect.explorer import explorer_for

from .conftest import REPO, run_cli, serving

sys.path.insert(0, str(REPO / "examples"))
from autograd_walkthrough import inputs, loss_of  # noqa: E402

CHROMIUM = next(filter(None, (shutil.which(name) for name in ("chromium", "chromium-browser"))), None)
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

from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh tab that keeps every console error and uncaught exception in `page.errors`."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(90_000)  # a busy 2-core machine: the server computes one view at a time
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    page.close()


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]", timeout=30000)


def open_translate(page) -> None:
    """The translate tab, once it is drawn: its form filled with the run's example sentence
    (typing before that would be overwritten by the example, or submit an unwired form)."""
    from playwright.sync_api import expect

    page.click("#tab-translate")
    expect(page.locator("#sentence")).not_to_have_value("", timeout=90_000)


def test_graph_node_panel_and_backward_steps(page, shots):
    x, weights, target = inputs()
    with serving(explorer_for(loss_of, x, *weights, target)) as url:
        open_page(page, url)
        softmax = page.locator("#graph .node.op", has_text="Softmax")
        softmax.click()
        page.wait_for_selector("#panel pre.source-backward")
        assert "def backward" in page.inner_text("#panel pre.source-backward")
        assert "walkthrough.py" in page.inner_text("#panel .frame")  # the line that made it
        page.screenshot(path=str(shots / "explorer_graph.png"))

        engine = traced_third_step()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        page.wait_for_selector("#back-pos:text-matches('^step 3 of')")
        page.wait_for_selector("#panel h2:has-text('backward step 3')")
        current = page.locator("#graph .node.current")
        assert current.count() == 1
        assert current.get_attribute("data-id") == f"op{engine.number}"
        assert current.text_content().startswith(f"#{engine.number} {engine.op}")
        page.screenshot(path=str(shots / "explorer_backward.png"))
        page.click("#back-prev")
        page.wait_for_selector("#back-pos:text-matches('^step 2 of')")

        page.click("#tab-compiled")
        line = page.locator("pre.compiled a.linked", has_text="Softmax").first
        target = line.get_attribute("data-node")
        page.screenshot(path=str(shots / "explorer_compiled.png"))
        line.click()
        page.wait_for_selector(f"#graph .node.selected[data-id='{target}']")
        assert page.inner_text("#panel h2").endswith("Softmax")
    assert page.errors == []


def traced_third_step():
    """The third node the engine's backward visits, on fresh tensors."""
    x, weights, target = inputs()
    loss = loss_of(x, *weights, target)
    with trace_backward() as trace:
        loss.backward()
    return trace.steps[2]


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
    assert page.locator("#beam-tree .hyp.winner").count() >= 2
    assert page.locator("#attention figure.head").count() == 2
    page.screenshot(path=str(shots / "explorer_translate.png"), full_page=True)

    page.click("#tab-training")
    page.wait_for_selector("#curves svg.chart polyline")
    page.wait_for_selector("#ckpt-attention svg.heat")
    page.screenshot(path=str(shots / "explorer_training.png"), full_page=True)
    assert page.errors == []


def test_two_tabs_at_once(browser, run_url):
    first, second = browser.new_page(), browser.new_page()
    for tab in (first, second):
        tab.set_default_timeout(90_000)
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
