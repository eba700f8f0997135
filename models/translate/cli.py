"""The command line: `python -m models train | evaluate | translate | tasks`.

    python -m models train --task reverse            # trains, checkpoints, prints samples
    python -m models evaluate --checkpoint runs/reverse --json
    python -m models translate --checkpoint runs/reverse "abcdef" --attention attention.png
    python -m models tasks

Errors in what the user gave (unknown task, bad file, missing checkpoint, no GPU)
print one line saying what is wrong and exit with status 2; nothing is overwritten.

`mpiexec -n N python -m models train ...` trains data-parallel on N processes
(see models/translate/training.py); only rank 0 prints.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import fields
from pathlib import Path

from threadpoolctl import threadpool_limits

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist

from .data import EOS, DataError, clean_field, detokenize, tokenize
from .evaluation import InputTooLong, cross_attention, encode_sources, score, translate
from .plots import plot_attention
from .run import RunError, open_run
from .tasks import TASKS
from .training import Trainer, TrainSettings, settings_for

USER_ERRORS = (DataError, RunError, InputTooLong, tx.DeviceError, ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    threadpool_limits(args.threads, user_api="blas")
    try:
        if args.command == "train":
            dist.init(args.device)  # under mpiexec: join the job, each rank on its own GPU
        if args.command != "tasks":
            tx.set_device(args.device)  # fails here, with the fix, when CUDA is unavailable
        args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        dist.exit(2)  # with several ranks, ends them all: the others would wait for this one
    except BrokenPipeError:  # `python -m models tasks | head -1`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush cannot fail again
        sys.exit(1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m models", description="Train and use toy translation transformers.")
    sub = p.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model on a built-in task or a TSV corpus")
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help=f"one of: {', '.join(TASKS)}")
    source.add_argument("--data", help="a file of source<TAB>target lines")
    defaults = TrainSettings()
    for name in ("out", "steps", "batch_size", "d_model", "heads", "layers", "d_ff", "dropout", "lr",
                 "warmup", "label_smoothing", "seed", "n_train", "max_len", "eval_every", "level"):
        kind = type(getattr(defaults, name)) if getattr(defaults, name) is not None else str
        train.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                           help=f"default: {getattr(defaults, name)} (tasks may set their own)")
    train.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    train.add_argument("--no-jit", dest="jit", action="store_false", default=None,
                       help="run every training step eagerly instead of replaying it with tx.jit")
    train.set_defaults(run=run_train)

    evaluate = sub.add_parser("evaluate", help="score a trained model on its held-out test pairs")
    evaluate.add_argument("--checkpoint", required=True, help="a run directory written by train")
    evaluate.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.set_defaults(run=run_evaluate)

    tr = sub.add_parser("translate", help="translate sentences (arguments, or lines on standard input)")
    tr.add_argument("--checkpoint", required=True, help="a run directory written by train")
    tr.add_argument("sentences", nargs="*")
    tr.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
    tr.add_argument("--attention", metavar="OUT.png", help="draw the first sentence's cross-attention")
    tr.set_defaults(run=run_translate)

    tasks = sub.add_parser("tasks", help="list the built-in tasks with an example pair each")
    tasks.set_defaults(run=run_tasks)
    for command in (train, evaluate, tr, tasks):
        command.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu (NumPy) or cuda (CuPy)")
        command.add_argument("--threads", type=positive, default=1,
                             help="BLAS threads (default 1: two processes with 2 threads each on 2 cores "
                                  "spin against each other and each step gets 10-20x slower; "
                                  "see benchmarks/threads.py)")
    return p


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run_train(args: argparse.Namespace) -> None:
    given = {f.name: getattr(args, f.name) for f in fields(TrainSettings)
             if getattr(args, f.name, None) is not None}
    settings = settings_for({**given, "resume": args.resume, "device": args.device})
    from tqdm import tqdm

    trainer = Trainer(settings)
    trainer.start()
    ranks = f", {dist.world_size()} processes" if dist.world_size() > 1 else ""
    say = print if trainer.main else (lambda *_: None)
    if trainer.dropped:
        say(f"left out {trainer.dropped} pairs longer than --max-len {settings.max_len} tokens")
    say(f"training on {len(trainer.train_pairs)} pairs ({trainer.src_level} -> {trainer.tgt_level} tokens), "
        f"{sum(p.size for p in trainer.model.parameters()):,} parameters{ranks}, run directory {trainer.dir}")
    started = time.perf_counter()
    with tqdm(total=settings.steps, initial=trainer.step, unit="step", dynamic_ncols=True,
              disable=not trainer.main) as progress:
        outcome = trainer.train(progress)
    if outcome == "interrupted":
        say(f"interrupted at step {trainer.step}: saved {trainer.dir / 'last.npz'}; continue with --resume")
        sys.exit(130)
    say(f"trained to step {trainer.step} of {settings.steps} in {time.perf_counter() - started:.0f} s")
    if trainer.main:
        report(trainer.dir, beam=1, as_json=False, device=settings.device)


def run_evaluate(args: argparse.Namespace) -> None:
    check_beam(args.beam)
    report(args.checkpoint, args.beam, args.json, args.device)


def check_beam(beam: int) -> None:
    if beam < 1:
        raise ValueError(f"--beam must be >= 1 (1 is greedy search), not {beam}")


def report(directory, beam: int, as_json: bool, device: str) -> None:
    """Score the best checkpoint on the held-out test pairs and show a few translations."""
    run = open_run(directory, device)
    pairs = run.held_out("test")
    outputs = translate(run.model, [s for s, _ in pairs], run.src_vocab, run.tgt_vocab, run.levels, beam)
    metrics = score(outputs, [t for _, t in pairs], run.levels[1])
    if as_json:
        print(json.dumps(metrics))
        return
    print(f"held-out test ({metrics['n']} pairs): exact match {metrics['exact_match']:.2f}%, "
          f"token accuracy {metrics['token_accuracy']:.2f}%, BLEU {metrics['bleu']:.2f}")
    for (source, reference), output in list(zip(pairs, outputs))[:5]:
        mark = "✓" if output == reference else "✗"
        print(f"  {mark} {source!r} -> {output!r}" + ("" if output == reference else f"  (reference {reference!r})"))


def run_translate(args: argparse.Namespace) -> None:
    check_beam(args.beam)
    if args.attention and not Path(args.attention).resolve().parent.is_dir():
        raise ValueError(f"--attention {args.attention}: the directory to write it into does not exist")
    run = open_run(args.checkpoint, args.device)
    # one output line per input line; the same clean-up as the training pairs got
    sentences = [clean_field(text) for text in args.sentences or sys.stdin.read().splitlines()]
    if not sentences:
        raise ValueError("nothing to translate: give sentences as arguments or on standard input")
    outputs = translate(run.model, sentences, run.src_vocab, run.tgt_vocab, run.levels, args.beam)
    for output in outputs:
        print(output)
    if args.attention:
        if not outputs[0]:
            raise ValueError("the first sentence translates to nothing, so there is no attention to draw")
        src_level, tgt_level = run.levels
        src = encode_sources(sentences[:1], run.src_vocab, src_level, run.model.config.max_len)
        # row i: the query that produced output token i, fed BOS and the tokens before it
        out_ids = run.tgt_vocab.encode(tokenize(outputs[0], tgt_level))
        weights = cross_attention(run.model, src, out_ids)  # (heads, T + 1, S)
        source_tokens = tokenize(sentences[0], src_level)
        output_tokens = tokenize(outputs[0], tgt_level) + [EOS]
        if plot_attention(weights, source_tokens, output_tokens, args.attention):
            print(f"cross-attention of {detokenize(source_tokens, src_level)!r} written to {args.attention}",
                  file=sys.stderr)
        else:
            print('matplotlib is not installed, so no picture: pip install "tinygrad-tx[viz]"', file=sys.stderr)


def run_tasks(args: argparse.Namespace) -> None:
    for name, task in TASKS.items():
        source, target = task.example()
        print(f"{name:8s} {task.description}\n         {source!r} -> {target!r}")
