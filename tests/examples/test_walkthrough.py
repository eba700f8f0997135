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


def test_without_graphviz_the_walkthrough_says_so_in_one_line_once(tmp_path):
    """A missing Graphviz is said in one line, once; it printed a raw UserWarning echoing a source
    line, and step [7] said it again."""
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "autograd_walkthrough.py"), "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=120,
                            env={"PATH": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"})  # no `dot` on this PATH
    assert result.returncode == 0, result.stderr
    said = (result.stdout + result.stderr).splitlines()
    assert "Warning" not in result.stderr and not any("render(" in line for line in said), result.stderr
    graphviz = [line for line in said if "Graphviz" in line]
    assert len(graphviz) == 1 and graphviz[0].startswith("[7]") and "apt-get install graphviz" in graphviz[0]
