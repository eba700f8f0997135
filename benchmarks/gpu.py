"""What a step spends on a GPU besides arithmetic: kernel launches, and whether it can be one CUDA graph.

A small model's step on a GPU is launch-bound: hundreds of kernels of a few microseconds each,
every one launched from Python. Two measurements for `train_step.py --device cuda`:

- `launches(step)`: the kernels (and copies, and memsets) one step starts, counted by PyTorch's
  profiler, which reads CUPTI's record of every kernel in the process, CuPy's included, so the
  same counter counts both frameworks;
- `graph(step)`: a `tx.jit` replay captured with CuPy's stream capture (`Stream.begin_capture`)
  and launched as one CUDA graph: milliseconds a step and whether its loss equals the replay's,
  or, where the capture breaks, the first thing in the step that broke it (a read on the host,
  a memory allocation, ...), named by file and line.
"""
from __future__ import annotations

import time
import traceback


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


def _where(error: BaseException) -> str:
    """The innermost frame of this project's code (tinygrad_tx, models) an error came through."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "tinygrad_tx" in f.filename or "models" in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(error.__traceback__)[-1]
    path = f.filename[f.filename.find("tinygrad_tx"):] if "tinygrad_tx" in f.filename else f.filename
    return f"{path}:{f.lineno} ({f.name}: {f.line})"


def graph(step, twin, repeats: int = 5) -> dict:
    """Capture one replay of the jitted `step` as a CUDA graph and launch it `repeats` times,
    beside `twin` (the same model, seed and batch) replayed as usual: milliseconds a launch and
    the largest difference between the two losses step by step; or why the capture broke."""
    import cupy

    run, args = step.run, step.args
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(3):  # record, then replays on this stream, so the pool holds its blocks
            run(*args)
            twin.run(*twin.args)
        stream.synchronize()
        try:
            stream.begin_capture()
            try:
                loss = run(*args)
            finally:
                captured = stream.end_capture()
        except Exception as error:  # noqa: BLE001  (reported, not hidden: the row says what broke)
            error = error.__context__ or error  # ending a broken capture fails too: report what broke it
            return {"captured": False, "why": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}",
                    "where": _where(error)}
        times, differences = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            captured.launch(stream)
            stream.synchronize()
            times.append(time.perf_counter() - start)
            differences.append(abs(float(loss.data) - float(twin.run(*twin.args).data)))
    return {"captured": True, "ms": 1e3 * sorted(times)[len(times) // 2], "loss_difference": max(differences)}
