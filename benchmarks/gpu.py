"""What a step spends on a GPU besides arithmetic: kernel launches, and whether it can be one CUDA graph.

A small model's step on a GPU is launch-bound: hundreds of kernels of a few microseconds each,
every one launched from Python. Two measurements for `train_step.py --device cuda`:

- `launches(step)`: the kernels (and copies, and memsets) one step starts, counted by PyTorch's
  profiler, which reads CUPTI's record of every kernel in the process, CuPy's included, so the
  same counter counts both frameworks;
- `losses(make)`: a step's losses call by call, so that a step launched as one CUDA graph
  (`tx.jit(step, cuda_graph=True)`) can be held against the plain replay, bit for bit.
"""
from __future__ import annotations


def launches(step) -> dict:
    """Kernels, copies and memsets one call of `step` starts on the GPU (after 3 warm-up calls)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = sum(n.startswith(("Memcpy", "Memset")) for n in names)
    return {"kernels": len(names) - copies, "copies": copies}


def losses(make, steps: int = 6) -> list[float]:
    """The losses of `steps` calls of a step made by `make()` (which seeds): one eager call, then replays."""
    step = make()
    return [step.run(*step.args).item() for _ in range(steps)]
