"""The command line, `python -m models COMMAND`: what each command does. Their flags, and
examples of each, are in arguments.py, which `python -m models [COMMAND] --help` shows.

Errors in what the user gave (unknown task, bad file, missing checkpoint, no GPU)
print one line saying what is wrong and exit with status 2; nothing is overwritten.
A file the system will not let it read or write (a full disk, a read-only file
system) is one line naming the file and the reason, and exit status 1.

`mpiexec -n N python -m models train ...` trains data-parallel on N processes, or with
`--members N` an ensemble of N models, one a process (see models/translate/training.py);
only rank 0 prints.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import fields

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
from tinygrad_tx.files import os_error_line

from . import arguments
from .corpus import Sources, describe, group_references, normalise, read_corpus, text_lines
from ..text.data import EOS, DataError
from .inputs import cores
from .evaluation import (BEAM, LENGTH_PENALTY, InputTooLong, by_length, cross_attention, encode_sources, score,
                         summary, translate)
from .plots import check_picture_path, plot_attention
from .progress import progress
from .ranks import EveryRankError, parsed_together, together
from .run import Run, RunError, open_run
from .settings import TrainSettings, corpus_defaults, settings_for
from .tasks import TASKS, probe_pairs
from .budget import parse_duration, process_started
from .interrupts import stops_interrupt
from .launch import (ENSEMBLE_EPOCHS, INSTALL_HINT, STARTED, auto_members, auto_processes, can_launch,
                     epochs_a_model, launch)
from .training import Trainer
from .sharing import translate_shared
from .tuning import SIGNIFICANCE, keep_decoding

USER_ERRORS = (DataError, RunError, InputTooLong, tx.DeviceError, ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> None:
    try:
        if dist.launched_by_mpi():  # every rank parses its command line before any waits for the others
            args = parsed_together(lambda: parser().parse_args(argv))
            if args is None:  # --help, printed
                sys.exit(0)
        else:
            args = parser().parse_args(argv)
        args.argv = sys.argv[1:] if argv is None else argv  # what `train` runs again on every process it starts
        if hasattr(args, "device"):  # the commands that compute
            take_device_and_threads(args)
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
    except OSError as e:  # the system refused: a full disk, a read-only file system, a path that cannot be made
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        dist.exit(1)  # every file written whole or not at all (files.py): what was kept is intact


def take_device_and_threads(args: argparse.Namespace) -> None:
    """--device, else $TINYGRAD_TX_DEVICE, else cpu (never a silent CPU: CUDA unavailable fails here,
    saying how to fix it); --threads, else the library's default."""
    args.device = args.device or tx.default_device()
    if args.threads is not None:
        tx.set_num_threads(args.threads)
    if args.command == "train":
        dist.init(args.device)  # under mpiexec: join the job, each rank on its own GPU
    tx.set_device(args.device)


def parser() -> argparse.ArgumentParser:
    return arguments.parser({"train": run_train, "evaluate": run_evaluate, "translate": run_translate,
                             "tasks": run_tasks, "corpus": run_corpus, "explore": run_explore})


def decoding(run: Run, args: argparse.Namespace) -> tuple[int, float]:
    """--beam and --length-penalty where given, the run's chosen decoding for the rest."""
    beam, penalty = run.decoding()
    return (beam if args.beam is None else args.beam,
            penalty if args.length_penalty is None else args.length_penalty)


def run_train(args: argparse.Namespace) -> None:
    # a --time budget counts from here, or from when the command that started these processes began
    started = float(os.environ[STARTED]) if STARTED in os.environ else process_started()
    given = {f.name: getattr(args, f.name) for f in fields(TrainSettings) if getattr(args, f.name, None) is not None}
    settings = together(settings_for, given)  # under mpiexec: a bad argument is printed once
    if "members" not in given and not settings.resume and args.processes is None:
        settings.members, processes = choose_processes(settings)
        args.argv = [*args.argv, "--members", str(settings.members)]  # what every process it starts trains
    else:  # --members from the command line, or from the run.json of a run resumed
        members = "--members" if "members" in given or not settings.resume else f"{settings.out}/run.json's members"
        processes = train_processes(args.processes, settings, members)
    if processes > 1:
        sys.exit(launch(processes, args.argv, started))
    trainer = Trainer(settings, started)
    trainer.start()
    say = print if trainer.main else (lambda *_: None)
    data = trainer.data
    for note in data.notes:
        say(f"note: {note}")
    if data.dropped:
        say(f"left out {data.dropped} pairs longer than --max-len {settings.max_len} tokens")
    say(where_and_how(trainer))
    kinds = " -> ".join(t.kind for t in data.tokenizers)
    models = f"{settings.members} models of " if settings.members > 1 else ""
    passes = epochs(settings.steps * settings.batch_size / max(1, len(data.train_pairs)))
    length = (f"as many steps of {settings.batch_size} as fit in --time {settings.time} (at most {settings.steps}, "
              f"{passes}), chosen once it has timed itself and again at each validation" if not trainer.planned
              else f"{settings.steps} steps of {settings.batch_size} ({passes})")
    say(f"training on {len(data.train_pairs)} pairs ({kinds} tokens, vocabularies {len(data.src_vocab)}"
        f" and {len(data.tgt_vocab)}), {models}{sum(p.size for p in trainer.model.parameters()):,} parameters"
        f"{' each' * (settings.members > 1)}, {length}")
    say(chosen_model_and_training(settings, trainer.schedule.warmup))
    began = time.perf_counter()
    # before a --time run has chosen its steps, the bar knows no total (--steps is only a bound)
    with progress(settings.steps if trainer.planned else None, trainer.step, trainer.main,
                  trainer.budget.training_ends if trainer.budget else None) as bar:
        outcome = trainer.train(bar)
    if outcome == "interrupted":
        say(f"interrupted at step {trainer.step}: saved {trainer.dir / 'last.npz'}; continue with "
            f"python -m models train --out {trainer.dir} --resume")
        sys.exit(130)
    if outcome == "out of time":
        say(f"--time {settings.time} ran out at step {trainer.step} of the {settings.steps} it chose (the machine got "
            f"slower than it measured): the best model so far is kept; --resume trains on to step {settings.steps}")
    with stops_interrupt():  # SIGINT and SIGTERM stop what follows as they stopped training
        try:
            say(f"trained to step {trainer.step} of {settings.steps} in {time.perf_counter() - began:.0f} s")
            run = together(open_run, trainer.dir, settings.device)  # every rank translates a share (sharing.py)
            chosen = keep_decoding(run, settings, trainer.budget)
        except KeyboardInterrupt:  # after training, before the decoding is chosen and kept
            say(f"interrupted while choosing the decoding: the trained model is kept in {trainer.dir}; python -m "
                f"models train --out {trainer.dir} --resume chooses it (until then evaluate and translate use beam "
                f"{BEAM})")
            sys.exit(130)
        try:
            say(describe_decoding(chosen))
            report(run, (chosen["beam"], chosen["length_penalty"]), as_json=False, shown=trainer.main)
        except KeyboardInterrupt:  # the decoding is kept in run.json
            say(f"interrupted during the test report: the run is complete; python -m models evaluate --run "
                f"{trainer.dir}")
            sys.exit(130)


def choose_processes(settings: TrainSettings) -> tuple[int, int]:
    """The models a new run trains and the processes it starts, when neither --members nor
    --processes is given: for a corpus on the CPU, one process per idle core, where mpiexec can
    start them, each training a model of an ensemble (`launch.auto_members`) if each would make at
    least ENSEMBLE_EPOCHS epochs, else all training one model, data-parallel (`launch.auto_processes`);
    for a task, one process and one model."""
    if dist.launched_by_mpi():
        return 1, 1  # an mpiexec job started by hand trains one model on its ranks, unless told --members
    if settings.device != "cpu":
        return 1, 1  # idle CPU cores say nothing of a GPU: `--members N` puts N models on the GPUs
    passes = ensemble_epochs(settings)
    if settings.data is not None and passes < ENSEMBLE_EPOCHS:  # a narrow model stays on one (auto_processes)
        wanted = auto_processes(True, settings.d_model, settings.batch_size)
        return 1, for_idle_cores(wanted, f"training one model on {wanted} processes, data-parallel: a model of "
                                         f"an ensemble would make {passes:.2g} epochs of this corpus, fewer than "
                                         f"{ENSEMBLE_EPOCHS} (--members {wanted} for an ensemble)")
    wanted = auto_members(settings.data is not None, settings.d_model)
    members = for_idle_cores(wanted, f"training {wanted} models side by side, one process each, to translate "
                                     f"with their ensemble (--members 1 for one model)")
    return members, members


def ensemble_epochs(settings: TrainSettings) -> float:
    """About how many epochs each model of an ensemble would make of a --data corpus (0 for a task)."""
    if settings.data is None:
        return 0.0
    pairs = len(read_corpus(settings.data, settings.src_col, settings.tgt_col).pairs)
    return epochs_a_model(settings.steps, settings.batch_size, pairs, parse_duration(settings.time) if settings.time else None)


def train_processes(requested: int | None, settings: TrainSettings, members: str = "--members") -> int:
    """How many processes `train` should start itself (launch.py): 1 when it is one of an
    mpiexec job already; one per model of an ensemble (--members, or as `members` names where
    they come from); `requested` if given, else, for a corpus model on the CPU wide enough to gain,
    one per idle core (`launch.auto_processes`)."""
    if dist.launched_by_mpi():
        return 1
    if settings.members > 1:
        if requested is not None and requested != settings.members:
            raise ValueError(f"--processes {requested} with --members {settings.members}: each model of an ensemble "
                             f"trains on one process of its own; leave --processes out")
        return asked_for(members, settings.members)
    if requested is not None:
        return asked_for("--processes", requested)
    if settings.device != "cpu":
        return 1  # as in choose_processes: idle CPU cores say nothing of a GPU (--processes N: a GPU a rank)
    wanted = auto_processes(settings.data is not None, settings.d_model, settings.batch_size)
    return for_idle_cores(wanted, f"training on {wanted} processes (--processes 1 for one)")


def asked_for(option: str, processes: int) -> int:
    """The `processes` an option asked for; refused, saying how to fix it, where mpiexec cannot start them
    or the machine has fewer cores than that (more processes would only take turns, and a run.json
    that says 1000 must not load the machine with 1000)."""
    if processes > cores():
        raise ValueError(f"{option} {processes} would start {processes} processes, but this machine lets this one "
                         f"run on {cores()} cores (os.sched_getaffinity): at most {cores()}")
    reason = can_launch() if processes > 1 else None
    if reason:
        raise ValueError(f"{option} {processes}: {reason}: {INSTALL_HINT}")
    return processes


def for_idle_cores(wanted: int, doing: str) -> int:
    """The `wanted` processes the idle cores could take, saying what they will be `doing`; or one, with a
    note saying why, where mpiexec cannot start them."""
    reason = can_launch() if wanted > 1 else None
    if reason:
        print(f"note: {wanted} cores are idle, but {reason}, so training uses one: {INSTALL_HINT}")
        return 1
    if wanted > 1:
        print(f"{wanted} cores are idle: {doing}")
    return wanted


def describe_decoding(chosen: dict) -> str:
    """"decoding chosen on validation BLEU: beam 6 (beam 6 α 1 45.1; greedy 41.9, p 0.001; beam 2 α 1
    45.3, p 0.41; ...; a higher score counts where p < 0.05)": each try's score, and the chance of its
    difference from the choice it was compared with (tuning.py)."""
    metric = chosen["metric"]
    tries = "; ".join(f"{short_name(t['beam'], t['length_penalty'])} {t[metric]:.1f}"
                      + (f", p {t['p']:.2g}" if "p" in t else "") for t in chosen["tried"])
    name = {"bleu": "BLEU", "exact_match": "exact match"}[metric]
    return (f"decoding chosen on validation {name}: {decoding_name(chosen['beam'], chosen['length_penalty'])} "
            f"({tries}; a higher score counts where p < {SIGNIFICANCE})")


def short_name(beam: int, penalty: float) -> str:
    return "greedy" if beam == 1 else f"beam {beam} α {penalty:g}"


def decoding_name(beam: int, penalty: float) -> str:
    """"greedy", "beam 4", "beam 4, length penalty 0.6" (the penalty named where it is not the usual one)."""
    if beam == 1:
        return "greedy"
    return f"beam {beam}" + ("" if penalty == LENGTH_PENALTY else f", length penalty {penalty:g}")


def chosen_model_and_training(s: TrainSettings, warmup: int) -> str:
    """What a task's or corpus's defaults (or the flags) chose, in one line: "width 128, 2 encoder and
    2 decoder layers, 4 heads, feed-forward 512 (gelu_tanh), dropout 0.05 (attention 0, activation 0);
    lr 0.004 after 400 warm-up steps, cosine decay, weight decay 0.3, batches of 96, label smoothing 0.1"
    (`warmup`: the schedule's, at most a quarter of the steps)."""
    apart = ", ".join(f"{name} {p:g}" for name, p in (("attention", s.attention_dropout),
                                                       ("activation", s.activation_dropout)) if p is not None)
    dropout = f"dropout {s.dropout:g}" + (f" ({apart})" if apart else "")
    return (f"width {s.d_model}, {s.num_encoder_layers} encoder and {s.num_decoder_layers} decoder layers, "
            f"{s.num_heads} heads, feed-forward {s.d_ff} ({s.activation}{', pre-LN' * s.norm_first}), {dropout}; "
            f"lr {s.lr:g} after {warmup} warm-up steps, {s.schedule} decay, weight decay {s.weight_decay:g}, "
            f"batches of {s.batch_size}, label smoothing {s.label_smoothing:g}")


def where_and_how(trainer: Trainer) -> str:
    """`new run runs/x: device cpu, 1 BLAS thread, 1 process`: what a user would otherwise have to guess."""
    s, n = trainer.s, dist.world_size()
    device = s.device + (" (from TINYGRAD_TX_DEVICE)" if os.environ.get("TINYGRAD_TX_DEVICE") == s.device else "")
    threads = tx.get_num_threads()
    run = f"resuming {trainer.dir} at step {trainer.step}" if s.resume else f"new run {trainer.dir}"
    return (f"{run}: device {device}, {threads} BLAS thread{'s' * (threads > 1)}"
            f"{' each' if n > 1 else ''}, {n} process{'es' * (n > 1)}{', a model each' * trainer.ensemble}")


def epochs(n: float) -> str:
    """How much of the training pairs the steps go through: "about 25 epochs", "6% of an epoch"."""
    if n >= 1.5:
        return f"about {n:.0f} epochs"
    return "about 1 epoch" if n >= 0.95 else f"{100 * n:.2g}% of an epoch"


def run_evaluate(args: argparse.Namespace) -> None:
    run = open_run(args.run_dir, args.device, model=args.model)
    sources = group_references(read_corpus(args.data).pairs) if args.data else None
    report(run, decoding(run, args), args.json, args.by_length, sources)


def report(run: Run, decoding: tuple[int, float], as_json: bool, lengths: bool = False,
           sources: Sources | None = None, shown: bool = True) -> None:
    """Score the best checkpoint, decoding with (beam width, length penalty), on the held-out
    test sources (or `sources`) against all their references and show a few translations.
    In an mpiexec job every rank translates a share (sharing.py); only a `shown` rank prints."""
    where = "given pairs" if sources is not None else "held-out test"
    sources = sources if sources is not None else run.held_out("test")
    texts, references = [s for s, _ in sources], [refs for _, refs in sources]
    beam, penalty = decoding
    outputs = translate_shared(run, texts, beam, penalty)
    if not shown:
        return
    metrics = score(outputs, references, run.tokenizers[1])
    table = by_length(texts, outputs, references, run.tokenizers[0]) if lengths else []
    if as_json:  # scores to 1e-4 of a percent: sacrebleu's float arithmetic gives BLEU 100.00000000000004
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
        print(json.dumps({**shown, "by_length": [[n, s, round(e, 4)] for n, s, e in table]} if lengths else shown))
        return
    print(f"{where} ({metrics['n']} sources, {metrics['references']} references, {decoding_name(beam, penalty)}): "
          f"{summary(metrics)}")
    if table:
        print(f"exact match by source length ({run.tokenizers[0].kind} tokens):")
        for length, n, exact in table:
            print(f"  {length:4d} tokens: {exact:6.2f}% of {n}")
    for right in (True, False):  # the misses as well as the hits
        picked = [(s, refs, out) for (s, refs), out in zip(sources, outputs) if (out in refs) == right]
        print(f"{len(picked)} of {len(outputs)} {'right' if right else 'missed'}" + (", for example:" * bool(picked)))
        for source, refs, output in picked[:3]:
            reference = "" if right else f"  (reference {refs[0]!r})"
            print(f"  {'✓' if right else '✗'} {source!r} -> {output!r}{reference}")


def run_translate(args: argparse.Namespace) -> None:
    if args.attention:
        check_picture_path(args.attention)
    run = open_run(args.run_dir, args.device, model=args.model)
    # one output line per input line, a line being what it is in a corpus file; normalised as the pairs were
    lines = args.sentences or text_lines(sys.stdin.buffer.read(), "standard input")
    sentences = [normalise(text) for text in lines]
    if not sentences:
        raise ValueError("nothing to translate: give sentences as arguments or on standard input")
    src_tok, tgt_tok = run.tokenizers
    for sentence in sentences:
        unknown = [t for t in src_tok.encode(sentence) if t not in run.src_vocab.ids]
        if unknown:
            print(f"note: {', '.join(map(repr, unknown))} in {sentence[:40]!r} never occurred in training "
                  f"and will be read as <unk>", file=sys.stderr)
    beam, penalty = decoding(run, args)
    outputs = translate(run.model, sentences, run.src_vocab, run.tgt_vocab, run.tokenizers, beam,
                        length_penalty=penalty)
    if args.attention and not outputs[0]:  # said before any output, so that stdout holds all or nothing
        raise ValueError("the first sentence translates to nothing, so there is no attention to draw")
    for output in outputs:
        print(output)
    if args.attention:
        src = encode_sources(sentences[:1], run.src_vocab, src_tok, run.model.config.max_len)
        # row i: the query that produced output token i, fed BOS and the tokens before it;
        # the labels are the tokens the model saw (subword pieces for bpe/unigram)
        output_tokens = tgt_tok.encode(outputs[0])
        # of an ensemble, its first model's: each model attends in its own way
        weights = cross_attention(run.models[0], src, run.tgt_vocab.encode(output_tokens))  # (heads, T + 1, S)
        if plot_attention(weights, src_tok.encode(sentences[0]), output_tokens + [EOS], args.attention):
            n = len(run.models)
            of = f" (the first of the ensemble's {n} models; --model N for another)" * (n > 1)
            print(f"cross-attention of {sentences[0]!r}{of} written to {args.attention}", file=sys.stderr)
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
    vocab_size = args.vocab_size if args.vocab_size is not None else corpus_defaults(len(corpus.pairs))["vocab_size"]
    print("\n".join(describe(corpus, args.tokenizer, vocab_size)))


def run_tasks(args: argparse.Namespace) -> None:
    if args.probe:
        sys.stdout.write("".join(f"{s}\t{t}\n" for s, t in probe_pairs(args.probe)))
        return
    for name, task in TASKS.items():
        source, target = task.example()
        print(f"{name:8s} {task.description}\n         {source!r} -> {target!r}")
