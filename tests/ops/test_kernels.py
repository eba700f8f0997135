"""The ops' speed helpers (ops/kernels.py) against NumPy and against the formulas they compute in
place, on every device; and what the op files may see of the machinery below them."""
import ast
from pathlib import Path

import numpy as np
import pytest

import tinygrad_tx as tx


def test_the_op_files_import_nothing_of_devices_capture_or_the_jit():
    """An op sees its array module (`xp`) and Python's operators. Products were `blas.matmul`,
    kernels.py asked `capturing_now()`, and jit/graph.py set a list in ops/select.py: now a
    capture swaps what the backend's `xp` does and keeps its own checks. From the backends an op
    file names only the type of its `self.backend` and the error for mixed devices."""
    for path in sorted(Path(tx.ops.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            below = isinstance(node, ast.ImportFrom) and node.level == 2 and node.module.split(".")[0]
            if below in ("backends", "jit"):
                assert node.module == "backends", f"{path.name} imports {node.module}"
                assert {a.name for a in node.names} <= {"Backend", "DeviceError"}, f"{path.name}: {ast.dump(node)}"
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            assert not [n for n in names if n.split(".")[0] in ("cupy", "cupyx", "tinygrad_tx")], path.name
        assert "capturing" not in path.read_text() and "deferred_checks" not in path.read_text(), path.name


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 13, 31, 32, 64])
def test_row_reductions_agree_with_numpy(device, n):
    """The fused ops' short-row helpers: the max by halving equals NumPy's exactly (also with
    NaN and ±inf), the sums by products with ones and the dots (einsum from 32 columns on)
    agree with NumPy's sums, in float64."""
    from tinygrad_tx.ops.kernels import column_dots, column_sums, row_dots, row_max, row_sums

    backend, rng = tx.get_backend(device), np.random.default_rng(n)
    x = rng.standard_normal((3, 5, n)).astype(np.float32)
    x[0, 0, -1], x[0, 1, 0], x[1, 2, n // 2] = np.inf, -np.inf, np.nan
    xd = backend.from_host(x)
    np.testing.assert_array_equal(backend.to_host(row_max(backend.xp, xd)), x.max(axis=-1, keepdims=True))
    row_max(backend.xp, xd)[...] = 99.0  # a new array, also for n = 1: writing it leaves x as it was
    np.testing.assert_array_equal(backend.to_host(xd), x)
    finite = backend.from_host(np.nan_to_num(x, posinf=3.0, neginf=-3.0))
    np.testing.assert_allclose(backend.to_host(row_sums(backend.xp, finite)),
                               backend.to_host(finite).sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(backend.to_host(column_sums(backend.xp, finite)),
                               backend.to_host(finite).sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)
    a, b = x[1:].astype(np.float64), rng.standard_normal((2, 5, n))  # the rows with no inf or NaN
    row, column = row_dots(backend.xp, *map(backend.from_host, (a, b))), column_dots(
        backend.xp, *map(backend.from_host, (a, b)))
    assert backend.to_host(row).shape == (2, 5, 1) and backend.to_host(column).shape == (n,)
    np.testing.assert_allclose(backend.to_host(row), (a * b).sum(axis=-1, keepdims=True), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(backend.to_host(column), (a * b).sum(axis=(0, 1)), rtol=1e-12, atol=1e-12)


# -- the fused ops' in-place backwards (`@fast_backward`) against their formulas --------------------

def fast_cases():
    from .test_gradients import CASES

    for name, cls in tx.REGISTRY.items():
        if getattr(cls.backward, "kernel", None) is not None:
            yield from (pytest.param(name, case, id=f"{name}-{case}") for case in CASES[name])


def test_the_fused_ops_have_a_fast_backward_and_nothing_else_branches():
    """LayerNorm, CrossEntropy, Attention and Gelu compute their gradient in place on raw arrays
    from a kernel; no op's own backward branches on create_graph to write it a second time
    (choosing where a saved value comes from, `Softmax.apply(x) if self.creating_graph else self.y`,
    is one line of one formula)."""
    import ast
    import inspect
    import textwrap

    fast = {name for name, cls in tx.REGISTRY.items() if getattr(cls.backward, "kernel", None) is not None}
    assert fast == {"LayerNorm", "CrossEntropy", "Attention", "Gelu"}
    for name, cls in tx.REGISTRY.items():
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(cls.backward))))
        branches = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "creating_graph" in ast.dump(n.test)]
        assert not branches, f"{name}.backward branches on create_graph"


@pytest.mark.parametrize("op,case", list(fast_cases()))
def test_a_fast_backward_equals_its_formula_on_raw_arrays(op, case, device, monkeypatch):
    """The in-place kernel that runs on raw arrays and the op's formula (what `backward` shows, and
    what runs on Tensors) give the same gradients on raw arrays too, for every case of the op, on
    every device: the same backward is run once as the engine chooses it, once as the formula."""
    import inspect

    from .test_gradients import CASES, make_inputs, upstream_for, weighted

    spec = CASES[op][case]
    inputs = make_inputs(spec, device)
    wanted = [x for x in inputs if isinstance(x, tx.Tensor) and x.requires_grad]
    upstream = upstream_for(spec.fn(*inputs))
    fast = tx.grad(weighted(spec.fn(*inputs), upstream), wanted)
    monkeypatch.setattr(tx.REGISTRY[op], "backward", inspect.unwrap(tx.REGISTRY[op].backward))  # float64: no widening
    formula = tx.grad(weighted(spec.fn(*inputs), upstream), wanted)
    for f, s in zip(fast, formula):
        assert (f is None) == (s is None)
        if f is not None:
            np.testing.assert_allclose(f.numpy(), s.numpy(), rtol=1e-12, atol=1e-14)
