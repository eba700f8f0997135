"""Collectives across two processes (distributed/collectives.py): all_reduce and broadcast of
tensors, strided views, 0-d results and numbers, and the same inside a jitted step, checked
against what one process computes without MPI."""
import numpy as np

from .helpers import needs_mpi, one_gpu_per_rank, replayed_as_eager, results, run_worker


@needs_mpi
def test_collectives(device, tmp_path):
    one_gpu_per_rank(device)
    done = run_worker("collectives", device, tmp_path)
    assert done.returncode == 0, done.stderr
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)
    for r, got in enumerate(results(tmp_path)):
        np.testing.assert_array_equal(got["sum"], base * 1 + base * 2)  # ranks hold base·(rank+1)
        np.testing.assert_array_equal(got["mean"], np.full(5, 1.5))  # (1 + 2) / 2
        assert got["mean"].dtype == np.float64
        np.testing.assert_array_equal(got["host"], 2 * np.arange(4) + 10)  # (0..3) + (10..13)
        expected = strided * (r + 1)
        expected[:, ::2] = strided[:, ::2] * 3  # only the strided view was reduced
        np.testing.assert_array_equal(got["strided"], expected)
        np.testing.assert_array_equal(got["broadcast"], np.full(3, 7.0))  # root 1's values
        assert got["loss"].shape == () and got["loss"] == 4.5  # the mean of 0+1+2 and 0+2+4
        assert got["zero_d_broadcast"] == 2.0  # rank 1's 2·1
        assert got["count"] == 3 and got["float_mean"] == 0.5


@needs_mpi
def test_collectives_inside_a_jitted_step_are_made_at_every_replay(device, tmp_path):
    """dist.broadcast / all_reduce called in the step itself: replays make them
    again, so the ranks' weights stay equal and equal eager's bit for bit."""
    ranks = replayed_as_eager("collectives_jit", device, tmp_path)
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)  # the ranks agree
