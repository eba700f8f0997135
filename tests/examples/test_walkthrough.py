"""examples/autograd_walkthrough.py runs as a script and writes its pictures."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_walkthrough_runs_and_writes_its_pictures(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "autograd_walkthrough.py"), "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for step in range(1, 11):
        assert f"[{step}]" in result.stdout
    assert "adds up to each leaf's .grad: True" in result.stdout
    assert "Log produced Inf in forward" in result.stdout
    assert (tmp_path / "graph.dot").exists() and (tmp_path / "attention.png").exists()
