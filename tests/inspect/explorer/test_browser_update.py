"""The step's end in a real browser (headless Chromium, as test_browser.py drives it): the update view's
numbers are those of a step rebuilt here with optim.Adam, the walk steps on into the clip and the
update, the tour ends there, the training view draws each layer over training, a saved page holds
all of it; and the defects found beside them (the compiled view on a run, the header's dropout, a
translation waiting for a checkpoint that appeared, a chart of one validation, a damaged last.npz).
Screenshots at 1400×900 and 1024×700 (into docs/ with TINYGRAD_TX_SCREENSHOTS=docs)."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from .conftest import serving
from .test_browser import (SCREENSHOTS_TO_DOCS, browser, new_page, open_page, open_translate, page,  # noqa: F401
                           shown_cells)
from .test_update import rebuilt_step

SIZES = [(1400, 900), (1024, 700)]
IN_DOCS = {"explorer_update_1400.png", "explorer_layers_1024.png"}
"""The two of these screenshots docs/inspect.md shows (the others go to a temporary folder)."""


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    from .conftest import REPO

    return REPO / "docs" if SCREENSHOTS_TO_DOCS else tmp_path_factory.mktemp("screenshots")


def shot(shots, tmp_path, name: str):
    return str((shots if name in IN_DOCS or not SCREENSHOTS_TO_DOCS else tmp_path) / name)


def fits(page, width: int) -> None:
    """Nothing runs off the page's right edge."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width,height", SIZES)
def test_the_update_view_shows_adams_own_step(browser, run_url, run_explorer, tiny_run, shots, tmp_path, width, height):
    from models.translate.explore import RunViews
    from models.translate.explore_files import read_run_files

    views = RunViews(read_run_files(tiny_run))
    views.record()
    truth = rebuilt_step(tiny_run, views.batch, views.files.settings["settings"])
    page = new_page(browser, width, height)
    try:
        open_page(page, run_url)
        page.click("#tab-update")
        page.wait_for_selector("#update-detail svg.heat")
        facts = page.inner_text("#update .facts")
        assert "1.500e-4" in facts and "Adam, t = 300 → 301" in facts and "every gradient is scaled by" in facts
        before, after = truth["loss"]
        assert f"{before:.4f} to {after:.4f}: {'down' if after < before else 'up'} by" in facts
        page.click("table.params tr[data-name='out.weight']")
        page.wait_for_selector("#update-detail h3:has-text('out.weight')")
        dw = page.locator("#update-detail figure.update-array", has_text="Δw = w after")
        np.testing.assert_allclose(shown_cells(dw), truth["dw"]["out.weight"], rtol=2e-3, atol=1e-9)
        ratio = np.linalg.norm(truth["dw"]["out.weight"]) / np.linalg.norm(truth["before"]["out.weight"])
        shown = float(page.locator("table.params tr[data-name='out.weight'] td").nth(5).inner_text())
        assert shown == pytest.approx(ratio, rel=2e-3)
        assert page.locator("#update-detail figure.update-array").count() == 5  # g, Δw, m, v, w
        fits(page, width)
        assert page.evaluate("(e => e.scrollWidth <= e.clientWidth)(document.querySelector('.update-table'))")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=shot(shots, tmp_path, f"explorer_update_{width}.png"))
        assert page.errors == []
    finally:
        page.close()


def test_the_walk_steps_into_the_clip_and_the_update(page, run_url, run_explorer):
    update = run_explorer.get["/api/update"]({})
    walk = run_explorer.get["/api/walk"]({})
    backward, modules = len(walk["steps"]), len(walk["modules"])
    open_page(page, run_url)
    page.evaluate(f"TX.walk.setLevel('op', {backward})")
    page.wait_for_selector(f"#panel h2:has-text('backward step {backward}:')")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector(f"#panel h2:text-is('step {backward + 1}: clipping the gradients')")
    assert f"global norm is {update['clip']['norm']:.3g}" in page.inner_text("#panel")
    assert page.inner_text("#back-pos") == f"step {backward + 1} of {backward + 2}"
    page.keyboard.press("ArrowRight")
    page.wait_for_selector(f"#panel h2:text-is('step {backward + 2}: Adam\\'s update')")
    page.keyboard.press("ArrowRight")  # the end: it stays
    assert page.inner_text("#back-pos") == f"step {backward + 2} of {backward + 2}"
    page.evaluate("TX.walk.setLevel('module')")  # the module level's walk ends in the same two steps
    page.wait_for_selector(f"#panel h2:text-is('step {modules + 2}: Adam\\'s update')")
    assert page.inner_text("#back-pos") == f"module step {modules + 2} of {modules + 2}"
    page.keyboard.press("ArrowLeft")
    page.wait_for_selector(f"#panel h2:text-is('step {modules + 1}: clipping the gradients')")
    page.click("#panel button:has-text('open the update view')")
    page.wait_for_selector("#update-detail svg.heat")
    assert page.errors == []


def test_the_tour_ends_on_the_update(page, run_url, run_explorer):
    last = run_explorer.get["/api/tour"]({})["stops"][-1]
    open_page(page, run_url)
    page.click("#tour-start")
    page.wait_for_selector("#tour .tour-next")
    while not page.is_disabled(".tour-next"):
        page.click(".tour-next")
    page.wait_for_selector(f"#view-update tr.chosen[data-name='{last['param']}']")
    assert page.inner_text("#tour .tour-text") == last["text"] and not page.locator("#tour").is_hidden()
    page.click(".tour-prev")  # back into the graph
    page.wait_for_selector("#view-graph:not([hidden])")
    assert page.errors == []


@pytest.mark.parametrize("width,height", SIZES)
def test_the_training_view_draws_each_layer_over_training(browser, run_url, run_explorer, shots, tmp_path, width,
                                                          height):
    stats = run_explorer.get["/api/layer_stats"]({})
    page = new_page(browser, width, height)
    try:
        open_page(page, run_url)
        page.click("#tab-training")
        page.wait_for_selector("#layer-stats svg.layer-grid")
        grid = page.locator("#layer-stats svg.layer-grid")
        assert grid.locator("text.layer-name").count() == len(stats["layers"]) == 24
        assert grid.locator("text.title").all_text_contents() == ["‖gradient‖", "‖weight‖", "‖Δw‖ / ‖w‖ per step"]
        bars = grid.locator("text.bar-tick").all_text_contents()  # each colour bar's powers of ten
        assert len(bars) >= 6 and all(re.fullmatch(r"1e-\d+|0\.0*1|10*", t) for t in bars), bars
        cell = grid.locator("rect.cell[data-read^='out at step 300: ‖gradient‖']")
        cell.hover()
        assert page.inner_text("#layer-stats .readout").startswith("out at step 300: ‖gradient‖")
        out = next(layer for layer in stats["layers"] if layer["name"] == "out")
        assert float(page.inner_text("#layer-stats .readout").rsplit(" ", 1)[1]) == pytest.approx(out["g_norm"][-1], rel=1e-3)
        grid.locator("text.layer-name", has_text=re.compile(r"^encoder\.layers\.0\.ff\.linear1$")).click()
        page.wait_for_selector("#layer-stats h3:has-text('encoder.layers.0.ff.linear1:')")
        assert page.locator("#layer-stats svg.histogram").count() == 4  # weight and bias, values and gradients
        assert page.locator("#layer-stats svg.histogram rect.bin").count() > 100
        fits(page, width)
        assert page.evaluate("(e => e.scrollWidth <= e.clientWidth)(document.querySelector('.layer-stats-grid'))")
        page.evaluate("document.getElementById('stats-source').previousElementSibling.scrollIntoView()")
        page.screenshot(path=shot(shots, tmp_path, f"explorer_layers_{width}.png"))
        assert page.errors == []
    finally:
        page.close()


def test_a_saved_page_carries_the_update_the_statistics_and_the_compiled_step(browser, tiny_run, tmp_path):
    from models.translate.explore import open_explorer, save_page

    from .test_browser import opened_from_disk

    save_page(tiny_run, tmp_path / "run.html")
    walk = open_explorer(tiny_run).get["/api/walk"]({})
    page = opened_from_disk(browser, tmp_path / "run.html")
    try:
        assert "no dropout" in page.inner_text("#graph-shows")  # 5c: this run's dropout is 0
        saved = set(page.locator("#tx-saved").evaluate("h => Object.keys(JSON.parse(h.textContent))"))
        assert {f"/api/walk_step?n={s['number']}" for s in walk["steps"]} <= saved  # both levels, every step
        assert {f"/api/module_step?n={m['number']}" for m in walk["modules"]} <= saved
        for level, last, heading in (("module", len(walk["modules"]), "module step"),
                                     ("op", len(walk["steps"]), "backward step")):
            page.click(f"#level-{level}")
            page.evaluate(f"TX.walk.stepTo({last})")  # the last step of backward, then the optimizer's two
            page.wait_for_selector(f"#panel h2:text-matches('^{heading} {last}[: ]')")
            page.keyboard.press("ArrowRight")
            page.wait_for_selector(f"#panel h2:text-is('step {last + 1}: clipping the gradients')")
            page.keyboard.press("ArrowRight")
            page.wait_for_selector(f"#panel h2:text-is(\"step {last + 2}: Adam's update\")")
        page.click("#tab-update")
        page.click("table.params tr[data-name='decoder.layers.0.ff.linear2.bias']")
        page.wait_for_selector("#update-detail h3:has-text('decoder.layers.0.ff.linear2.bias')")
        page.click("#tab-training")
        page.wait_for_selector("#layer-stats svg.layer-grid text.layer-name")
        page.click("#tab-compiled")  # 5a: the run's step as the jit records it, in the saved page too
        page.wait_for_selector("pre.compiled a.linked")
        assert "cannot record" not in page.inner_text("#compiled")
        assert page.requests == [(tmp_path / "run.html").resolve().as_uri()] and page.errors == []
    finally:
        page.close()


def test_the_compiled_view_of_a_run_shows_its_step(page, run_url):
    open_page(page, run_url)
    page.click("#tab-compiled")
    page.wait_for_selector("pre.compiled a.linked.backward")
    assert "cannot record" not in page.inner_text("#compiled")
    assert page.errors == []


def test_translate_follows_a_checkpoint_that_appears(browser, tiny_run, tmp_path):
    """A translation that waited for the first checkpoint is made when one appears, unasked."""
    from models.translate.explore import open_explorer

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in ("best.npz", "last.npz"):
        (run / name).rename(aside / name)
    shutil.rmtree(run / "snapshots")
    page = new_page(browser)
    try:
        with serving(open_explorer(run)) as url:
            open_page(page, url)
            open_translate(page)
            page.click("#translate-form button")
            page.wait_for_selector("#translate-message:has-text('no checkpoint yet')")
            for name in ("last.npz", "best.npz"):
                (aside / name).rename(run / name)
            page.wait_for_selector("#output", timeout=30_000)
            assert page.is_hidden("#translate-message") and page.inner_text("#translate-shows") == "with best.npz, step 300"
        assert page.errors == []
    finally:
        page.close()


def test_a_chart_of_one_validation_marks_whole_steps(browser, tiny_run, tmp_path):
    """One validation point at step 100: its step axis says 100, not 99.5 and 100.5."""
    from models.translate.explore import open_explorer

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    lines = (run / "metrics.jsonl").read_text().splitlines()  # the run as it was at its first validation
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines if json.loads(line)["step"] <= 100))
    page = new_page(browser)
    try:
        with serving(open_explorer(run)) as url:
            open_page(page, url)
            page.click("#tab-training")
            validation = page.locator("#curves figure.chart").nth(2)
            validation.locator("circle").first.wait_for()
            assert validation.locator("circle").count() == 2  # one point a series
            steps = validation.locator("text.tick[y='208']").all_text_contents()  # the step axis
            assert steps == ["100"]
        assert page.errors == []
    finally:
        page.close()


def test_a_damaged_last_npz_is_said_and_the_newest_readable_shown(browser, tiny_run, tmp_path):
    """A finished run whose last.npz is cut short: the page says so and shows best.npz."""
    from models.translate.explore import open_explorer

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    data = (run / "last.npz").read_bytes()
    (run / "last.npz").write_bytes(data[: len(data) // 3])
    page = new_page(browser)
    try:
        with serving(open_explorer(run)) as url:
            open_page(page, url)
            page.wait_for_selector("#damaged:not([hidden])")
            assert "last.npz is unreadable" in page.inner_text("#damaged")
            assert "Shown instead: best.npz, step 300" in page.inner_text("#damaged")
            assert "waits" not in page.inner_text("body")
            assert page.inner_text("#graph-shows").startswith("the step graph of best.npz, step 300")
        assert page.errors == []
    finally:
        page.close()
