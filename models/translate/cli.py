"""The command line: `python -m models train | evaluate | translate | tasks`.

    python -m models train --task reverse            # trains, checkpoints, prints samples
    python -m models evaluate --checkpoint runs/reverse --json
    python -m models translate --checkpoint runs/reverse "abcdef" --attention attention.png
    python -m models tasks
    python -m models explore runs/reverse                # the browser explorer (graph, translate, training)

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

from threadpoolctl import threadpool_limits

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist

from .corpus import Sources, describe, group_references, normalise, read_corpus
from ..text.data import EOS, DataError
from .evaluation import BEAM, InputTooLong, by_length, cross_attention, encode_sources, score, translate
from .plots import check_picture_path, plot_attention
from .ranks import EveryRankError, parsed_together, together
from .run import Run, RunError, open_run
from .settings import TrainSettings, add_arguments, corpus_defaults, settings_for
from .tasks import TASKS, probe_pairs
from ..text.tokenization import KINDS
from .training import Trainer

USER_ERRORS = (DataError, RunError, InputTooLong, tx.DeviceError, ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> None:
    try:
        if dist.launched_by_mpi():  # every rank parses its command line before any waits for the others
            args = parsed_together(lambda: parser().parse_args(argv))
            if args is None:  # --help, printed
                sys.exit(0)
        else:
            args = parser().parse_args(argv)
        threadpool_limits(args.threads, user_api="blas")
        if args.command == "train":
            dist.init(args.device)  # under mpiexec: join the job, each rank on its own GPU
        if args.command not in ("tasks", "corpus"):
            tx.set_device(args.device)  # fails here, with the fix, when CUDA is unavailable
        args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
    except USER_ERRORS as e:
        if getattr(e, "shown", True):
            print(f"error: {e}", file=sys.stderr)
        if isinstance(e, EveryRankError):  # every rank stops here together: none waits for another
            sys.exit(2)
        dist.exit(2)  # with several ranks, ends them all: the others would wait for this one
    except BrokenPipeError:  # `python -m models tasks | head -1`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush cannot fail again
        sys.exit(1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m models", description="Train and use toy translation transformers.")
    sub = p.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model on a built-in task or a TSV corpus")
    add_arguments(train)
    train.set_defaults(run=run_train)

    evaluate = sub.add_parser("evaluate", help="score a trained model on its held-out test pairs")
    evaluate.add_argument("--checkpoint", required=True, help="a run directory written by train")
    evaluate.add_argument("--beam", type=int, default=BEAM, help=f"beam size (default {BEAM}; 1: greedy search)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--by-length", action="store_true", help="also show exact match by source length")
    evaluate.add_argument("--data", help="score these source<TAB>target pairs instead of the held-out test split")
    evaluate.set_defaults(run=run_evaluate)

    tr = sub.add_parser("translate", help="translate sentences (arguments, or lines on standard input)")
    tr.add_argument("--checkpoint", required=True, help="a run directory written by train")
    tr.add_argument("sentences", nargs="*")
    tr.add_argument("--beam", type=int, default=BEAM, help=f"beam size (default {BEAM}; 1: greedy search)")
    tr.add_argument("--attention", metavar="OUT.png", help="draw the first sentence's cross-attention")
    tr.set_defaults(run=run_translate)

    tasks = sub.add_parser("tasks", help="list the built-in tasks with an example pair each")
    tasks.add_argument("--probe", metavar="TASK", help="print TASK's coverage probe pairs as TSV instead")
    tasks.set_defaults(run=run_tasks)

    corpus = sub.add_parser("corpus", help="describe a source<TAB>target corpus before training on it")
    corpus.add_argument("file")
    corpus.add_argument("--src-col", type=int, default=1)
    corpus.add_argument("--tgt-col", type=int, default=2)
    corpus.add_argument("--tokenizer", choices=KINDS, default=TrainSettings.tokenizer)
    corpus.add_argument("--vocab-size", type=int, default=None, help="default: what train would pick for the file")
    corpus.set_defaults(run=run_corpus)

    explore = sub.add_parser("explore", help="look inside a trained run in the browser: graph, backward, "
                                             "translation, training")
    explore.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by train")
    explore.add_argument("--port", type=positive, default=None, help="default: a free one")
    explore.add_argument("--host", default="127.0.0.1",
                         help="default 127.0.0.1 (this machine only); another address lets others in")
    explore.add_argument("--open", action="store_true", help="open the page in the default browser")
    explore.add_argument("--html", metavar="FILE", default=None,
                         help="write the page as one self-contained file instead of serving it (the step, its walk "
                              "and one translation; it opens from disk with no server)")
    explore.set_defaults(run=run_explore)
    for command in (train, evaluate, tr, tasks, corpus, explore):
        command.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu (NumPy) or cuda (CuPy)")
        command.add_argument("--threads", type=positive, default=1,
                             help="BLAS threads (default 1: beside another busy process, more threads spin "
                                  "against each other and a step gets slower; "
                                  "benchmarks/threads.py measures it)")
    return p


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run_train(args: argparse.Namespace) -> None:
    given = {f.name: getattr(args, f.name) for f in fields(TrainSettings) if getattr(args, f.name, None) is not None}
    settings = together(settings_for, given)  # under mpiexec: a bad argument is printed once
    from tqdm import tqdm

    trainer = Trainer(settings)
    trainer.start()
    ranks = f", {dist.world_size()} processes" if dist.world_size() > 1 else ""
    say = print if trainer.main else (lambda *_: None)
    data = trainer.data
    for note in data.notes:
        say(f"note: {note}")
    if data.dropped:
        say(f"left out {data.dropped} pairs longer than --max-len {settings.max_len} tokens")
    kinds = " -> ".join(t.kind for t in data.tokenizers)
    say(f"training on {len(data.train_pairs)} pairs ({kinds} tokens, vocabularies {len(data.src_vocab)}"
        f" and {len(data.tgt_vocab)}), {sum(p.size for p in trainer.model.parameters()):,} parameters{ranks}, "
        f"{settings.steps} steps of {settings.batch_size} "
        f"(about {settings.steps * settings.batch_size / max(1, len(data.train_pairs)):.0f} epochs), "
        f"run directory {trainer.dir}")
    started = time.perf_counter()
    with tqdm(total=settings.steps, initial=trainer.step, unit="step", dynamic_ncols=True,
              disable=not trainer.main) as progress:
        outcome = trainer.train(progress)
    if outcome == "interrupted":
        say(f"interrupted at step {trainer.step}: saved {trainer.dir / 'last.npz'}; continue with --resume")
        sys.exit(130)
    say(f"trained to step {trainer.step} of {settings.steps} in {time.perf_counter() - started:.0f} s")
    if trainer.main:
        report(open_run(trainer.dir, settings.device), beam=BEAM, as_json=False)


def run_evaluate(args: argparse.Namespace) -> None:
    check_beam(args.beam)
    run = open_run(args.checkpoint, args.device)
    sources = group_references(read_corpus(args.data).pairs) if args.data else None
    report(run, args.beam, args.json, args.by_length, sources)


def check_beam(beam: int) -> None:
    if beam < 1:
        raise ValueError(f"--beam must be >= 1 (1 is greedy search), not {beam}")


def report(run: Run, beam: int, as_json: bool, lengths: bool = False, sources: Sources | None = None) -> None:
    """Score the best checkpoint on the held-out test sources (or `sources`) against all their
    references and show a few translations."""
    where = "given pairs" if sources is not None else "held-out test"
    sources = sources if sources is not None else run.held_out("test")
    texts, references = [s for s, _ in sources], [refs for _, refs in sources]
    outputs = translate(run.model, texts, run.src_vocab, run.tgt_vocab, run.tokenizers, beam)
    metrics = score(outputs, references, run.tokenizers[1])
    table = by_length(texts, outputs, references, run.tokenizers[0]) if lengths else []
    if as_json:
        print(json.dumps({**metrics, "by_length": table} if lengths else metrics))
        return
    decoding = "greedy" if beam == 1 else f"beam {beam}"
    print(f"{where} ({metrics['n']} sources, {metrics['references']} references, {decoding}): exact match "
          f"{metrics['exact_match']:.2f}%, token accuracy {metrics['token_accuracy']:.2f}%, "
          f"BLEU {metrics['bleu']:.2f}, chrF {metrics['chrf']:.2f}")
    if table:
        print(f"exact match by source length ({run.tokenizers[0].kind} tokens):")
        for length, n, exact in table:
            print(f"  {length:4d} tokens: {exact:6.2f}% of {n}")
    for (source, refs), output in list(zip(sources, outputs))[:5]:
        right = output in refs
        print(f"  {'✓' if right else '✗'} {source!r} -> {output!r}" + ("" if right else f"  (reference {refs[0]!r})"))


def run_translate(args: argparse.Namespace) -> None:
    check_beam(args.beam)
    if args.attention:
        check_picture_path(args.attention)
    run = open_run(args.checkpoint, args.device)
    # one output line per input line; the same normalisation as the training pairs got
    sentences = [normalise(text) for text in args.sentences or sys.stdin.read().splitlines()]
    if not sentences:
        raise ValueError("nothing to translate: give sentences as arguments or on standard input")
    src_tok, tgt_tok = run.tokenizers
    for sentence in sentences:
        unknown = [t for t in src_tok.encode(sentence) if t not in run.src_vocab.ids]
        if unknown:
            print(f"note: {', '.join(map(repr, unknown))} in {sentence[:40]!r} never occurred in training "
                  f"and will be read as <unk>", file=sys.stderr)
    outputs = translate(run.model, sentences, run.src_vocab, run.tgt_vocab, run.tokenizers, args.beam)
    if args.attention and not outputs[0]:  # said before any output, so that stdout holds all or nothing
        raise ValueError("the first sentence translates to nothing, so there is no attention to draw")
    for output in outputs:
        print(output)
    if args.attention:
        src = encode_sources(sentences[:1], run.src_vocab, src_tok, run.model.config.max_len)
        # row i: the query that produced output token i, fed BOS and the tokens before it;
        # the labels are the tokens the model saw (subword pieces for bpe/unigram)
        output_tokens = tgt_tok.encode(outputs[0])
        weights = cross_attention(run.model, src, run.tgt_vocab.encode(output_tokens))  # (heads, T + 1, S)
        if plot_attention(weights, src_tok.encode(sentences[0]), output_tokens + [EOS], args.attention):
            print(f"cross-attention of {sentences[0]!r} written to {args.attention}", file=sys.stderr)
        else:
            print('matplotlib is not installed, so no picture: pip install "tinygrad-tx[viz]"', file=sys.stderr)


def run_explore(args: argparse.Namespace) -> None:
    from .explore import open_explorer, save_page
    from .explore_files import wait_for_run_json

    if args.html:
        save_page(args.run_dir, args.html, args.device)
        print(f"explorer page written to {args.html}", file=sys.stderr)
        return
    wait_for_run_json(args.run_dir)  # a run `train` has just started: from its first second
    explorer = open_explorer(args.run_dir, args.device)  # a bad run directory stops here, before any server
    try:
        explorer.serve(args.host, args.port, args.open)
    except OSError as e:  # the port is taken, the host is not this machine's
        raise ValueError(f"cannot serve on {args.host}:{args.port or 'a free port'}: {e.strerror or e}") from None


def run_corpus(args: argparse.Namespace) -> None:
    corpus = read_corpus(args.file, args.src_col, args.tgt_col, allow_empty=True)
    vocab_size = args.vocab_size or corpus_defaults(len(corpus.pairs))["vocab_size"]
    print("\n".join(describe(corpus, args.tokenizer, vocab_size)))


def run_tasks(args: argparse.Namespace) -> None:
    if args.probe:
        sys.stdout.write("".join(f"{s}\t{t}\n" for s, t in probe_pairs(args.probe)))
        return
    for name, task in TASKS.items():
        source, target = task.example()
        print(f"{name:8s} {task.description}\n         {source!r} -> {target!r}")
