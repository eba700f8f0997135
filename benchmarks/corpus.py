"""What each default of `train --data` buys on your own corpus: the ablation tables of
docs/results/translate-experiments.md.

    python benchmarks/corpus.py CORPUS [--time 10m | --steps N] [--clock cpu] [--rows before,time,...]
                                       [--seeds N] [--jobs 1] [--write-docs]

--write-docs writes docs/results/corpus.md, or, for some of the rows only (--rows rdrop,tied),
docs/results/corpus-rdrop-tied.md, so that a later experiment does not replace the whole table
(and, with --steps 5000, docs/results/corpus-rdrop-tied-5000-steps.md).

Each row trains the corpus (the file is yours: it is not in the repository) in fresh
processes, as `python -m models train --data CORPUS` does: "before" as it was at first
(4,000 steps of one process), then with a --time budget on one process (what `train` does
on a busy machine), with subword sampling, with sampling and the low-resource settings
(more dropout, fewer pieces), one model on 2 data-parallel processes alone and with R-Drop
or with the output layer tied to the target embedding, and the defaults as `train` runs them
on an idle 2-core machine (an ensemble of 2 models, one process each), with two seeds to show
how much a figure moves by chance. The one-model rows (one-before, one-pieces, one-decay,
one) weigh two changes tried after the ensemble, alone and together: a weight decay of 0.3
(then a default) and a subword piece per 5 pairs instead of per 8 (not); one-decay,
one-linear, one-exempt and one-both two changes tried after that: the learning rate falling
in a straight line to 0 instead of a cosine to 5% (not a default), and the weight decay kept
off biases and LayerNorm (now a default); one-8-heads and one-16-heads, more attention heads
of fewer dimensions each (not a default); one-gelu and one-gelu-tanh, GELU instead of ReLU in
the feed-forward layers, exact and in its tanh form (now a default; the rows before it keep
ReLU, as they measured it); one-pre-ln, and two-relu, two and two-pre-ln, pre-LN alone and an
ensemble of two with ReLU, the defaults and pre-LN (not a default); one-outer-dropout and
two-outer-dropout, dropout only on the embeddings and sublayer outputs, none on the attention
weights and feed-forward activations (fairseq's defaults); two-tied, the ensemble with its output
layer tied to the target embedding (--tie-output); two-lr-4e-3, the ensemble with a peak learning rate
of 4e-3 instead of 2e-3 (now a default); two-decay-0.15, at that rate a weight decay of 0.15 instead of
0.3, and two-warmup-200 and two-warmup-600, warm-ups of 200 and 600 steps instead of 400 (none a
default); two-no-clip and two-clip-0.5, the gradients unclipped or clipped to a global norm of 0.5
instead of 1 (--clip-norm; both behind 1); two-target-first, a chunk's pairs sorted by target length
first; two-2-3 and two-3-1, 2 encoder layers and 3 decoder layers or 3 and 1 (none a default); and
two-dropout-0.05, dropout 0.05 on the embeddings and sublayer outputs instead of 0.1 (now a default;
the rows before it pin 0.1, as they measured it). Every
row scores its held-out test split with greedy search, beam 4 (the fixed decoding before)
and the beam and length penalty the run chose on its validation set, and gives chrF of
that last, the steps it made and the CPU seconds of all its processes. Then the curve of
BLEU against beam width, on the validation set (what the run chose on) and the test set,
for the defaults' first run.

--clock cpu counts each run's --time budget in the CPU seconds of its (first) process, not
wall seconds: on a machine shared with other work, each run then still gets the compute
an idle machine would give it in that time (about: a busy machine's caches slow a step
too). Run alone, the default (wall) is what `train` does. --jobs 2 runs two rows at a time,
for one-process rows counted in CPU seconds on a 2-core machine.

--steps N trains every row (but "before", which has its own) exactly N steps instead: a
--time run chooses its steps from how fast the machine was, and a run of other length is
another trajectory, so the same row and seed can move by 2 BLEU between two runs; a run of
fixed steps is the same run every time, whatever else the machine does (only its CPU seconds
move), and two rows of the same seed differ by their settings alone. --seeds N runs every
row given with seeds 0 to N-1 (each seed is another split, other initial weights and another
order): the spread a change must beat.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from report import written_to_docs

REPO = Path(__file__).resolve().parents[1]


def per_5_pairs(n_pairs: int) -> int:
    """More subword pieces than the defaults' one per 8 pairs (a setting may be a function of the corpus's pairs)."""
    return int(min(4000, max(200, round(n_pairs / 5, -2))))


# The defaults of a time before a change, pinned so that a row keeps meaning what it measured:
# "decay_all" is not a setting of train's, but what the trainer did before it kept the weight
# decay off biases and LayerNorm (`child` applies it, as it applies "target_first", an order of the
# batches that `train` does not offer: Batcher.sort_first)
DROPOUT_0_1 = {"dropout": 0.1}  # before a corpus of 3,000 pairs or more trained with dropout 0.05
LR_2E3 = {"lr": 2e-3, **DROPOUT_0_1}  # before the peak learning rate rose to 4e-3
UNTIED = {"tie_output": False, **LR_2E3}  # before a corpus tied its output layer to the target embedding
# before dropout spared the attention weights and feed-forward activations
EVERYWHERE = {"attention_dropout": None, "activation_dropout": None, **UNTIED}
RELU = {"activation": "relu", **EVERYWHERE}  # before GELU
COSINE_ALL = {"schedule": "cosine", "decay_all": True, **RELU}  # before the decay spared biases and LayerNorm
BEFORE = {"weight_decay": 0.0, "schedule": "cosine", **RELU}  # before weight decay
OUTER_DROPOUT = {"attention_dropout": 0.0, "activation_dropout": 0.0}  # fairseq's defaults, and ours since
AT_4E3 = {"lr": 4e-3, "tie_output": True, **OUTER_DROPOUT, **DROPOUT_0_1}  # the defaults at 4e-3, before 0.05
# name -> (what the row is, the settings it gives, processes); every row but "before" has --time
ROWS = {
    "before": ("before: 4,000 steps", {"steps": 4000, **BEFORE}, 1),
    "time": ("--time (a busy machine: 1 process)", {**RELU}, 1),
    "sampling": ("--time, subword sampling 0.1", {"subword_sampling": 0.1, **RELU}, 1),
    "low-resource": ("--time, subword sampling 0.1, dropout 0.3, 1,200 pieces",
                     {**RELU, "subword_sampling": 0.1, "dropout": 0.3, "vocab_size": 1200}, 1),
    "rdrop": ("--time, 2 processes, R-Drop (--rdrop 5)", {"rdrop": 5.0, **RELU}, 2),
    "tied": ("--time, 2 processes, output tied to the target embedding (--tie-output)",
             {**RELU, "tie_output": True}, 2),
    "data-parallel": ("--time, one model on 2 data-parallel processes (the defaults before ensembles)",
                      {"members": 1, **RELU}, 2),
    "defaults": ("the defaults on an idle 2-core machine: --time, an ensemble of 2 models, a process each",
                 {"members": 2}, 2),
    "one-before": ("one model, one process: a piece per 8 pairs, no weight decay (the defaults before)",
                   {"members": 1, **BEFORE}, 1),
    "one-pieces": ("one model, one process: a piece per 5 pairs, no weight decay",
                   {"members": 1, "vocab_size": per_5_pairs, **BEFORE}, 1),
    "one-decay": ("one model, one process: a piece per 8 pairs, weight decay 0.3 (the defaults then)",
                  {"members": 1, **COSINE_ALL}, 1),
    "one": ("one model, one process: a piece per 5 pairs, weight decay 0.3",
            {"members": 1, "vocab_size": per_5_pairs, **COSINE_ALL}, 1),
    "one-linear": ("one model, one process: weight decay 0.3 on every weight, the learning rate falling linearly "
                   "to 0", {"members": 1, "schedule": "linear", "decay_all": True, **RELU}, 1),
    "one-exempt": ("one model, one process: weight decay 0.3 but not on biases and LayerNorm, cosine to 5% "
                   "(the defaults then)", {"members": 1, "schedule": "cosine", **RELU}, 1),
    "one-both": ("one model, one process: both", {"members": 1, "schedule": "linear", **RELU}, 1),
    "one-8-heads": ("one model, one process: 8 attention heads of 16 dimensions instead of 4 of 32",
                    {"members": 1, "num_heads": 8, **RELU}, 1),
    "one-16-heads": ("one model, one process: 16 attention heads of 8 dimensions",
                     {"members": 1, "num_heads": 16, **RELU}, 1),
    "one-gelu": ("one model, one process: GELU (exact, by erf) instead of ReLU in the feed-forward layers",
                 {"members": 1, "activation": "gelu", **EVERYWHERE}, 1),
    "one-gelu-tanh": ("one model, one process: GELU by its tanh approximation (the defaults then)",
                      {"members": 1, "activation": "gelu_tanh", **EVERYWHERE}, 1),
    "one-pre-ln": ("one model, one process: pre-LN, x + f(norm(x)), instead of post-LN",
                   {"members": 1, "norm_first": True, **EVERYWHERE}, 1),
    "one-outer-dropout": ("one model, one process: dropout only on the embeddings and sublayer outputs, none on "
                          "the attention weights and feed-forward activations (the defaults then)",
                          {"members": 1, **OUTER_DROPOUT, **UNTIED}, 1),
    "two-relu": ("an ensemble of 2 models, a process each: ReLU", {"members": 2, **RELU}, 2),
    "two": ("an ensemble of 2 models, a process each: GELU, tanh form (the defaults then)",
            {"members": 2, **EVERYWHERE}, 2),
    "two-pre-ln": ("an ensemble of 2 models, a process each: GELU, tanh form, pre-LN",
                   {"members": 2, "norm_first": True, **EVERYWHERE}, 2),
    "two-outer-dropout": ("an ensemble of 2 models, a process each: GELU, tanh form, dropout only on the "
                          "embeddings and sublayer outputs (the defaults then)",
                          {"members": 2, **OUTER_DROPOUT, **UNTIED}, 2),
    "two-tied": ("an ensemble of 2 models, a process each: the output layer tied to the target embedding "
                 "(the defaults then)",
                 {"members": 2, "tie_output": True, **OUTER_DROPOUT, **LR_2E3}, 2),
    "two-lr-4e-3": ("an ensemble of 2 models, a process each: a peak learning rate of 4e-3 instead of 2e-3 "
                    "(the defaults then)",
                    {"members": 2, **AT_4E3}, 2),
    "two-decay-0.15": ("an ensemble of 2 models, a process each: a weight decay of 0.15 at the peak learning "
                       "rate of 4e-3 (the decay a step of 0.3 at 2e-3)",
                       {"members": 2, "weight_decay": 0.15, **AT_4E3}, 2),
    "two-warmup-200": ("an ensemble of 2 models, a process each: a warm-up of 200 steps instead of 400",
                       {"members": 2, "warmup": 200, **AT_4E3}, 2),
    "two-warmup-600": ("an ensemble of 2 models, a process each: a warm-up of 600 steps instead of 400",
                       {"members": 2, "warmup": 600, **AT_4E3}, 2),
    "two-no-clip": ("an ensemble of 2 models, a process each: no gradient clipping (--clip-norm 0) instead of "
                    "a global norm of 1",
                    {"members": 2, "clip_norm": 0.0, **AT_4E3}, 2),
    "two-clip-0.5": ("an ensemble of 2 models, a process each: the gradients clipped to a global norm of 0.5 "
                     "instead of 1",
                     {"members": 2, "clip_norm": 0.5, **AT_4E3}, 2),
    "two-target-first": ("an ensemble of 2 models, a process each: a chunk's pairs sorted by target length first, "
                         "then source length, instead of source length first",
                         {"members": 2, "target_first": True, **DROPOUT_0_1}, 2),
    "two-2-3": ("an ensemble of 2 models, a process each: 2 encoder layers and 3 decoder layers instead of 2 and 2",
                {"members": 2, "num_decoder_layers": 3, **DROPOUT_0_1}, 2),
    "two-3-1": ("an ensemble of 2 models, a process each: 3 encoder layers and 1 decoder layer instead of 2 and 2",
                {"members": 2, "num_encoder_layers": 3, "num_decoder_layers": 1, **DROPOUT_0_1}, 2),
    "two-dropout-0.05": ("an ensemble of 2 models, a process each: dropout 0.05 instead of 0.1 (the defaults now)",
                         {"members": 2, "dropout": 0.05}, 2),
}
WIDTHS = (1, 2, 4, 6, 8)  # the beam curve


def child(given: dict, clock: str) -> None:
    """One run, as `train` makes it, with its --time counted on `clock`; rank 0 prints one JSON line."""
    sys.path.insert(0, str(REPO))
    import tinygrad_tx.distributed as dist
    from models.translate.budget import process_started
    from models.translate.evaluation import score
    from models.translate.preparation import JIT_SHAPES, length_multiple
    from models.translate.run import open_run
    from models.translate.settings import settings_for
    from models.translate.sharing import translate_shared
    from models.translate.training import Trainer
    from models.translate.tuning import keep_decoding

    class Silent:
        total = 0

        def update(self, n): pass
        def set_postfix(self, **kw): pass
        def write(self, text): pass
        def refresh(self): pass

    dist.init()
    cpu = clock == "cpu"
    decay_all = given.pop("decay_all", False)
    target_first = given.pop("target_first", False)
    settings = settings_for(given)
    trainer = Trainer(settings, 0.0 if cpu else process_started(), time.process_time if cpu else time.perf_counter)
    if decay_all:  # as the trainer did before: the weight decay on every parameter
        trainer.optimizer.no_decay = ()
    if target_first:  # a chunk's pairs sorted by target length first, and the padding multiple chosen anew
        batcher = trainer.data.batcher
        batcher.sort_first = "target"
        batcher.length_multiple = length_multiple(batcher, JIT_SHAPES)
    trainer.start()
    outcome = trainer.train(Silent())
    # every rank translates a share, as at the end of `train` (sharing.py); rank 0 scores and prints
    run = open_run(trainer.dir)
    chosen = keep_decoding(run, settings, trainer.budget, time.process_time if cpu else time.perf_counter)
    sources = run.held_out("test")
    texts, references = [s for s, _ in sources], [refs for _, refs in sources]
    outputs = {name: translate_shared(run, texts, beam, penalty)
               for name, (beam, penalty) in {"greedy": (1, 0.6), "beam 4": (4, 0.6),
                                             "chosen": (chosen["beam"], chosen["length_penalty"])}.items()}
    if not trainer.main:
        return
    scores = {name: score(out, references, run.tokenizers[1]) for name, out in outputs.items()}
    print(json.dumps({"outcome": outcome, "steps": trainer.step, "processes": dist.world_size(),
                      "decoding": chosen, **{name: {"bleu": m["bleu"], "chrf": m["chrf"]} for name, m in
                                             scores.items()}}))


def measure(corpus: str, row: str, seed: int, budget: str, clock: str, out: Path, steps: int | None = None) -> dict:
    """Train and score one row in fresh processes; its JSON line, with the CPU seconds of all of them.
    With `steps`, a row that does not fix its own trains that many steps instead of `budget`'s time."""
    sys.path.insert(0, str(REPO))
    from models.translate.corpus import read_corpus

    _, given, processes = ROWS[row]
    n_pairs = len(read_corpus(corpus).pairs)
    given = {"data": corpus, "out": str(out), "seed": seed,
             **{name: value(n_pairs) if callable(value) else value for name, value in given.items()}}
    if "steps" not in given:
        given.update({"steps": steps} if steps else {"time": budget})
    command = [sys.executable, __file__, "--child", json.dumps(given), "--clock", clock]
    if processes > 1:
        from models.translate.launch import mpiexec

        command = [mpiexec(), "-n", str(processes), *command]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    with open(out.with_suffix(".out"), "w+") as stdout, open(out.with_suffix(".err"), "w+") as stderr:
        child_process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, env=env)
        _, status, usage = os.wait4(child_process.pid, 0)  # its CPU seconds and its children's, apart from other rows'
        child_process.returncode = returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait again
        if returncode:
            stderr.seek(0)
            raise subprocess.CalledProcessError(returncode, command, stderr=stderr.read())
        stdout.seek(0)
        return {**json.loads(stdout.read().splitlines()[-1]), "cpu_s": usage.ru_utime + usage.ru_stime}


def curve(run_dir: Path) -> list[tuple[int, float, float]]:
    """(width, validation BLEU, test BLEU) at the run's chosen length penalty, for each of WIDTHS."""
    from models.translate.evaluation import score, translate
    from models.translate.run import open_run

    run = open_run(run_dir)
    penalty = run.decoding()[1]
    rows = []
    for width in WIDTHS:
        bleu = []
        for split in ("valid", "test"):
            sources = run.held_out(split)
            outputs = translate(run.model, [s for s, _ in sources], run.src_vocab, run.tgt_vocab, run.tokenizers,
                                width, length_penalty=penalty)
            bleu.append(score(outputs, [refs for _, refs in sources], run.tokenizers[1])["bleu"])
        rows.append((width, *bleu))
    return rows


def chosen_on(decoding: dict) -> float:
    """The validation BLEU of the decoding chosen (among those tried)."""
    return next(t["bleu"] for t in decoding["tried"]
                if (t["beam"], t["length_penalty"]) == (decoding["beam"], decoding["length_penalty"]))


def decoding_text(chosen: dict) -> str:
    return "greedy" if chosen["beam"] == 1 else f"beam {chosen['beam']}, α {chosen['length_penalty']:g}"


def main() -> None:
    sys.path.insert(0, str(REPO))
    from models.translate.cli import positive

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--time", default="10m", help="each run's budget (default 10m)")
    length.add_argument("--steps", type=positive,
                        help="instead of --time: each row trains exactly this many steps, so that its figures depend "
                             "on its seed alone, not on the machine's speed (a row with steps of its own keeps them)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--seeds", type=positive,
                        help="seeds of every row given (default: 2 for the defaults' row, 1 for the others)")
    parser.add_argument("--jobs", type=int, default=1, help="rows run at a time (default 1)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child), args.clock)
        return
    if not args.corpus or not Path(args.corpus).is_file():
        parser.error(f"give the corpus file to train on: {args.corpus!r} is not a file")
    rows = args.rows.split(",")
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; known: {', '.join(ROWS)}")
    clock = "CPU seconds" if args.clock == "cpu" else "wall seconds"
    length = f"{args.steps:,} steps" if args.steps else f"--time {args.time} ({clock})"
    print(f"{Path(args.corpus).name}, {length}; test BLEU with greedy search, beam 4 and the "
          f"decoding chosen on the validation set (and its validation BLEU)\n")
    print("| run | steps | BLEU greedy | BLEU beam 4 | BLEU chosen (decoding) | chrF | validation BLEU | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        def seeds(row: str) -> int:
            return args.seeds or (2 if row == "defaults" else 1)

        # the defaults last: the beam curve below follows their table rows
        jobs = [(row, seed) for row in sorted(rows, key=lambda row: row == "defaults")
                for seed in range(seeds(row))]
        def run(job: tuple[str, int]) -> dict:
            row, seed = job
            return measure(args.corpus, row, seed, args.time, args.clock, Path(tmp) / f"{row}-{seed}", args.steps)

        with ThreadPoolExecutor(args.jobs) as pool:
            results = pool.map(run, jobs)
            for (row, seed), r in zip(jobs, results):  # in order, each as soon as it and those above are done
                named = row == "defaults" or seeds(row) > 1
                print(f"| {ROWS[row][0]}{f', seed {seed}' if named else ''} | {r['steps']:,} "
                      f"| {r['greedy']['bleu']:.1f} | {r['beam 4']['bleu']:.1f} | {r['chosen']['bleu']:.1f} "
                      f"({decoding_text(r['decoding'])}) | {r['chosen']['chrf']:.1f} | {chosen_on(r['decoding']):.1f} "
                      f"| {r['cpu_s']:.0f} |",
                      flush=True)
        if "defaults" in rows:
            print("\nBLEU against beam width (the defaults' run, seed 0, its chosen length penalty; width 1 is "
                  "greedy search)\n")
            print("| beam width | " + " | ".join(map(str, WIDTHS)) + " |")
            print("|---|" + "---|" * len(WIDTHS))
            points = curve(Path(tmp) / "defaults-0")
            print("| validation | " + " | ".join(f"{v:.1f}" for _, v, _ in points) + " |")
            print("| test | " + " | ".join(f"{t:.1f}" for _, _, t in points) + " |")


def table_name() -> str:
    """docs/results/<this>.md: "corpus" for every row, else named after the rows run."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--rows", default=",".join(ROWS))
    peek.add_argument("--steps")
    given = peek.parse_known_args()[0]
    rows = given.rows.split(",")
    name = "corpus" if set(rows) == set(ROWS) else "-".join(["corpus", *rows])
    return f"{name}-{given.steps}-steps" if given.steps else name


if __name__ == "__main__":
    with written_to_docs(table_name(), markdown=True):
        main()
