"""Instruments together (inspect/instrument.py, the observers' one list): they compose, and
each leaves nothing installed, also after an error."""
import pytest

from tinygrad_tx.inspect import profile, trace_backward

from ..helpers import no_observer_left
from .helpers import small_graph


def test_instruments_compose_and_clean_up_after_errors():
    x, w, h, y = small_graph()
    with profile() as p, trace_backward() as tr:
        y.backward()
    assert len(tr.steps) == sum(s.backward_calls for s in p.stats.values())
    with pytest.raises(ZeroDivisionError), profile():
        1 / 0
    assert no_observer_left()
