"""The walk by module and by op, arrays read as text, and the page's layout and framing, in real Chromium.

Each test reads what the page shows and checks it against an independent truth: a module
step's gradients are the op level's at its boundary ops, read back from the heat-map cells;
the labels are the run's vocabulary; the words' signs are the numbers'; nothing is cut off
or overlaps at 1024×700; another site's frame gets nothing. Screenshots of both levels, the
translate view at beam 6, the parts and the tour's stops at 1400×900 and 1024×700 go where
test_browser.py's go (docs/ when TINYGRAD_TX_SCREENSHOTS=docs).
"""
from __future__ import annotations

import http.server
import re
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from .test_browser import browser, new_page, open_page, open_translate, readings, shots  # noqa: F401

SIZES = [(1400, 900), (1024, 700)]


@pytest.fixture(scope="module")
def looks(tmp_path_factory):
    """Where the screenshots that only a person checks go (a temporary folder: pytest --basetemp)."""
    return tmp_path_factory.mktemp("looks")


def shown_cells(section) -> np.ndarray:
    """The numbers a heat-map shows, cell by cell as pointing at it reads them (its rows and columns may
    be labelled with pieces: "<bos>, i: 0.01")."""
    return np.array([[float(read.rsplit(": ", 1)[1]) for read in row] for row in readings(section)])


def boxes_apart(a: dict, b: dict) -> bool:
    return (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
            or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def assert_readable(page, width: int, height: int) -> None:
    """Nothing below the fold or beyond the right edge, and the graph's key inside the graph."""
    assert page.evaluate("document.documentElement.scrollHeight") <= height
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    graph, key = page.locator("#graph").bounding_box(), page.locator("#graph .key").bounding_box()
    assert graph["y"] <= key["y"] and key["y"] + key["height"] <= graph["y"] + graph["height"] + 1
    assert key["y"] + key["height"] <= height


def test_the_walk_by_module_then_by_op_one_click_apart(browser, run_url, run_explorer, shots, looks):
    walk = run_explorer.get["/api/walk"]({})
    linear = next(m for m in walk["modules"] if m["kind"] == "nn.Linear")  # the output layer, `out`
    for width, height in SIZES:
        page = new_page(browser, width, height)
        try:
            open_page(page, run_url)
            for _ in range(linear["number"]):
                page.keyboard.press("ArrowRight")
            total = len(walk["modules"]) + 2  # a run's walk ends in the optimizer's two steps (clip, update)
            heading = page.locator(f"#panel h2:has-text('module step {linear['number']} of {total}')")
            heading.wait_for()
            assert page.inner_text("#back-pos") == f"module step {linear['number']} of {total}"  # one count
            assert heading.locator("code.name").inner_text() == linear["name"] == "out"  # a name, set as one
            words = page.inner_text("#panel p.words")
            assert words.startswith("The linear layer sends its input") and "2 reshapes" in words
            assert "dw = xᵀ @ g" in page.inner_text("#panel .step-math pre.math")  # beside the math
            assert page.locator("#panel .folded-ops a.op-link").all_inner_texts() == ["#2 Reshape", "#4 Reshape"]
            # what arrives is the op level's gradient at the module's output op, cell by cell
            arrives = page.locator("#panel section", has_text="arrives (d result")
            truth = run_explorer.get["/api/walk_step"]({"n": str(linear["arrives"][0]["from"])})["grad"]["heat"]["rows"]
            np.testing.assert_allclose(shown_cells(arrives), truth, rtol=2e-3, atol=1e-12)
            sends = page.locator("#panel ul.sends > li")
            assert sends.count() == 3
            names = [w.inner_text() for w in page.locator("#panel ul.sends code.name").all()]
            assert names == ["out.weight", "out.bias", "decoder.layers.0.ff_res.norm"]  # weights, then the input
            for i, send in enumerate(linear["sends"]):  # each send, the op level's
                op = run_explorer.get["/api/walk_step"]({"n": str(send["from"])})
                k = next(j for j, s in enumerate(walk["steps"][send["from"] - 1]["sends"]) if s["to"] == send["to"])
                np.testing.assert_allclose(shown_cells(sends.nth(i)), np.atleast_2d(op["sends"][k]["heat"]["rows"]),
                                           rtol=2e-3, atol=1e-12)
            assert_readable(page, width, height)
            where = shots / "explorer_walk.png" if width == 1400 else looks / f"walk_module_{width}.png"
            page.screenshot(path=str(where))

            page.locator("#panel a.op-link", has_text="#3 Linear").click()  # the op level, one click away
            page.wait_for_selector("#panel h2:has-text('backward step 3: #3 Linear')")
            assert page.locator("#level-op").get_attribute("class") == "active"
            assert page.locator("#panel h2 code.name").inner_text() == "out"  # "in `out`", never "(inside out)"
            assert page.inner_text("#panel p.words").startswith("The linear layer")
            assert page.locator("#graph .node.current").get_attribute("data-id") == "op3"
            assert_readable(page, width, height)
            page.screenshot(path=str(looks / f"walk_op_{width}.png"))
            page.locator("#panel a.module-link").click()  # and back
            page.wait_for_selector(f"#panel h2:has-text('module step {linear['number']} of')")
            assert page.errors == []
        finally:
            page.close()


def test_a_saved_page_carries_both_levels(browser, tiny_run, tmp_path):
    from models.translate.explore import save_page

    save_page(tiny_run, tmp_path / "run.html")
    page = new_page(browser)
    page.requests = []
    page.on("request", lambda r: page.requests.append(r.url))
    try:
        page.goto((tmp_path / "run.html").resolve().as_uri())
        page.wait_for_selector("body[data-ready]")
        for n in range(1, 4):
            page.keyboard.press("ArrowRight")
            page.wait_for_selector(f"#panel h2:has-text('module step {n} of')")
            assert page.inner_text("#panel p.words")
        page.click("#level-op")
        page.wait_for_selector("#panel h2:has-text('backward step 5:')")  # module step 3 (a layer norm) is op #5
        page.keyboard.press("ArrowRight")
        page.wait_for_selector("#panel h2:has-text('backward step 6:')")
        assert page.requests == [(tmp_path / "run.html").resolve().as_uri()] and page.errors == []
    finally:
        page.close()


def test_scores_and_tables_are_read_as_text(browser, run_url, run_explorer, tiny_run):
    from models.translate.explore_files import read_run_files

    files = read_run_files(tiny_run)
    graph = run_explorer.get["/api/graph"]({})
    logits = next(n for n in graph["nodes"] if n["id"] == "op2")  # the loss's input: (B, T, V)
    page = new_page(browser)
    try:
        open_page(page, run_url)
        page.evaluate("TX.graph.reveal('op2')")
        page.wait_for_selector("#panel h2:text-is('#2 Reshape')")
        value = page.locator("#panel section", has_text="value").last
        columns = value.locator("svg.heat text.label[transform]").all_text_contents()
        assert columns == files.tgt_vocab.tokens and len(columns) == logits["shape"][-1]  # a column per piece
        table = page.locator("#panel table.reading")
        rows = table.locator("tr").all()[1:]
        reading = run_explorer.get["/api/node"]({"id": "op2"})["reading"]
        assert len(rows) == len(reading["rows"]) >= 3
        for row, (t, fed, right, choice, *_) in zip(rows, reading["rows"]):
            cells = row.locator("td").all_inner_texts()
            assert cells[:4] == [str(t), fed, right, choice]  # the prediction beside the target
        table_leaf = next(n["id"] for n in graph["nodes"] if n["title"] == "encoder.embed.tokens.weight")
        page.evaluate(f"TX.graph.reveal('{table_leaf}')")
        page.wait_for_selector("#panel h2:has-text('encoder.embed.tokens.weight')")
        value = page.locator("#panel section", has_text="value").last
        rows = value.locator("svg.heat text.label:not(.tick)[text-anchor='end']")
        assert rows.all_text_contents() == files.src_vocab.tokens  # one row per piece of the source vocabulary
        assert page.errors == []
    finally:
        page.close()


def test_the_parts_have_a_key_and_the_pages_numbers(browser, run_url, run_explorer, looks):
    cross = next(n["id"] for n in run_explorer.get["/api/graph"]({})["nodes"] if n["title"] == "Attention"
                 and n["number"] < 30)
    for width, height in SIZES:
        page = new_page(browser, width, height)
        try:
            open_page(page, run_url)
            page.evaluate(f"TX.graph.reveal('{cross}')")
            page.click("#open-parts")
            page.wait_for_selector(".parts-canvas svg .node")
            key = page.inner_text("#panel .key")
            assert "q, k, v" in key and "backward: this step" in key
            page.click(".parts-next")
            page.wait_for_selector(".parts-detail h3:has-text('parts step 1:')")
            shown = page.locator(".parts-canvas").inner_text() + page.inner_text(".parts-detail h3")
            assert not re.search(r"#\d", shown)  # "#k" is the main graph's node k alone
            assert page.inner_text(".parts-detail p.words")
            page.screenshot(path=str(looks / f"parts_{width}.png"))
            assert page.errors == []
        finally:
            page.close()


def test_the_tour_at_1024_covers_nothing_and_its_words_follow_signs(browser, run_url, run_explorer, shots, looks):
    stops = run_explorer.get["/api/tour"]({})["stops"]
    for width, height in SIZES:
        page = new_page(browser, width, height)
        try:
            open_page(page, run_url)
            assert_readable(page, width, height)
            page.click("#tour-start")
            for k, stop in enumerate(stops, 1):
                page.wait_for_selector(f"#tour .note:has-text('stop {k} of {len(stops)}')")
                tour = page.locator("#tour").bounding_box()
                assert tour["y"] >= 0 and tour["y"] + tour["height"] <= height  # the card is in the window
                view = "#graph" if stop["phase"] != "update" else "#view-update"  # the last stop shows the update
                assert boxes_apart(tour, page.locator(view).bounding_box())  # the card covers none of it (the key included)
                if view == "#graph":
                    assert_readable(page, width, height)
                text = page.inner_text("#tour .tour-text")
                for number, word in re.findall(r"([+-]\d[\d.e+-]*) \((positive|negative|zero)", text):
                    assert word == ("positive" if float(number) > 0 else "negative" if float(number) < 0 else "zero")
                page.screenshot(path=str(shots / "explorer_narrow.png" if (width, k) == (1024, 10)
                                         else looks / f"tour_{width}_{k}.png"))
                if k < len(stops):
                    page.click(".tour-next")
            assert page.errors == []
        finally:
            page.close()


def test_the_beam_tree_at_beam_6_is_readable_at_both_sizes(browser, run_url, looks):
    for width, height in SIZES:
        page = new_page(browser, width, height)
        try:
            open_page(page, run_url)
            open_translate(page)
            page.fill("#sentence", "abcdefghij")
            page.fill("#beam", "6")
            page.click("#translate-form button")
            page.wait_for_selector("#beam-tree .hyp")
            labels = page.locator("#beam-tree .hyp text").evaluate_all(
                "ts => ts.map(t => t.getBoundingClientRect().height)")
            assert min(labels) >= 10  # drawn at the page's text size, not squeezed to fit
            tree = page.locator("#beam-tree")
            assert tree.evaluate("t => t.scrollHeight > t.clientHeight || t.scrollWidth >= t.clientWidth - 4")
            page.screenshot(path=str(looks / f"translate_beam6_{width}.png"), full_page=True)
            assert page.errors == []
        finally:
            page.close()


def test_text_says_what_it_means(browser, run_url, run_explorer):
    """"every 2nd column shown", not "every 1×2-th cell"; the sends' row labels never overlap."""
    walk = run_explorer.get["/api/walk"]({})
    relu = next(s for s in walk["steps"] if s["op"] == "Relu")  # its gradient is (4, 10, 64): every 2nd column
    page = new_page(browser)
    try:
        open_page(page, run_url)
        page.click("#level-op")
        page.evaluate(f"TX.walk.stepTo({relu['number']})")
        page.wait_for_selector(f"#panel h2:has-text('backward step {relu['number']}:')")
        notes = page.inner_text("#panel")
        assert "every 2nd column shown" in notes and "-th cell" not in notes
        for label_set in page.locator("#panel ul.sends svg.heat").all():
            tops = sorted(label_set.locator("text.label:not(.tick)[text-anchor='end']").evaluate_all(
                "ts => ts.map(t => [t.getBoundingClientRect().top, t.getBoundingClientRect().bottom])"))
            assert all(a[1] <= b[0] + 0.5 for a, b in zip(tops, tops[1:])), tops  # row labels apart
        assert page.errors == []
    finally:
        page.close()


# -- framing ----------------------------------------------------------------------------------------

def test_another_site_cannot_frame_the_page(browser, run_url):
    for path in ("/", "/api/graph", "/api/walk", "/explore.css", "/api/nothing"):
        with urllib.request.urlopen(run_url + path) if path != "/api/nothing" else _error(run_url + path) as answer:
            assert answer.headers["X-Frame-Options"] == "DENY"
            assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
    framed = urllib.request.Request(run_url + "/", headers={"Sec-Fetch-Dest": "iframe", "Sec-Fetch-Site": "same-site"})
    assert _error(framed).status == 403

    html = f"<!doctype html><html><body><iframe src='{run_url}/' width=800 height=600></iframe></body></html>".encode()

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args):
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)  # another site: another port
    threading.Thread(target=other.serve_forever, daemon=True).start()
    page = new_page(browser)
    page.requests = []
    page.on("request", lambda r: page.requests.append(r.url))
    try:
        page.goto(f"http://127.0.0.1:{other.server_address[1]}/")
        page.wait_for_timeout(1500)
        frame = page.frames[1]
        assert frame.evaluate("document.querySelector('body[data-ready]')") is None  # nothing of it rendered
        assert not [url for url in page.requests if "/api/" in url]  # and it asked the explorer nothing
    finally:
        page.close()
        other.shutdown()
        other.server_close()


def _error(request):
    """The answer to a request that fails (urllib raises it as an HTTPError, which is one)."""
    try:
        return urllib.request.urlopen(request)
    except urllib.error.HTTPError as e:
        return e
