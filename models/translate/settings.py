"""What `train` accepts: one list of options, from which the command line, the checks and the
resume rules are all made.

Each option is a field of `TrainSettings`, declared with `option(...)`: its name, default, help
text, the values it accepts (its `Rule`, inputs.py), its group in `train --help` and whether a
resumed run must keep it are written there and nowhere else. `add_arguments` turns the list into
`train`'s flags, each read by its rule; `check_saved` holds a run.json's settings to the same
rules; `check_settings` tests settings made in code; `FIXED_ON_RESUME` is read off it. A task
(`tasks.py`) or the size of a --data corpus (`corpus_defaults`) chooses its own defaults for some
options; `settings_for` puts it together.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..attention import check_heads
from ..layers import ACTIVATIONS
from .budget import MOST_S, parse_duration
from .corpus import read_corpus
from .inputs import MEMBER_COUNTS, SWITCH, TEXT, Rule, maybe, number, one_of, shown, whole
from .launch import ENSEMBLE_EPOCHS, MAX_MEMBERS
from .run import RunError, read_run_json
from .tasks import TASKS, get_task
from ..text.tokenization import KINDS, SUBWORDS


SCHEDULES = ("cosine", "linear")
DEVICES = ("cpu", "cuda")
PROBABILITY = number(0, 1, below=True)


def is_duration(value: Any) -> bool:
    """A --time text that `parse_duration` reads (it also bounds the duration, by MOST_S)."""
    try:
        parse_duration(value)
    except ValueError:
        return False
    return True


DURATION = Rule(is_duration, f"a duration such as 90s, 10m or 1h30m, at most {MOST_S // 3600}h")


def option(default: Any, help: str, rule: Rule, group: str, *, fixed: bool = False, corpus: bool = False,
           choices: tuple | None = None, source: bool = False, cli: bool = True, saved: bool = True,
           model: bool = False, metavar: str | None = None) -> Any:
    """A `TrainSettings` field with what the command line and the checks need to know of it.

    rule: the values it accepts, from a flag or from run.json (inputs.py); group: where `train
    --help` lists it (GROUPS); fixed: a resumed run must keep it (its data or its model); corpus:
    only for --data corpora (a task has its own tokenisation); source: one of the two ways to say
    what to train on; cli: it gets a flag of its own (--device is every command's); saved: it goes
    into run.json; model: it goes to the model's config (`TransformerConfig`) under this very name."""
    return field(default=default, metadata=dict(help=help, rule=rule, group=group, fixed=fixed, corpus=corpus,
                                                choices=choices, source=source, cli=cli, saved=saved, model=model,
                                                metavar=metavar))


GROUPS = {"data": "what to train on", "model": "the model", "training": "how it trains",
          "output": "what it writes"}
"""`train --help`'s groups of flags, in order (the machine's flags follow: cli.py)."""


@dataclass
class TrainSettings:
    """Everything `train` accepts; the command line fills it, a task's or corpus's defaults fill the gaps.
    The bounds are loose, to refuse what cannot be meant (a typo, a damaged run.json), not to advise."""

    task: str | None = option(None, f"one of: {', '.join(TASKS)}", maybe(TEXT), "data", fixed=True, source=True,
                              metavar="NAME")
    data: str | None = option(None, "a file of source<TAB>target[<TAB>ignored...] lines (Tatoeba/Anki format too)",
                              maybe(TEXT), "data", fixed=True, source=True, metavar="FILE")
    src_col: int = option(1, "the --data column (1-based) holding the source", whole(1, 100), "data", fixed=True,
                          corpus=True)
    tgt_col: int = option(2, "the --data column (1-based) holding the target", whole(1, 100), "data", fixed=True,
                          corpus=True)
    tokenizer: str = option("bpe", "tokens of a --data corpus", one_of(KINDS), "data", fixed=True, corpus=True,
                            choices=KINDS)
    vocab_size: int = option(4000, "subword pieces per side, fewer when the corpus is small", whole(1, 100_000),
                             "data", fixed=True, corpus=True)
    shared_vocab: bool = option(False, "one tokenizer and vocabulary for both sides, output tied to the embeddings",
                                SWITCH, "data", fixed=True, corpus=True)
    subword_sampling: float = option(0.0, "cut the training pairs into subwords anew each epoch: BPE-dropout's "
                                          "merge-skipping probability for bpe, the sampling alpha for unigram; 0: off",
                                     PROBABILITY, "data", fixed=True, corpus=True, metavar="ALPHA")
    n_train: int = option(20000, "training pairs a task draws", whole(1, 1_000_000), "data", fixed=True)
    n_held_out: int = option(500, "validation pairs a task draws, and as many test pairs", whole(1, 100_000),
                             "data", fixed=True)
    max_len: int = option(200, "longest sentence, in tokens, to train on: longer pairs are left out",
                          whole(1, 10_000), "data", fixed=True)
    d_model: int = option(64, "model width", whole(1, 8192), "model", fixed=True, model=True)
    num_heads: int = option(4, "attention heads (must divide --d-model)", whole(1, 256), "model", fixed=True,
                            model=True)
    num_encoder_layers: int = option(2, "encoder layers", whole(1, 64), "model", fixed=True, model=True)
    num_decoder_layers: int = option(2, "decoder layers", whole(1, 64), "model", fixed=True, model=True)
    d_ff: int = option(256, "width of the feed-forward layers", whole(1, 32_768), "model", fixed=True, model=True)
    activation: str = option("relu", "the feed-forward layers' activation: relu, gelu (exact, by erf) or gelu_tanh "
                                     "(its tanh approximation, cheaper on a CPU)", one_of(tuple(ACTIVATIONS)),
                             "model", fixed=True, choices=tuple(ACTIVATIONS), model=True)
    norm_first: bool = option(False, "pre-LN: each sublayer reads a normalised copy of the residual stream, "
                                     "x + f(norm(x)), instead of the paper's norm(x + f(x)) (post-LN)",
                              SWITCH, "model", fixed=True, model=True)
    tie_output: bool = option(False, "the output layer reads the target embedding (as --shared-vocab does): "
                                     "fewer parameters", SWITCH, "model", fixed=True)
    dropout: float = option(0.1, "dropout probability on the embeddings and on each sublayer's output (and, "
                                 "unless told apart, on the attention weights and feed-forward activations)",
                            PROBABILITY, "model", model=True, metavar="P")
    attention_dropout: float | None = option(None, "dropout on the attention weights "
                                                   "(default: --dropout; 0 for a --data corpus)",
                                             maybe(PROBABILITY), "model", model=True, metavar="P")
    activation_dropout: float | None = option(None, "dropout on the feed-forward layers' hidden activations "
                                                    "(default: --dropout; 0 for a --data corpus)",
                                              maybe(PROBABILITY), "model", model=True, metavar="P")
    members: int = option(1, "train N models side by side, one process each (other initial weights and dropout, "
                             "the same data), and translate with their ensemble: the mean of their probabilities "
                             f"(default: 1 for a task; for a --data corpus one per idle core, at most {MAX_MEMBERS}, "
                             f"where each model would make at least {ENSEMBLE_EPOCHS} epochs, else one model on the "
                             "idle cores together)",
                          MEMBER_COUNTS, "training", fixed=True, metavar="N")
    steps: int = option(3000, "optimizer steps (with --time: at most)", whole(1, 10_000_000), "training")
    time: str | None = option(None, "train for at most this long (90s, 10m, 1h30m: the whole command, report "
                                    "included): the run times its steps and makes as many as fit, up to --steps "
                                    "(default: none for a task; 10m for a --data corpus)",
                              maybe(DURATION), "training", metavar="DURATION")
    batch_size: int = option(64, "pairs a step, over all processes together", whole(1, 16_384), "training")
    lr: float = option(2e-3, "peak learning rate (warm-up, then --schedule's decay)", number(0, 1, above=True),
                       "training", metavar="X")
    schedule: str = option("cosine", "the learning rate's decay after the warm-up: cosine, to 5%% of --lr, or "
                                     "linear, to 0", one_of(SCHEDULES), "training", choices=SCHEDULES)
    warmup: int = option(200, "warm-up steps (at most a quarter of --steps)", whole(0, 10_000_000), "training")
    label_smoothing: float = option(0.1, "label smoothing of the loss", number(0, 1), "training", metavar="X")
    weight_decay: float = option(0.0, "decoupled weight decay (AdamW): each step shrinks every weight matrix "
                                      "and embedding (not biases or LayerNorm) by the learning rate times this; "
                                      "0: plain Adam", number(0, 100), "training", fixed=True, metavar="X")
    rdrop: float = option(0.0, "R-Drop: each pair twice a step, this weight on the two predictions' KL divergence",
                          number(0, 1000), "training", metavar="X")
    clip_norm: float = option(1.0, "each step scales the gradients down to a global L2 norm of at most this "
                                   "(0: never)", number(0, 1e6), "training", metavar="X")
    seed: int = option(0, "seeds the split, the weights, the batch order and dropout", whole(0, 2**32 - 1),
                       "training", fixed=True)
    average: int = option(1, "the final model may be the mean of the weights at the last N validations",
                          whole(1, 1000), "training")
    jit: bool = option(True, "run every training step eagerly instead of replaying it with tx.jit", SWITCH,
                       "training")
    resume: bool = option(False, "continue the run in --out from its last checkpoint, with the settings it was "
                                 "trained with (--task or --data not needed)", SWITCH, "training", saved=False)
    out: str | None = option(None, "the run directory (default: runs/<task or corpus file name>)", maybe(TEXT),
                             "output", metavar="DIR")
    eval_every: int = option(500, "validate and write last.npz every N steps", whole(1, 10_000_000), "output")
    log_every: int = option(10, "log the loss every N steps", whole(1, 10_000_000), "output")
    snapshots: bool = option(False, "also keep the weights of each validation, snapshots/step_N.npz (4 bytes a "
                                    "parameter each), for the explorer's attention across checkpoints", SWITCH,
                             "output")
    device: str = option("cpu", "cpu or cuda", one_of(DEVICES), "output", cli=False)

    def saved(self) -> dict:
        """The settings run.json keeps."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["saved"]}

    def model_options(self) -> dict:
        """The settings that are options of the model's config, by the config's own names."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["model"]}


DEFAULTS = {f.name: f.default for f in fields(TrainSettings)}
FIXED_ON_RESUME = tuple(f.name for f in fields(TrainSettings) if f.metadata["fixed"])
"""What a resumed run must keep: its data and its model (the rest, say --steps, may change)."""


def flag(name: str) -> str:
    """The command-line spelling of an option: d_model -> --d-model."""
    return "--" + name.replace("_", "-")


TIE_BELOW = 30_000
"""The corpus size from which the output layer has its own weights by default. On the 76k-pair Tatoeba
list (one model on both cores, 4-5 epochs in ten minutes, 3,900 target pieces) the tied output scored
below its own, as written: 45.3 against 47.6 at lr 4e-3, 42.6 against 46.1 at 2e-3 (validation 47.4
against 50.5, and 45.6 against 48.4), where on the 18k list (18 epochs a model) it was ahead. The
threshold lies between the lists measured, near the ensemble's (launch.py: about 26,000 pairs in ten
minutes here), not at a measured crossing."""


def corpus_defaults(n_pairs: int) -> dict:
    """Model, vocabulary and schedule for a --data corpus of `n_pairs` pairs.

    Ten minutes (`--time 10m`): as many steps of 96 pairs as fit, on every idle core
    (launch.py), up to about 60 epochs but at least 1000 steps (a corpus under 1,600 pairs gets
    more: 216 pairs, about 440 epochs; `train` prints what it chose). A small corpus need not
    take its ten minutes: on the 18k-pair Tatoeba English-French list test BLEU was flat from 25
    to 55 epochs. Most of a step is the matrix products, and the output layer's share grows with
    the vocabulary (a step of 96 pairs took 0.19 s with 2200 target pieces and 0.24 s with
    6200), so the vocabulary grows with the corpus, about a piece per 8 pairs, up to 4000
    pieces; a corpus under 3,000 pairs gets a smaller model, which overfits less. On the Tatoeba
    list that is 2300 pieces a side and 2 layers of a 128-wide model with 4 heads and GELU (its
    tanh form: NumPy has no erf), at a peak learning rate of 4e-3, with a weight decay of 0.3
    kept off biases and LayerNorm, dropout on the embeddings and sublayer outputs only
    (fairseq's placement), 0.05 of them (the small model keeps 0.1: 0.05 was not measured
    there), and the output layer tied to the target embedding below TIE_BELOW pairs.

    Each of these was measured against its alternatives on Tatoeba lists, and so were the
    changes that did not pay (3 layers, 3 encoder layers and 1 decoder layer, 1 encoder layer
    and 2 or 3 decoder layers, 3 decoder layers with a narrower feed-forward, other widths,
    batches, rates, warm-ups, decays and dropouts, more or fewer pieces, a shared vocabulary,
    subword sampling, label smoothing 0.05 and 0.2, checkpoint averaging, R-Drop, word dropout,
    pre-LN, a linear decay; a third decoder layer gains at a fixed number of steps and loses
    more than that in ten minutes, its steps 20 to 30% dearer): docs/results/translate-experiments.md
    has the tables and runs. The idle cores train an ensemble, a model each, where each
    model would make ENSEMBLE_EPOCHS or more in the budget, and one model data-parallel where
    fewer (launch.py).
    """
    small = n_pairs < 3000
    return dict(vocab_size=int(min(4000, max(200, round(n_pairs / 8, -2)))),
                d_model=64 if small else 128, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                d_ff=256 if small else 512, activation="gelu_tanh",
                steps=int(max(1000, round(60 * n_pairs / 96, -2))), batch_size=96, time="10m",
                lr=4e-3, warmup=400, dropout=0.1 if small else 0.05, attention_dropout=0.0, activation_dropout=0.0,
                weight_decay=0.3, tie_output=n_pairs < TIE_BELOW, eval_every=500)


def add_arguments(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """`train`'s flags, one for each option, in GROUPS (returned, by name); a flag left out is None,
    so that a task's or corpus's default (or, with --resume, the run's saved setting) takes its place.
    Each flag's text is read by its rule (inputs.py): a bad value is refused as it is parsed."""
    groups = {name: parser.add_argument_group(f"{name}: {about}") for name, about in GROUPS.items()}
    source = groups["data"].add_mutually_exclusive_group()  # neither with --resume: the run directory knows
    for f in fields(TrainSettings):
        meta = f.metadata
        if not meta["cli"]:
            continue
        where = source if meta["source"] else groups[meta["group"]]
        if isinstance(f.default, bool) and chosen_default(f.name):  # on for some runs: --tie-output, --no-tie-output
            where.add_argument(flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                               help=f"{meta['help']} (default {default_text(f.name)})")
            continue
        if isinstance(f.default, bool):  # a switch: --shared-vocab turns on, --no-jit turns off
            name = flag(f.name) if not f.default else flag("no_" + f.name)
            where.add_argument(name, dest=f.name, action="store_false" if f.default else "store_true",
                               default=None, help=meta["help"])
            continue
        said = "(default" in meta["help"] or (f.default is None and not chosen_default(f.name))
        shown = "" if said else f" (default {default_text(f.name)})"
        metavar = meta["metavar"] or ("N" if isinstance(f.default, int) else None)
        where.add_argument(flag(f.name), type=meta["rule"].flag, default=None, choices=meta["choices"],
                           metavar=metavar, help=meta["help"] + shown)
    return groups


def chosen_default(name: str) -> bool:
    """Whether a task or a --data corpus chooses this setting's default."""
    return name in corpus_defaults(1) or any(name in t.defaults for t in TASKS.values())


def default_text(name: str) -> str:
    """A default as `train --help` shows it where it stands: "3000", or, where a task or the corpus
    chooses it, each choice: "copy 2000, reverse 2500, sort 3000, numbers/dates/grammar 4000; a --data
    corpus: 1000 to 625000, by its size"."""
    default = DEFAULTS[name]
    by_value: dict[Any, list[str]] = {}
    for task_name, task in TASKS.items():
        by_value.setdefault(task.defaults.get(name, default), []).append(task_name)
    tasks = (f"{next(iter(by_value))}" if len(by_value) == 1
             else ", ".join(f"{'/'.join(names)} {value}" for value, names in by_value.items()))
    sizes = {corpus_defaults(n).get(name, default) for n in (100, 1000, 3000, 10_000, 30_000, 1_000_000)}
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sizes)
    corpus = (f"{sizes.pop()}" if len(sizes) == 1 else
              f"{min(sizes)} to {max(sizes)}, by its size" if numbers else "by its size")
    if next(f for f in fields(TrainSettings) if f.name == name).metadata["corpus"]:
        return f"{default}; a --data corpus: {corpus}" if corpus != f"{default}" else f"{default}"
    return tasks if corpus == tasks else f"{tasks}; a --data corpus: {corpus}"


def settings_for(given: dict) -> TrainSettings:
    """The settings of a run, all checked: for a new run, the task's defaults under what was
    given; with `resume`, those saved in the run directory under what was given again (say,
    more steps), refusing a change of data or model."""
    if given.get("task") is not None:
        for f in fields(TrainSettings):
            if f.metadata["corpus"] and given.get(f.name) is not None:
                raise ValueError(f"{flag(f.name)} is for --data corpora; task {given['task']!r} "
                                 f"has its own tokenisation")
        get_task(given["task"])  # an unknown name is an error before anything else
    if not given.get("resume"):
        if given.get("data") is not None:
            corpus = read_corpus(given["data"], given.get("src_col", 1), given.get("tgt_col", 2))
            defaults = corpus_defaults(len(corpus.pairs))
        else:
            defaults = TASKS[given["task"]].defaults if given.get("task") in TASKS else {}
        settings = TrainSettings(**{**defaults, **given})
        if "steps" in given and "time" not in given:  # steps given alone: the run ends there, whenever
            settings.time = None
        check_settings(settings)
        return settings
    if given.get("out") is None and given.get("task") is None and given.get("data") is None:
        raise ValueError("--resume needs --out DIR, the run directory to continue")
    directory = run_directory(TrainSettings(**given))
    saved = check_saved(renamed(read_run_json(directory)["settings"]), directory / "run.json")
    for key in FIXED_ON_RESUME:
        was = saved.get(key, DEFAULTS[key])  # a setting added since that run: it trained with the default
        if key in given and given[key] != was:
            raise RunError(f"--resume: the run in {directory} was trained with {key} {was!r}, "
                           f"not {given[key]!r}; a resumed run keeps its data, model and optimizer")
    settings = TrainSettings(**{**saved, **given, "out": str(directory)})
    if "steps" in given and "time" not in given:  # resumed with --steps: they end the run, not its --time
        settings.time = None
    check_settings(settings)
    return settings


RENAMED = {"heads": ("num_heads",), "layers": ("num_encoder_layers", "num_decoder_layers")}
"""Settings that run.json files written before the settings took the model config's names hold."""


def renamed(saved: dict) -> dict:
    """A run's saved settings under today's names (an older run resumes as it was trained)."""
    saved = dict(saved)
    for old, new in RENAMED.items():
        if old in saved:
            value = saved.pop(old)
            saved.update({name: value for name in new})
    return saved


def check_saved(saved: Any, path: Path) -> dict:
    """The settings a run's run.json holds, each checked by its option's rule as strictly as its
    flag is: a damaged or edited file is one line naming it and the setting, before anything runs."""
    if not isinstance(saved, dict):
        raise RunError(f"{path} is damaged: its settings are not an object: {shown(saved)}")
    options = {f.name: f for f in fields(TrainSettings)}
    unknown = set(saved) - set(options)
    if unknown:
        raise RunError(f"{path} is damaged: unknown settings {sorted(unknown)}")
    for name, value in saved.items():
        try:
            options[name].metadata["rule"].check(value, f"settings.{name}")
        except ValueError as e:
            raise RunError(f"{path} is damaged: {e}") from None
    return saved


def check_settings(s: TrainSettings) -> None:
    """Every setting in range, so that a bad one is one clear line before anything is written (the
    command line's flags were checked as they were parsed; this is for the settings made in code)."""
    if (s.task is None) == (s.data is None):
        raise ValueError("train needs one of --task NAME or --data pairs.tsv (or --out DIR --resume to continue a run)")
    for f in fields(s):
        f.metadata["rule"].check(getattr(s, f.name), flag(f.name))
    if s.subword_sampling and s.tokenizer not in SUBWORDS:
        raise ValueError(f"--subword-sampling needs --tokenizer bpe or unigram: a {s.tokenizer} tokenizer has one "
                         "cut only")
    check_heads(s.d_model, s.num_heads)
    if s.out is not None and Path(s.out).exists() and not Path(s.out).is_dir():
        raise ValueError(f"--out {s.out} is a file, not a directory")


def run_directory(settings: TrainSettings) -> Path:
    """--out, or runs/<task name or corpus file name>."""
    return Path(settings.out or f"runs/{settings.task or Path(settings.data).stem}")
