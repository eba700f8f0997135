"""The command line's words: `python -m models`'s commands, their flags in groups, and two or
three examples of each, which `--help` shows.

Every number a flag takes is read by its `Rule` (inputs.py) as it is parsed, so a value out
of range is one line naming the flag before anything runs; `train`'s flags come from its
settings (settings.py), and `corpus` shares theirs.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Callable

from .evaluation import BEAM, BEAMS, LENGTH_PENALTIES, LENGTH_PENALTY, MAX_BEAM, MAX_LENGTH_PENALTY
from .inputs import MEMBER_COUNTS, Parser, threads_rule, whole
from .settings import TrainSettings, add_arguments, flag
from ..text.tokenization import KINDS

RULES = {f.name: f.metadata["rule"] for f in fields(TrainSettings)}
PROCESSES = whole(1, 1024)
"""--processes as a number; `train` also bounds what it starts by the machine's cores (cli.py)."""
PORTS = whole(1, 65535)

EXAMPLES = """examples:
  python -m models tasks                                # the built-in tasks, an example pair each
  python -m models train --task reverse                 # train into runs/reverse
  python -m models train --out runs/reverse --resume    # continue it where it stopped
  python -m models evaluate --run runs/reverse          # score it on its held-out pairs
  python -m models translate --run runs/reverse abcdef  # or lines on standard input
  python -m models corpus pairs.tsv                     # what is in a source<TAB>target file
  python -m models train --data pairs.tsv               # train on it
  python -m models explore runs/reverse                 # look inside in the browser

`python -m models COMMAND --help` lists a command's options, with examples."""

COMMAND_EXAMPLES = {
    "train": """examples:
  python -m models train --task reverse                 # a built-in task, into runs/reverse
  python -m models train --data pairs.tsv --time 10m    # your corpus (the default budget: 10m)
  python -m models train --out runs/reverse --resume --steps 3000   # continue a run, to more steps

Where a default names tasks and a --data corpus, each chooses its own; train prints what it chose.""",
    "evaluate": """examples:
  python -m models evaluate --run runs/reverse                # its test pairs, decoded as the run chose
  python -m models evaluate --run runs/reverse --beam 1 --json   # greedy search, one JSON object
  python -m models evaluate --run runs/pairs --data more.tsv  # other source<TAB>target pairs""",
    "translate": """examples:
  python -m models translate --run runs/reverse abcdef hijk   # an output line for each argument
  printf 'abcdef\\nhijk\\n' | python -m models translate --run runs/reverse   # or each line of input
  python -m models translate --run runs/reverse abcdef --attention runs/reverse/attention.png""",
    "tasks": """examples:
  python -m models tasks                                # each task with an example pair
  python -m models tasks --probe dates > runs/probe.tsv # then: evaluate --run runs/dates --data runs/probe.tsv""",
    "corpus": """examples:
  python -m models corpus pairs.tsv                     # sizes, lengths, tokens, oddities
  python -m models corpus fra.txt --tokenizer word      # the Tatoeba list, counted in words
  python -m models corpus pairs.tsv --src-col 2 --tgt-col 1   # the other direction""",
    "explore": """examples:
  python -m models explore runs/reverse                 # serve the page on a free port of this machine
  python -m models explore runs/reverse --port 8000 --open   # and open it in the browser
  python -m models explore runs/reverse --html runs/reverse/explorer.html   # one file, no server""",
}


def parser(runs: dict[str, Callable[[argparse.Namespace], None]]) -> argparse.ArgumentParser:
    """The command line; `runs` maps each command to the function that runs it."""
    p = Parser(prog="python -m models", description="Train and use toy translation transformers.",
               epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        made = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                              epilog=COMMAND_EXAMPLES[name], formatter_class=argparse.RawDescriptionHelpFormatter)
        made.set_defaults(run=runs[name])
        return made

    train = command("train", "train a model on a built-in task or a TSV corpus")
    add_arguments(train)
    add_machine(train).add_argument(
        "--processes", type=PROCESSES.flag, default=None, metavar="N",
        help="train one model data-parallel on N processes, started through mpiexec, at most one a core (default: "
             "one; a --data corpus's idle cores train the models of --members instead)")

    evaluate = command("evaluate", "score a trained model on its held-out test pairs")
    scored = add_run_dir(evaluate)
    scored.add_argument("--data", metavar="FILE",
                        help="score these source<TAB>target pairs instead of the held-out test split")
    add_decoding_arguments(evaluate)
    shown = evaluate.add_argument_group("output")
    shown.add_argument("--json", action="store_true", help="print one JSON object")
    shown.add_argument("--by-length", action="store_true", help="also show exact match by source length")
    add_machine(evaluate)

    tr = command("translate", "translate sentences (arguments, or lines on standard input)")
    tr.add_argument("sentences", nargs="*", metavar="SENTENCE",
                    help="sentences to translate, one output line each; none: each line of standard input")
    add_run_dir(tr)
    add_decoding_arguments(tr)
    tr.add_argument_group("output").add_argument(
        "--attention", metavar="OUT.png", help="draw the first sentence's cross-attention")
    add_machine(tr)

    tasks = command("tasks", "list the built-in tasks with an example pair each")
    tasks.add_argument("--probe", metavar="TASK", help="print TASK's coverage probe pairs as TSV instead")

    corpus = command("corpus", "describe a source<TAB>target corpus before training on it")
    corpus.add_argument("file", metavar="FILE", help="source<TAB>target[<TAB>ignored...] lines, as train --data reads")
    for name, default, help in (("src_col", 1, "the column (1-based) holding the source (default 1)"),
                                ("tgt_col", 2, "the column holding the target (default 2)"),
                                ("vocab_size", None, "subword pieces per side (default: what train would pick "
                                                     "for the file)")):
        corpus.add_argument(flag(name), type=RULES[name].flag, default=default, metavar="N", help=help)
    corpus.add_argument("--tokenizer", choices=KINDS, default=TrainSettings.tokenizer,
                        help=f"the tokens to count and preview (default {TrainSettings.tokenizer}, as train's)")

    explore = command("explore", "look inside a trained run in the browser: graph, backward, translation, training")
    explore.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by train")
    serving = explore.add_argument_group("serving")
    serving.add_argument("--port", type=PORTS.flag, default=None, help="default: a free one")
    serving.add_argument("--host", default="127.0.0.1",
                         help="default 127.0.0.1 (this machine only); another address lets others in")
    serving.add_argument("--open", action="store_true", help="open the page in the default browser")
    explore.add_argument_group("output").add_argument(
        "--html", metavar="FILE", default=None,
        help="write the page as one self-contained file instead of serving it (the step, its walk, the "
             "optimizer's update, the layers over training and one translation; it opens from disk with no server)")
    add_machine(explore)
    return p


def add_machine(command: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """--device and --threads, in a group of their own (returned, for train's --processes)."""
    machine = command.add_argument_group("machine")
    machine.add_argument("--device", choices=["cpu", "cuda"],
                         help="cpu (NumPy) or cuda (CuPy); default: $TINYGRAD_TX_DEVICE, else cpu")
    machine.add_argument("--threads", type=threads_rule().flag, metavar="N",
                         help="BLAS threads, at most the cores this process may run on (default: the library's, "
                              "tx.get_num_threads(): 1, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS (or "
                              "MKL_NUM_THREADS, BLIS_NUM_THREADS) says otherwise: beside another busy process more "
                              "threads spin against it; benchmarks/threads.py measures it)")
    return machine


def add_decoding_arguments(command: argparse.ArgumentParser) -> None:
    decoding = command.add_argument_group("decoding")
    decoding.add_argument("--beam", type=BEAMS.flag, default=None,
                          help=f"beam size, 1 to {MAX_BEAM} (1: greedy search; default: the run's, chosen on its "
                               f"validation set, or {BEAM})")
    decoding.add_argument("--length-penalty", type=LENGTH_PENALTIES.flag, default=None, metavar="ALPHA",
                          help=f"GNMT length penalty of beam search, 0 (none) to {MAX_LENGTH_PENALTY:g} (default: the "
                               f"run's, or {LENGTH_PENALTY:g})")


def add_run_dir(command: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """--run RUN_DIR, which --checkpoint, its old name, still sets (saying so), and --model, in a group
    (returned, for what else says what to use)."""
    run = command.add_argument_group("the run")
    either = run.add_mutually_exclusive_group(required=True)
    either.add_argument("--run", dest="run_dir", metavar="RUN_DIR", action=OldName,
                        help="a run directory written by train (--checkpoint, its old name, still works)")
    either.add_argument("--checkpoint", dest="run_dir", metavar="RUN_DIR", action=OldName, help=argparse.SUPPRESS)
    run.add_argument("--model", type=MEMBER_COUNTS.flag, default=None, metavar="N",
                     help="of a run of train --members, model N alone (1: the first; default: every model, "
                          "their ensemble)")
    return run


class OldName(argparse.Action):
    """Stores the option's value; its old spelling also says the new one on standard error."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string == "--checkpoint":
            print("note: --checkpoint is now called --run (it names a run directory)", file=sys.stderr)
        setattr(namespace, self.dest, values)
