"""The saved page (export.py) against what its user puts in it and where they put it.

Its data: a corpus line or a run directory's name holding `<!--<script>` left the
page with one script element and an empty body: no text in the answers may change how the
HTML parser reads the page (checked on the page's text for many hostile strings, and in
Chromium on a run whose directory and sentences hold them). Where it goes: `--html` wrote over a
user's own page that mentioned the explorer, and hung on a FIFO: only a page the explorer
saved is written over; a FIFO, a symbolic link or a directory is refused without being
opened. A disk that refuses it: a full disk or a read-only file system is one line naming the page, and no
file.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from tinygrad_tx.inspect.explorer import strict_json
from tinygrad_tx.inspect.explorer.export import page_text, rounded

from ...faults import StandInDisk, fill, remount, tmpfs
from .conftest import run_cli

HOSTILE = ["<!--<script>", "</script>", "<script>", "]]>", "\u2028", "\u2029", "<!--", "-->", "</SCRIPT >",
           "<![CDATA[", "&lt;", "&", "\\u003c", "'\"`", "\ud800", "\0", "<\\/script>", "<style>", "<!doctype"]
RUN_NAME = "<!--<script> ]]>\u2028 run"  # a directory's name cannot hold "/"


def saved_json(text: str) -> str:
    """The text of the element holding the answers, as the HTML parser would end it at the first `</script`."""
    start = text.index('<script id="tx-saved" type="application/json">') + len('<script id="tx-saved" '
                                                                               'type="application/json">')
    return text[start:text.lower().index("</script", start)]


def test_no_text_in_the_answers_can_change_how_the_page_is_parsed():
    rng = np.random.default_rng(0)
    pieces = HOSTILE + list("<>!-/&]'\"sScript\u2028")
    drawn = ["".join(rng.choice(pieces, size=rng.integers(1, 12))) for _ in range(300)]
    answers = {f"/api/{text}": {"title": text, "rows": [text, 1.5, float("nan")]} for text in HOSTILE + drawn}
    data = saved_json(page_text(answers))
    assert not re.search("[<>&\u2028\u2029]", data)  # the parser leaves script data only at "<"
    assert data.isascii()
    assert json.loads(data) == json.loads(json.dumps(rounded(strict_json.plain(answers))))  # every character back


# -- in Chromium: a run whose directory and sentences are hostile -----------------------------------

@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    """A tiny word-level run in a directory named RUN_NAME, every sentence holding a hostile string."""
    tmp = tmp_path_factory.mktemp("hostile")
    words, rng = "red blue green cat dog big small sees".split(), np.random.default_rng(1)
    marks = ["<!--<script>", "</script>", "<script>", "]]>", "\u2028", "&amp;"]  # no "-->": it would end "<!--"
    lines = set()
    for i in range(150):
        source = " ".join(rng.choice(words, 3)) + " " + marks[i % len(marks)]
        lines.add(f"{source}\t{' '.join(reversed(source.split(' ')))}\n")
    (tmp / "pairs.tsv").write_text("".join(sorted(lines)))
    out = tmp / RUN_NAME
    done = run_cli("train", "--data", str(tmp / "pairs.tsv"), "--out", str(out), "--tokenizer", "word",
                   "--steps", "20", "--eval-every", "10", "--d-model", "16", "--num-heads", "2",
                   "--num-encoder-layers", "1", "--num-decoder-layers", "1", "--d-ff", "32", "--members", "1",
                   "--processes", "1", timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def chromium():
    from . import test_browser as b  # skips (in CI: fails) where there is no browser, as those tests do
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=b.CHROMIUM, args=b.FLAGS)
        yield browser, b
        browser.close()


def test_a_page_of_a_run_with_hostile_names_and_sentences_opens_and_shows_them(chromium, hostile_run, tmp_path):
    browser, b = chromium
    page_path = tmp_path / "run.html"
    done = run_cli("explore", str(hostile_run), "--html", str(page_path), timeout=120)
    assert done.returncode == 0, done.stderr
    example = (hostile_run / "valid.tsv").read_text().split("\t")[0]
    page = b.opened_from_disk(browser, page_path)
    try:
        assert page.evaluate("document.getElementById('title').textContent").startswith(f"{RUN_NAME}: ")
        b.open_translate(page)
        assert page.input_value("#sentence") == example
        scripts = len(re.findall("<script", (Path(b.REPO) / "tinygrad_tx/inspect/explorer/static/index.html")
                                 .read_text()))
        assert page.evaluate("document.scripts.length") == scripts + 1  # each inlined one, and the answers
        assert page.errors == []
    finally:
        page.close()


# -- never written over: a user's page, a FIFO, a link ------------------------------------------------

def users_pages(tmp_path: Path) -> dict[str, str]:
    """Pages of a user's own that mention the explorer, its title, even its generator tag."""
    return {"notes.html": "<!doctype html><title>notes</title><p>I saved a tinygrad_tx explorer page today.",
            "copy.html": "<!doctype html>\n<html lang=\"en\">\n<head>\n  <title>tinygrad_tx explorer</title>\n"
                         "<body>mine</body>",
            "tag.html": "<!doctype html><html><head><title>x</title>\n"
                        '<meta name="generator" content="tinygrad_tx explorer">\n</head></html>',
            "late.html": "<!doctype html><html><head>" + " " * 5000 + '<meta name="generator" '
                         'content="tinygrad_tx explorer">'}


def test_only_a_page_the_explorer_saved_is_written_over(hostile_run, tmp_path):
    for name, text in users_pages(tmp_path).items():
        (tmp_path / name).write_text(text)
        done = run_cli("explore", str(hostile_run), "--html", str(tmp_path / name), timeout=120)
        assert done.returncode == 2 and "not a page the explorer saved" in done.stderr, (name, done.stderr)
        assert (tmp_path / name).read_text() == text
    ours = tmp_path / "ours.html"
    for _ in range(2):  # written, then written over
        done = run_cli("explore", str(hostile_run), "--html", str(ours), timeout=120)
        assert done.returncode == 0, done.stderr


def test_a_fifo_a_link_or_a_directory_is_refused_unopened(hostile_run, tmp_path):
    """A FIFO hung `--html` (reading it waits for a writer); a link to a page would be replaced by a file."""
    os.mkfifo(tmp_path / "fifo.html")
    (tmp_path / "dir.html").mkdir()
    done = run_cli("explore", str(hostile_run), "--html", str(tmp_path / "ours.html"), timeout=120)
    assert done.returncode == 0, done.stderr
    (tmp_path / "link.html").symlink_to(tmp_path / "ours.html")
    (tmp_path / "loop.html").symlink_to(tmp_path / "loop.html")
    for name, says in (("fifo.html", "not a regular file"), ("dir.html", "is a directory"),
                       ("link.html", "symbolic link"), ("loop.html", "symbolic link")):
        done = run_cli("explore", str(hostile_run), "--html", str(tmp_path / name), timeout=60)
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and len(lines) == 1 and says in lines[0], (name, done.stderr)
    assert (tmp_path / "link.html").is_symlink() and stat.S_ISFIFO(os.lstat(tmp_path / "fifo.html").st_mode)


# -- a full disk, a read-only file system ---------------------------------------------------------------

@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_page_onto_a_full_or_read_only_disk_is_one_line_and_no_file(hostile_run, tmp_path, fault):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        fill(disk) if fault == "full" else remount(disk, "ro")
        done = run_cli("explore", str(hostile_run), "--html", str(disk / "run.html"), timeout=120)
        if fault == "full":  # found writing
            assert done.stderr.splitlines() == [f"error: {disk / 'run.html'}: {os.strerror(errno.ENOSPC)}"]
            assert done.returncode == 1
        else:  # found before any work
            assert done.stderr.splitlines() == [f"error: --html {disk / 'run.html'}: a read-only file system"]
            assert done.returncode == 2
        assert sorted(p.name for p in disk.iterdir()) == (["filler"] if fault == "full" else [])


@pytest.mark.parametrize("read_only", [False, True])
def test_the_stand_in_full_or_read_only_disk(capsys, hostile_run, tmp_path, monkeypatch, read_only):
    from models.translate import cli

    StandInDisk(monkeypatch, full_from=1, room=1000, read_only=read_only)
    with pytest.raises(SystemExit) as exit:
        cli.main(["explore", str(hostile_run), "--html", str(tmp_path / "run.html")])
    reason = os.strerror(errno.EROFS if read_only else errno.ENOSPC)
    assert exit.value.code == 1 and capsys.readouterr().err.splitlines() == [f"error: {tmp_path / 'run.html'}: {reason}"]
    assert list(tmp_path.iterdir()) == []

