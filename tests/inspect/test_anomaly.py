"""detect_anomaly (inspect/anomaly.py): the first NaN or Inf, in forward or backward, named
with its op and the user's line that made it; off, and free, by default."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import observers
from tinygrad_tx.inspect import AnomalyError, detect_anomaly

from ..helpers import leaf, no_observer_left
from .helpers import next_line, small_graph


def test_anomaly_names_log_of_zero_in_forward_and_its_line(device):
    x = leaf([1.0, 0.0], device)
    with pytest.raises(AnomalyError) as error, detect_anomaly(), np.errstate(divide="ignore"):
        line = next_line()
        x.log()
    message = str(error.value)
    assert message.startswith("Log produced Inf in forward") and "(2,) float64" in message
    assert f"{__file__}:{line}" in message and "x.log()" in message
    assert no_observer_left()


def test_anomaly_names_sqrt_at_zero_in_backward_and_the_line_that_made_it(device):
    x = leaf([0.0, 4.0], device)
    with pytest.raises(AnomalyError) as error, detect_anomaly(), np.errstate(divide="ignore", invalid="ignore"):
        line = next_line()
        y = x.sqrt()  # fine in forward: sqrt(0) = 0
        (y * 2.0).sum().backward()  # 0.5 / sqrt(0) = inf
    message = str(error.value)
    assert message.startswith("Sqrt produced Inf in backward") and "for input 0" in message
    assert f"{__file__}:{line}" in message and "y = x.sqrt()" in message


def test_anomaly_finds_nan_from_a_where_that_computes_both_branches():
    x = leaf([-1.0, 4.0])
    with pytest.raises(AnomalyError, match="Sqrt produced NaN in forward"), detect_anomaly(), \
            np.errstate(invalid="ignore"):
        tx.where(x.data > 0, x.sqrt(), 0.0)  # sqrt(-1) is computed even though it is not picked


def test_anomaly_says_when_an_op_was_made_outside_it():
    x = leaf([0.0])
    y = x.sqrt()
    with pytest.raises(AnomalyError, match="outside detect_anomaly"), detect_anomaly(), \
            np.errstate(divide="ignore"):
        y.sum().backward()


def test_anomaly_mode_passes_finite_computations_and_is_off_by_default():
    x, w, h, y = small_graph()
    with detect_anomaly():
        y.backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    with np.errstate(divide="ignore"):
        assert leaf([0.0]).log().item() == -np.inf  # off: NaN and Inf pass silently
    assert observers.active == []
