"""`train` under mpiexec ends with every rank translating a share (models/translate/sharing.py):
what it chooses and reports must be what one process, translating every sentence, finds."""
import json

from models.translate.evaluation import translate
from models.translate.run import open_run
from models.translate.tuning import choose_decoding

from ...distributed.helpers import mpiexec, needs_mpi
from .test_cli import TINY, run_cli
from .test_corpus_cli import write_anki

GATHER = """
import json, sys
import tinygrad_tx.distributed as dist
from models.translate.sharing import gather_texts
texts = ["", "é", "Il fait beau\u202f!", "日本語", "a" * 300, "🙂 ok", "fin"]  # 7: rank 0 holds 4, rank 1 holds 3
r = dist.rank()
with open(f"{sys.argv[1]}/rank{r}.json", "w") as f:
    json.dump(gather_texts(texts[r::2], len(texts), r, 2), f)
"""


@needs_mpi
def test_every_rank_gets_every_text_in_its_place(tmp_path):
    done = mpiexec("-c", GATHER, str(tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr
    expected = ["", "é", "Il fait beau\u202f!", "日本語", "a" * 300, "🙂 ok", "fin"]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == expected


@needs_mpi
def test_a_job_of_two_ranks_chooses_and_reports_what_one_process_finds(tmp_path):
    """An ensemble of two models on two ranks, on a French corpus (accented outputs cross between
    the ranks): the decoding's tries score as one process scores them, and the report's line is
    `evaluate`'s, which translates every test source in one process."""
    data, out = write_anki(tmp_path / "fra.txt"), tmp_path / "run"
    done = mpiexec("-m", "models", "train", "--data", str(data), "--out", str(out), "--vocab-size", "120",
                   *TINY, "--steps", "400", "--d-model", "32", "--d-ff", "64", "--members", "2", timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("held-out test") == 1  # rank 0 alone prints the report

    chosen = json.loads((out / "run.json").read_text())["decoding"]
    alone = choose_decoding(open_run(out), "bleu")
    assert len(chosen["tried"]) > 1
    for mine, theirs in zip(chosen["tried"], alone["tried"], strict=True):
        assert {k: v for k, v in mine.items() if k != "seconds"} == {k: v for k, v in theirs.items() if k != "seconds"}
    assert (chosen["beam"], chosen["length_penalty"]) == (alone["beam"], alone["length_penalty"])

    evaluated = run_cli("evaluate", "--run", str(out))
    assert evaluated.returncode == 0, evaluated.stderr
    reported = next(line for line in done.stdout.splitlines() if line.startswith("held-out test"))
    assert reported == evaluated.stdout.splitlines()[0]
    run = open_run(out)
    outputs = translate(run.model, [s for s, _ in run.held_out("test")], run.src_vocab, run.tgt_vocab, run.tokenizers)
    assert len(set(outputs)) > 5  # outputs that differ: one put in another's place would change the scores
