"""What a CUDA graph's capture swaps and defers (backends/graphs.py), on the strict device, which
models a capture: the ops' `matmul` and `einsum` are ones a graph can hold for the time of the
capture only, and a check of values made inside it is read after each launch. The ops see none
of it (tests/ops/test_kernels.py checks what they import)."""
import numpy as np
import pytest

import tinygrad_tx as tx
from tinygrad_tx.backends.blas import einsum_by_sums


def test_a_capture_swaps_the_blas_functions_of_the_ops_array_module_and_puts_them_back():
    backend = tx.get_backend("strict")
    xp, host = backend.xp, np.arange(6.0).reshape(2, 3)
    a = backend.from_host(host.copy())  # its own memory: the host array stays as it is
    own = xp.matmul
    graph, (product, dots) = backend.capture(lambda: (xp.matmul(a, a.T), xp.einsum("ij,ij->i", a, a)))
    assert xp.matmul is own and xp.einsum is not einsum_by_sums  # the library's own again
    np.testing.assert_array_equal(product.get(), host @ host.T)
    np.testing.assert_array_equal(dots.get(), (host * host).sum(axis=1))
    a[...] = backend.from_host(host + 1)
    graph.launch()  # the swapped functions were recorded as the graph's own operations
    np.testing.assert_array_equal(product.get(), (host + 1) @ (host + 1).T)
    np.testing.assert_array_equal(dots.get(), ((host + 1) ** 2).sum(axis=1))
    with pytest.raises(NotImplementedError, match="cuBLAS"):  # what is swapped: the library's own refuses
        backend.capture(lambda: a @ a.T)


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,ij->i", [(5, 7), (5, 7)]), ("ij,ij->j", [(5, 7), (5, 7)]), ("ij,jk->ik", [(5, 7), (7, 3)]),
    ("ij,jk->ki", [(5, 7), (7, 3)]), ("ji,ij->j", [(7, 5), (5, 7)]), ("ij->ji", [(5, 7)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij,j->i", [(3, 4), (4,)])])
def test_einsum_by_sums_is_einsum(subscripts, shapes):
    rng = np.random.default_rng(0)
    operands = [rng.standard_normal(shape) for shape in shapes]
    np.testing.assert_allclose(einsum_by_sums(subscripts, *operands), np.einsum(subscripts, *operands),
                               rtol=1e-12, atol=1e-12)


def test_a_check_made_while_capturing_is_read_after_each_launch_and_at_once_otherwise():
    backend = tx.get_backend("strict")
    ids = backend.from_host(np.array([0, 1]))

    def check():
        backend.check(ids >= 2, lambda: IndexError(f"id {int(ids.max())} is out of range"))

    graph, _ = backend.capture(check)  # no value can be read here: nothing raises
    graph.launch()
    assert graph.failed() is None
    ids[...] = backend.from_host(np.array([0, 5]))
    graph.launch()
    failed = graph.failed()
    assert failed is not None and str(failed.error()) == "id 5 is out of range"
    with pytest.raises(IndexError, match="id 5 is out of range"):
        check()  # outside a capture: at once


def test_the_cpu_refuses_a_capture_in_one_line_that_says_what_to_do():
    with pytest.raises(tx.DeviceError, match="needs the step on a CUDA device, not cpu: move the model"):
        tx.get_backend("cpu").capture(lambda: None)
