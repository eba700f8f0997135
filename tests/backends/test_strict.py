"""The strict device (strict.py): NumPy underneath with CuPy's refusals on top, so a test on
the CPU catches what a GPU would refuse."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx import Tensor


def strict_array(values):
    return tx.get_backend("strict").from_host(np.asarray(values, dtype=np.float64))


def test_strict_arrays_refuse_implicit_conversion_to_numpy():
    a = strict_array([1.0, 2.0])
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array(a)


def test_strict_arrays_refuse_numpy_functions_and_operands():
    a = strict_array([1.0, 2.0])
    with pytest.raises(TypeError, match="numpy.exp called on a strict-backend array"):
        np.exp(a)
    with pytest.raises(TypeError, match="numpy.sum"):
        np.sum(a)
    with pytest.raises(TypeError, match="NumPy array was mixed"):
        a + np.ones(2)
    with pytest.raises(TypeError):
        np.ones(2) * a
    with pytest.raises(TypeError, match="NumPy array was mixed"):
        tx.get_backend("strict").xp.maximum(a, np.zeros(2))


def test_strict_arrays_accept_numbers_numpy_scalars_and_explicit_transfers():
    backend = tx.get_backend("strict")
    a = strict_array([1.0, 2.0])
    for result in (a * 2, np.float64(2.0) * a, a * np.float32(2.0), backend.xp.exp(a) * 0 + 2 * a):
        assert isinstance(result, backend.array_type)
        np.testing.assert_array_equal(backend.to_host(result), [2.0, 4.0])
    host = a.get()
    assert isinstance(host, np.ndarray)
    host[0] = 99.0  # a copy, as from a GPU
    np.testing.assert_array_equal(backend.to_host(a), [1.0, 2.0])


def test_tensors_on_strict_hold_strict_arrays():
    t = Tensor([1.0, 2.0], device="strict")
    assert t.device == "strict"
    assert isinstance(t.data, tx.get_backend("strict").array_type)
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    assert (t * 2).sum().item() == 6.0


def test_strict_refuses_a_numpy_scalar_as_tensor_data():
    """CuPy gives 0-d arrays; a NumPy scalar in a strict tensor is a value made on the host."""
    strict = tx.get_backend("strict")
    with pytest.raises(TypeError, match="numpy.float32 as the data of a strict tensor"):
        Tensor._from_op(np.float32(1.0), strict)

    class HostSum(tx.function.Function, register=False):
        def forward(self, x):
            return np.float32(x.get().sum())  # computed on the host: CuPy would not give this

    with pytest.raises(TypeError, match="as the data of a strict tensor"):
        HostSum.apply(Tensor([1.0, 2.0], device="strict"))


# -- the strict device's model of a CUDA graph ------------------------------------------------------

def test_while_a_graph_is_captured_host_reads_and_value_sized_results_are_refused_as_cupy_refuses_them():
    backend = tx.get_backend("strict")
    a, mask = strict_array([1.0, -2.0, 3.0]), strict_array([1.0, 0.0, 1.0])
    reads = {"float": lambda: float(a[0]), "get": lambda: a.get(), "bool": lambda: bool((a > 0).any()),
             "to the device": lambda: backend.from_host(np.ones(2)),
             "nonzero": lambda: backend.xp.flatnonzero(mask), "boolean index": lambda: a[a > 0],
             "boolean assignment": lambda: a.__setitem__(a > 0, 0.0)}
    for name, read in reads.items():
        with pytest.raises(RuntimeError, match="the current stream is capturing"):
            backend.capture(read)
    with pytest.raises(NotImplementedError, match="cuBLAS"):  # CuPy's own matmul, which a capture cannot swap
        backend.capture(lambda: a @ a)
    assert float(a[0]) == 1.0  # and once the capture is over, reading is allowed again


def test_a_graph_launch_runs_the_captured_operations_again_with_the_numbers_of_the_capture():
    backend = tx.get_backend("strict")
    x, out, scale = strict_array([1.0, 2.0]), strict_array([0.0, 0.0]), [3.0]

    def step():
        out[...] = x * scale[0] + 1  # a number from the host: a graph keeps the one it was given
        return out

    graph, result = backend.capture(step)
    assert result is out and out.get().tolist() == [4.0, 7.0]
    x[...] = strict_array([10.0, 20.0])
    scale[0] = 100.0
    graph.launch()
    assert out.get().tolist() == [31.0, 61.0]  # the new x, read from its array; the old scale


def test_a_graph_launch_draws_fresh_random_numbers_as_cupys_generator_on_the_gpu_does():
    backend = tx.get_backend("strict")
    backend.seed(0)
    eager = [backend.bernoulli_keep((64,), 0.5).get() for _ in range(2)]
    backend.seed(0)
    graph, mask = backend.capture(lambda: backend.bernoulli_keep((64,), 0.5))
    launched = []
    for _ in range(2):  # the capture drew nothing (a GPU's computes nothing): the launches draw
        graph.launch()
        launched.append(mask.get())
    np.testing.assert_array_equal(launched[0], eager[0])
    np.testing.assert_array_equal(launched[1], eager[1])
