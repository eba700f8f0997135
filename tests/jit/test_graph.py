"""`tx.jit(step, cuda_graph=True)` (jit/graph.py): a replay's forward and backward launched as one
CUDA graph. On a GPU and on the strict device, which models a graph (a launch runs the captured
operations again with the numbers of the capture), a graphed step must equal an eager step bit for
bit: dropout masks drawn afresh, the optimizer's changing numbers used, ids checked."""
import numpy as np
import pytest

import tinygrad_tx as tx
import tinygrad_tx.functional as F
from tinygrad_tx import nn, optim, schedules
from tinygrad_tx.jit import JitError

from .test_replay import PAD, batches, transformer_run


@pytest.fixture(params=["strict", "cuda"])
def graph_device(request) -> str:
    try:
        tx.get_backend(request.param)
    except tx.DeviceError as e:
        pytest.skip(f"CuPy/GPU not available: {e}")
    return request.param


def elementwise_steps(device, mode, steps=6):
    """Losses (kept as tensors until the end) and final parameters of a step with no matrix
    product (so the same kernels as eager on a GPU too): embedding, dropout, a scaled tanh, Adam,
    gradient clipping and a warm-up schedule, with `zero_grad` between forward and backward."""
    tx.manual_seed(0)
    emb = nn.Embedding(13, 8).to(device)
    scale = tx.Tensor(np.full(8, 0.5, np.float32), requires_grad=True, device=device)
    params = [*emb.parameters(), scale]
    opt = optim.Adam(params, lr=1e-2)
    schedule = schedules.NoamSchedule(opt, d_model=8, warmup=3)

    def step(ids):
        loss = ((F.dropout(emb(ids), 0.2) * scale).tanh() ** 2).mean()
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm(params, 1.0)
        opt.step()
        schedule.step()
        return loss

    run = {"eager": step, "graph": tx.jit(step, cuda_graph=True)}[mode]
    ids = [tx.Tensor(np.array([[1, 2, 3, 2], [5, 5, 1, PAD]]), device=device),
           tx.Tensor(np.array([[4, 4, 4], [7, 1, 2]]), device=device)]
    losses = [run(ids[i % 3 == 2]) for i in range(steps)]
    return [loss.item() for loss in losses], [p.numpy() for p in params], run


def test_a_graphed_step_equals_an_eager_step_bit_for_bit(graph_device):
    eager_losses, eager_params, _ = elementwise_steps(graph_device, "eager", steps=9)
    losses, params, run = elementwise_steps(graph_device, "graph", steps=9)
    assert losses == eager_losses  # the losses kept: each call's own, not the graph's last
    for a, b in zip(params, eager_params):
        np.testing.assert_array_equal(a, b)
    graphs = [tape.graph for tape in run.tapes.values()]
    assert [(g.captures, g.graph_calls) for g in graphs] == [(1, 5), (1, 2)]  # each shape: recorded, captured once


def test_a_transformers_graphed_steps_equal_eager_steps(graph_device):
    """Its matrix products go to cuBLAS directly inside a graph (CuPy refuses to call it while a
    stream captures, blas.py). On the strict device that is NumPy's product, so the steps are
    equal bit for bit; on a GPU the direct call may pick another cuBLAS kernel than CuPy's, which
    changes rounding: equal within float32 tolerance there."""
    data = batches(np.random.default_rng(1), [(4, 7, 6), (4, 7, 6), (3, 5, 8)] * 4, 13)
    eager_losses, eager_params, _ = transformer_run(graph_device, data, use_jit=False)
    losses, params, run = transformer_run(graph_device, data, use_jit=True, cuda_graph=True)
    if graph_device == "strict":
        np.testing.assert_array_equal(losses, eager_losses)
        for a, b in zip(params, eager_params):
            np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
        for a, b in zip(params, eager_params):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert [tape.graph.captures for tape in run.tapes.values()] == [1, 1]


def wide_steps(device, mode, steps=4):
    """Losses and parameters of a step whose rows are wide: layer norm over 40 features and
    attention over 33 keys, whose row dots are einsum eagerly (cuBLAS on a GPU, refused while a
    stream captures), with SGD."""
    rng = np.random.default_rng(3)
    norm, w = nn.LayerNorm(40).to(device), tx.Tensor(rng.standard_normal((40, 40)).astype(np.float32) * 0.2,
                                                     requires_grad=True, device=device)
    params = [*norm.parameters(), w]
    opt = optim.SGD(params, lr=0.05)

    def step(x):
        h = norm(x) @ w  # (2, 33, 40)
        loss = (F.scaled_dot_product_attention(h, h, h, causal=True) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    run = tx.jit(step, cuda_graph=True) if mode == "graph" else step
    x = tx.Tensor(rng.standard_normal((2, 33, 40)).astype(np.float32), device=device)
    return [run(x).item() for _ in range(steps)], [p.numpy() for p in params], run


def test_wide_rows_are_reduced_in_a_graph_by_what_the_capture_swaps_in(graph_device):
    """The capture swaps the ops' einsum for a product and a sum (backends/blas.py), as it swaps
    their matmul: the graphed steps run, once captured, and equal eager ones within rounding."""
    eager_losses, eager_params, _ = wide_steps(graph_device, "eager")
    losses, params, run = wide_steps(graph_device, "graph")
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert [(tape.graph.captures, tape.graph.graph_calls) for tape in run.tapes.values()] == [(1, 3)]


def embedding_step(device):
    tx.manual_seed(0)
    emb = nn.Embedding(5, 3).to(device)
    opt = optim.SGD(emb.parameters(), lr=0.1)

    def step(ids):
        opt.zero_grad()
        loss = (emb(ids) ** 2).sum()
        loss.backward()
        opt.step()
        return loss

    return emb, step


@pytest.mark.parametrize("bad", [-1, 5])
def test_an_id_out_of_range_raises_after_the_launch_as_eager_does_and_leaves_the_parameters(graph_device, bad):
    emb, step = embedding_step(graph_device)
    graphed = tx.jit(step, cuda_graph=True)
    good = tx.Tensor(np.array([1, 0, 4, 1]), device=graph_device)
    for _ in range(3):
        graphed(good)  # recorded, captured, launched
    before = emb.weight.numpy()
    ids = tx.Tensor(np.array([1, bad, 4, 1]), device=graph_device)
    with pytest.raises(IndexError) as eager:
        step(ids)
    with pytest.raises(IndexError) as launched:
        graphed(ids)
    assert str(launched.value) == str(eager.value)  # "Embedding on inputs of shape ...: embedding: id 5 is out ..."
    np.testing.assert_array_equal(emb.weight.numpy(), before)  # raised before the optimizer stepped
    graphed(good)
    assert graphed.tapes and next(iter(graphed.tapes.values())).graph.captures == 1


def test_a_parameter_given_a_new_array_is_captured_anew(graph_device):
    results = []
    for mode in ("eager", "graph"):
        emb, step = embedding_step(graph_device)
        run = tx.jit(step, cuda_graph=True) if mode == "graph" else step
        ids = tx.Tensor(np.array([1, 0, 4, 1]), device=graph_device)
        losses = [run(ids).item() for _ in range(3)]
        emb.load_state_dict({"weight": np.full((5, 3), 0.5, np.float32)})  # a new array: the graph read the old
        losses += [run(ids).item() for _ in range(3)]
        results.append(losses)
    assert results[0] == results[1]
    assert next(iter(run.tapes.values())).graph.captures == 2


def test_a_step_that_adds_into_old_gradients_is_refused_with_the_fix():
    emb = nn.Embedding(5, 3).to("strict")

    def accumulate(ids):
        (emb(ids) ** 2).sum().backward()  # no zero_grad: the second call adds into .grad

    graphed, ids = tx.jit(accumulate, cuda_graph=True), tx.Tensor(np.array([1, 2]), device="strict")
    graphed(ids)
    with pytest.raises(JitError, match=r"already has a \.grad .* zero the gradients at the start of the step"):
        graphed(ids)


def test_on_numpy_a_cuda_graph_is_refused_at_the_first_call_before_anything_runs():
    """The first call used to run the step eagerly (the optimizer stepped) and refuse only at the
    second: what a call passes and what the function reaches, all on the CPU, say so at once."""
    emb, step = embedding_step("cpu")
    before = emb.weight.numpy()
    graphed, ids = tx.jit(step, cuda_graph=True), tx.Tensor(np.array([1, 2]))
    for _ in range(2):
        with pytest.raises(JitError, match=r"needs the step on a CUDA device, not cpu: move the model"):
            graphed(ids)
    np.testing.assert_array_equal(emb.weight.numpy(), before)  # SGD never stepped
    assert emb.weight.grad is None and graphed.traces == 0


def test_a_graphed_function_of_no_tensor_is_refused_on_a_default_device_without_graphs():
    made = []

    def step():
        made.append(tx.ones(3))
        return (made[-1] * 2).sum()

    with pytest.raises(JitError, match=r"needs the step on a CUDA device, not cpu"):
        tx.jit(step, cuda_graph=True)()
    assert not made
