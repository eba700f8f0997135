"""A page you can keep: the explorer as one self-contained HTML file, with no server.

`write_page(answers, path)` writes index.html with its stylesheet and scripts inlined
and every answer the page may ask for (`answers`: request -> JSON) stored inside it;
the page's `api()` (api.js) reads those instead of asking a server. A Content
Security Policy in the file forbids it any request at all, so it opens from disk,
from an e-mail or inside a notebook's output the same way. A request it does not
hold (a sentence other than the saved one) is answered with a message saying so.

The answers are JSON inside `<script type="application/json">`, with every `<`, `>` and `&`
written as a \\u escape and all else outside ASCII too (U+2028 and U+2029 among them): a
script element's text is not parsed as JSON by the browser's HTML parser but scanned for
sequences such as `</script`, or `<!--` followed by `<script`, that end the element
elsewhere or hide the rest of the page; with no `<` in it, nothing a sentence or a run
directory's name holds can do either, and `JSON.parse` gives back every character.

A page is only ever written over if it is one this module wrote: its `<head>` begins with
the generator tag that only this module writes. Anything else (a user's page, a symbolic
link, a FIFO, which is never opened) is refused before any work.

In Jupyter the page is shown in an `<iframe srcdoc=...>` (`SavedPage._repr_html_`):
the notebook's own page and its styles stay apart from the explorer's.
"""
from __future__ import annotations

import base64
import html
import json
import math
import re
from pathlib import Path
from typing import Any

from ...files import check_output_path, read_head, write_atomically
from . import strict_json
from .server import ASSETS, asset

GENERATOR = "tinygrad_tx explorer"
MARK = f'<meta name="generator" content="{GENERATOR}">'
"""The first tag of a saved page's head: the mark of a file this module may write over."""
SAVED = re.compile(rb"\s*<!doctype html>\s*<html[^>]*>\s*<head>\s*" + re.escape(MARK.encode()), re.IGNORECASE)
HEAD_BYTES = 4096
SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
"""JSON text's escapes for the characters the HTML parser acts on inside a script element."""
POLICY = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
SCRIPT = re.compile(r'<script src="([\w/.]+)"></script>')
STYLE = re.compile(r'<link rel="stylesheet" href="([\w/.]+)">')
ICON = re.compile(r'<link rel="icon" href="([\w/.]+)">')


class SavedPage:
    """A saved explorer page: its path, and its picture in a Jupyter cell's output."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def __repr__(self) -> str:
        return f"SavedPage({str(self.path)!r}, {len(self.text.encode()) / 1e6:.1f} MB)"

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.text, quote=True)}" title="explorer: {html.escape(str(self.path))}"'
                ' style="width: 100%; height: 760px; border: 1px solid #ddd"></iframe>')


def check_page_path(path: str | Path) -> None:
    """Refuse, before any work, a path the page cannot be written to, or a file that is not a page
    this module wrote (never written over: it is the user's)."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--html {path}: the file name must end in .html")
    if check_output_path(path, "--html") and not SAVED.match(read_head(path, HEAD_BYTES)):
        raise ValueError(f"--html {path} exists and is not a page the explorer saved: not written over")


DIGITS = 6
"""Significant digits a saved page keeps of each number (the page shows 4): a third of the size."""


def rounded(value: Any) -> Any:
    """`value` with every float cut to DIGITS significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def page_text(answers: dict[str, Any]) -> str:
    """index.html with everything it loads inlined and `answers` inside."""
    page = asset("index.html").decode()
    page = page.replace("<head>", f'<head>\n  {MARK}\n'
                                  f'  <meta http-equiv="Content-Security-Policy" content="{POLICY}">', 1)
    icon = "data:image/svg+xml;base64," + base64.b64encode(asset(ASSETS["/favicon.svg"])).decode()
    page = ICON.sub(lambda m: f'<link rel="icon" href="{icon}">', page)
    page = STYLE.sub(lambda m: f"<style>\n{asset(ASSETS[m[1]]).decode()}</style>", page)
    data = json.dumps(rounded(strict_json.plain(answers)), allow_nan=False).translate(SAFE)  # ASCII, no < > &
    first = True

    def inline(match: re.Match) -> str:
        nonlocal first
        code = asset(ASSETS[match[1]]).decode()
        if re.search(r"<!--|</?script", code, re.IGNORECASE):
            raise ValueError(f"{match[1]} contains '<!--' or '<script' or '</script', which would change where "
                             "its inlined script ends")
        saved = f'<script id="tx-saved" type="application/json">{data}</script>\n  ' if first else ""
        first = False
        return f"{saved}<script>\n{code}\n</script>"

    page = SCRIPT.sub(inline, page)
    left = re.findall(r'(?:src|href)="(?!data:|#)[^"]*"', page)
    if left:
        raise ValueError(f"the saved page would still load {left}: index.html has a form this module does not inline")
    return page


def write_page(answers: dict[str, Any], path: str | Path) -> SavedPage:
    """Write the saved page to `path` (check it first with `check_page_path`)."""
    text = page_text(answers)
    write_atomically(Path(path), lambda f: f.write(text.encode()))
    return SavedPage(Path(path), text)
