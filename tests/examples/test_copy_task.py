"""examples/copy_task.py's output says what its ids are."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_translations_show_symbols_and_name_the_end():
    """The translations show symbols and name the end; they were raw id lists with an unexplained
    trailing 2 (the end id)."""
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "copy_task.py"), "--steps", "60"],
                            capture_output=True, text=True, timeout=300, env={"OPENBLAS_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    pairs = [line.split(None, 1)[1].split() for line in result.stdout.splitlines() if line.startswith(("source", "  ->"))]
    assert len(pairs) == 8, result.stdout
    for tokens in pairs:  # symbols are 3 .. 15; the end id, 2, is never printed bare
        assert all(t == "<eos>" or 3 <= int(t) <= 15 for t in tokens), tokens
        assert "<eos>" not in tokens[:-1]


def test_a_number_of_steps_it_cannot_train_is_refused_in_one_line():
    """`--steps 0` was a ValueError traceback from the schedule (its warm-up is 50 steps)."""
    for steps in ("0", "50", "nan", "9" * 400):
        result = subprocess.run([sys.executable, str(ROOT / "examples" / "copy_task.py"), "--steps", steps],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr and "--steps" in result.stderr
