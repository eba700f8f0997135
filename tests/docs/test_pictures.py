"""The pictures in docs/ show what today's code draws (docs/pictures.py makes them).

Graphviz may be missing here, and its layout varies between versions, so the SVGs
are not redrawn: each node's text in the committed picture must equal the label
today's `to_dot` gives the same graph, line for line.
"""
from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

from tinygrad_tx.inspect import to_dot

DOCS = Path(__file__).resolve().parents[2] / "docs"
sys.path.insert(0, str(DOCS))
pictures = pytest.importorskip("pictures")  # docs/pictures.py


def dot_lines(dot: str) -> list[str]:
    labels = re.findall(r'label="((?:[^"\\]|\\.)*)"', dot)
    return sorted(line.replace('\\"', '"') for label in labels for line in label.split("\\n"))


def svg_lines(svg: str) -> list[str]:
    return sorted(html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg))


@pytest.mark.parametrize("name, graph, kwargs", [
    ("inspect_attention_graph.svg", lambda: pictures.attention_graph()[0], {}),
    ("inspect_transformer_layers.svg", pictures.transformer_layers, {"collapse": 2}),
])
def test_committed_pictures_show_todays_labels(name, graph, kwargs):
    assert svg_lines((DOCS / name).read_text()) == dot_lines(to_dot(graph(), **kwargs)), (
        f"docs/{name} is stale: run `python docs/pictures.py`")
