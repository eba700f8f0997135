"""A page you can keep: the explorer as one self-contained HTML file, with no server.

`write_page(answers, path)` writes index.html with its stylesheet and scripts inlined
and every answer the page may ask for (`answers`: request -> JSON) stored inside it;
the page's `api()` (api.js) reads those instead of asking a server. A Content
Security Policy in the file forbids it any request at all, so it opens from disk,
from an e-mail or inside a notebook's output the same way. A request it does not
hold (a sentence other than the saved one) is answered with a message saying so.

In Jupyter the page is shown in an `<iframe srcdoc=...>` (`SavedPage._repr_html_`):
the notebook's own page and its styles stay apart from the explorer's.
"""
from __future__ import annotations

import base64
import html
import math
import os
import re
from pathlib import Path
from typing import Any

from ...serialization import write_atomically
from . import strict_json
from .server import ASSETS, asset

GENERATOR = "tinygrad_tx explorer"
"""Written into a saved page: the mark of a file this module may write over."""
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
    if not path.resolve().parent.is_dir():
        raise ValueError(f"--html {path}: the directory to write it into does not exist")
    if path.is_dir():
        raise ValueError(f"--html {path} is a directory, not a file")
    if path.exists() and GENERATOR not in path.read_bytes()[:2000].decode("utf-8", "replace"):
        raise ValueError(f"--html {path} exists and is not a page the explorer saved: not written over")
    if not os.access(path if path.exists() else path.resolve().parent, os.W_OK):
        raise ValueError(f"--html {path}: no permission to write it")


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
    page = page.replace("<head>", f'<head>\n  <meta name="generator" content="{GENERATOR}">\n'
                                  f'  <meta http-equiv="Content-Security-Policy" content="{POLICY}">', 1)
    icon = "data:image/svg+xml;base64," + base64.b64encode(asset(ASSETS["/favicon.svg"])).decode()
    page = ICON.sub(lambda m: f'<link rel="icon" href="{icon}">', page)
    page = STYLE.sub(lambda m: f"<style>\n{asset(ASSETS[m[1]]).decode()}</style>", page)
    data = strict_json.dumps(rounded(strict_json.plain(answers)))
    data = data.replace("</", "<\\/")  # nothing inside can end the script element that holds it
    first = True

    def inline(match: re.Match) -> str:
        nonlocal first
        code = asset(ASSETS[match[1]]).decode()
        if "</script" in code.lower():
            raise ValueError(f"{match[1]} contains '</script', which would end its inlined script early")
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
