"""A run directory: everything a training run leaves behind, and how it is read back.

    runs/reverse/
      run.json        what was trained: task or data file, tokenisation, model and training settings
      vocab.json      source and target vocabularies
      src.model       trained subword tokenizers (bpe/unigram only; shared.model with --shared-vocab)
      tgt.model
      valid.tsv       the held-out pairs (never seen in training; every reference of a source), for `evaluate`
      test.tsv
      last.npz        the latest checkpoint: weights, optimizer, schedule, step, best score, averaging sum
      best.npz        the checkpoint with the best validation score (BLEU for a corpus, exact match for a task)
      metrics.jsonl   one JSON line per logged step
      layer_stats.jsonl  each parameter's norms and histograms at each validation (for `explore`)
      curves.png      loss and validation accuracy (with matplotlib installed)
      train.lock      held (flock) by the one `train` writing here; empty
      members/2/      an ensemble's (train --members N) second model: its last.npz, best.npz,
                      metrics.jsonl and curves.png; members/3/ the third, ... (the first model's
                      are the run directory's own)

No RNG state is saved: dropout's generator is reseeded from the seed and the step (training.py).

Every file is written to a temporary name and then renamed over the old one, so a
crash, Ctrl-C, a full disk or a read-only file system mid-write never leaves a
half-written file in place of a good one (metrics.jsonl is appended to a line at a
time, whole or not at all; a line cut short by a crash is skipped when read). The
files are written in an order that leaves a run `--resume` can continue however
early the writing stops: run.json first (the mark of a run directory), then the
files it holds checksums of; at each validation last.npz, from which `--resume`
continues, before best.npz, which `--resume` judges by the score it holds itself
(training.py); the pictures and snapshots last. Every file read back is checked,
and a damaged one is a `RunError` that names it.
One `train` at a time writes into a run directory (`claim`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import tinygrad_tx as tx
from tinygrad_tx.files import append_whole, write_atomically
from tinygrad_tx.serialization import LoadError

from .corpus import Sources, group_references, read_tsv
from .evaluation import BEAM, BEAMS, LENGTH_PENALTIES, LENGTH_PENALTY
from .inputs import MEMBER_COUNTS, shown
from ..text.data import Pair, Vocab
from ..ensemble import Ensemble
from ..text.tokenization import KINDS, Tokenizer
from ..transformer import Transformer

RUN_FORMAT = "tinygrad_tx.run"
"""Written into run.json: what marks a directory as a run directory `train` may write into again."""
LOCK = "train.lock"
SNAPSHOTS = "snapshots"  # train --snapshots: the weights of each validation, step_N.npz
MEMBERS = "members"  # train --members N: the checkpoints of the ensemble's models after the first
RUN_FILES = frozenset({"run.json", "vocab.json", "valid.tsv", "test.tsv", "last.npz", "best.npz",
                       "metrics.jsonl", "layer_stats.jsonl", "curves.png", "src.model", "tgt.model", "shared.model",
                       LOCK, SNAPSHOTS, MEMBERS})


def member_directory(directory: Path, number: int) -> Path:
    """Where model `number` (1, 2, ...) of a run's ensemble keeps its checkpoints and metrics: the run
    directory itself for the first, so a one-model run is laid out as it always was; members/N for
    model N."""
    return directory if number == 1 else directory / MEMBERS / str(number)



def chosen_decoding(directory: Path, run: dict) -> tuple[int, float]:
    """The beam width and length penalty `train` chose on the validation set (`tuning.py`) and
    kept in run.json, or, for a run that chose none (trained before, or stopped before the end),
    the defaults."""
    chosen, path = run.get("decoding", {"beam": BEAM, "length_penalty": LENGTH_PENALTY}), directory / "run.json"
    if not (isinstance(chosen, dict) and {"beam", "length_penalty"} <= chosen.keys()):
        raise RunError(f"{path} is damaged: its decoding is not a beam width and a length penalty: {shown(chosen)}")
    try:  # the ranges --beam and --length-penalty have: a damaged file is refused, never decoded with
        beam = BEAMS.check(chosen["beam"], "decoding.beam")
        penalty = LENGTH_PENALTIES.check(chosen["length_penalty"], "decoding.length_penalty")
    except ValueError as e:
        raise RunError(f"{path} is damaged: {e}") from None
    return beam, float(penalty)

class RunError(RuntimeError):
    """A run directory or checkpoint that cannot be used; the message says which and why."""


def write_text(path: Path, text: str) -> None:
    write_atomically(path, lambda f: f.write(text.encode("utf-8")))


def write_json(path: Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2) + "\n")


def pairs_text(pairs: list[Pair]) -> str:
    return "".join(f"{s}\t{t}\n" for s, t in pairs)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_run_files(directory: Path, run: dict, files: dict[str, str]) -> None:
    """run.json, holding the SHA-256 of each of `files` (name -> text), then those files.

    run.json goes first, so a directory that holds anything at all is marked as a run
    directory; the checksums let every later read tell a damaged or edited file."""
    checksums = {name: sha256(text.encode("utf-8")) for name, text in files.items()}
    write_json(directory / "run.json", {**run, "format": RUN_FORMAT, "checksums": checksums})
    for name, text in files.items():
        write_text(directory / name, text)


def read_checked(directory: Path, run: dict, name: str) -> str:
    """The text of a file `write_run_files` wrote, refused if it changed since."""
    path = directory / name
    if not path.is_file():
        raise RunError(f"{path} is missing: is {directory} a run directory written by `train`?")
    data = path.read_bytes()
    if sha256(data) != run["checksums"].get(name):
        raise RunError(f"{path} is damaged or was edited: its SHA-256 is not the one run.json records")
    return data.decode("utf-8")


def fingerprint(splits: dict[str, list[Pair]]) -> str:
    """A SHA-256 of every pair of every split, in order: equal fingerprints mean the same data,
    split the same way (a corpus edited since, or another task, gives another one)."""
    digest = hashlib.sha256()
    for name in sorted(splits):
        digest.update(f"{name}\n".encode())
        for source, target in splits[name]:
            digest.update(f"{source}\t{target}\n".encode())
    return digest.hexdigest()


def check_new_run_directory(directory: Path) -> None:
    """Refuse to start a run in `directory` unless it is new, empty, or a run directory
    (run.json says so) without a checkpoint: nothing a user owns is overwritten."""
    if directory.is_symlink() and not directory.exists():
        raise RunError(f"--out {directory} is a symbolic link that leads nowhere (to a missing path, or round "
                       "in a loop)")
    if not directory.exists():
        return
    if not directory.is_dir():
        raise RunError(f"--out {directory} is a file, not a directory")
    names = {p.name for p in directory.iterdir()}
    if not names:
        return
    if "last.npz" in names:
        raise RunError(f"{directory} already holds a run; use --resume to continue it or --out for a new one")
    left = {name for name in names if _is_temporary(name)} | ({LOCK} & names)  # by a run killed early
    ours = names - left <= RUN_FILES and (names == left or _is_run_json(directory / "run.json"))
    if not ours:
        raise RunError(f"{directory} is not empty and not a run directory written by train; "
                       "choose another --out (nothing was written)")


def claim(directory: Path) -> IO:
    """Take `directory` for this process's run: a second `train` into it is refused at once,
    before it writes anything. Returns the lock; closing it (or the process ending) lets go.

    The lock is an flock on train.lock, which the kernel releases when the process ends,
    however it ends: a run killed with SIGKILL leaves no stale lock behind, where a lock
    file made with O_EXCL would stay and block every later run. Files a killed run was
    still writing (`write_atomically`'s temporaries) can only be stale once we hold the
    lock, so they are deleted here."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = os.fdopen(os.open(directory / LOCK, os.O_RDONLY | os.O_CREAT, 0o666))  # flock needs no writing
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise RunError(f"another `train` is writing into {directory} (it holds {directory / LOCK}); "
                       "wait for it to end, or choose another --out") from None
    for path in directory.iterdir():
        if _is_temporary(path.name):
            path.unlink(missing_ok=True)
    return lock


def create_run(directory: Path, settings: dict, tokenizers: tuple[Tokenizer, Tokenizer], vocabs: tuple[Vocab, Vocab],
               corpus_fingerprint: str, held_out: dict[str, list[Pair]]) -> None:
    """Write a new run's files, before the first checkpoint: how it trains (`settings`), its
    tokenizers and vocabularies, the fingerprint of its corpus and its held-out pairs by split
    ("valid", "test")."""
    entry, models = tokenizer_files(tokenizers)
    vocab = {"src": vocabs[0].to_dict(), "tgt": vocabs[1].to_dict()}
    write_run_files(directory, {"tokenizers": entry, "corpus": {"fingerprint": corpus_fingerprint}, "settings": settings},
                    {"vocab.json": json.dumps(vocab, indent=2) + "\n",
                     **{f"{split}.tsv": pairs_text(pairs) for split, pairs in held_out.items()}})
    for name, model in models.items():
        write_atomically(directory / name, lambda f, model=model: f.write(model))
    write_text(directory / "metrics.jsonl", "")


def _is_temporary(name: str) -> bool:
    """A temporary file `write_atomically` makes for one of the run files: .NAME.XXXXXXXX.tmp"""
    return any(name.startswith(f".{run_file}.") and name.endswith(".tmp") for run_file in RUN_FILES)


def _is_run_json(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == RUN_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise RunError(f"{path} is missing: is {path.parent} a run directory written by `train`?")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{path} is corrupt ({e})") from None


def read_run_json(directory: Path) -> dict:
    """run.json, checked to hold what `train` writes there."""
    path = directory / "run.json"
    run = read_json(path)
    kinds = {"settings": dict, "corpus": dict, "checksums": dict, "tokenizers": dict}
    if not isinstance(run, dict):
        raise RunError(f"{path} is damaged: it holds a {type(run).__name__}, not an object")
    for key, kind in kinds.items():
        if not isinstance(run.get(key), kind):
            raise RunError(f"{path} is damaged: {key!r} is missing or not a {kind.__name__}")
    for side in ("src", "tgt"):
        saved = run["tokenizers"].get(side)
        if not isinstance(saved, dict) or saved.get("kind") not in KINDS:
            raise RunError(f"{path} is damaged: the {side} tokenizer is missing or not one of {KINDS}")
    return run


def tokenizer_files(tokenizers: tuple[Tokenizer, Tokenizer]) -> tuple[dict, dict[str, bytes]]:
    """run.json's entry for the tokenizers, and the subword model files to write beside it
    (written after run.json, so a crash between the two leaves a directory `train` knows)."""
    names = ("shared", "shared") if tokenizers[0] is tokenizers[1] else ("src", "tgt")
    entry, files = {}, {}
    for side, name, tokenizer in zip(("src", "tgt"), names, tokenizers):
        entry[side] = {"kind": tokenizer.kind}
        if tokenizer.model is not None:
            files[f"{name}.model"] = tokenizer.model
            entry[side].update(file=f"{name}.model", sha256=sha256(tokenizer.model))
    return entry, files


def read_tokenizers(directory: Path, run: dict) -> tuple[Tokenizer, Tokenizer]:
    """The run's tokenizers; a subword model file must be the one `train` wrote."""
    tokenizers = []
    for side in ("src", "tgt"):
        saved = run["tokenizers"][side]
        if "file" not in saved:
            tokenizers.append(Tokenizer(saved["kind"]))
            continue
        path = directory / str(saved["file"])
        if not path.is_file():
            raise RunError(f"{path} is missing: the run's tokenizer model was deleted or never written")
        model = path.read_bytes()
        if sha256(model) != saved.get("sha256"):
            raise RunError(f"{path} is damaged or was replaced: its SHA-256 is not the one in run.json")
        tokenizers.append(Tokenizer(saved["kind"], model))
    if run["tokenizers"]["src"] == run["tokenizers"]["tgt"] and "file" in run["tokenizers"]["src"]:
        return tokenizers[0], tokenizers[0]  # one shared model
    return tokenizers[0], tokenizers[1]


def read_vocabs(directory: Path, run: dict) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies of vocab.json."""
    try:
        vocab = json.loads(read_checked(directory, run, "vocab.json"))
        return Vocab.from_dict(vocab["src"]), Vocab.from_dict(vocab["tgt"])
    except (KeyError, TypeError, ValueError) as e:  # a JSONDecodeError is a ValueError
        raise RunError(f"{directory / 'vocab.json'} is damaged: {type(e).__name__} {e}") from None


def read_held_out(directory: Path, run: dict, split: str) -> list[Pair]:
    """The valid or test pairs the run was given (every reference of a source), exactly as `train` wrote them."""
    read_checked(directory, run, f"{split}.tsv")
    return read_tsv(directory / f"{split}.tsv")


def read_metrics(path: Path) -> list[dict]:
    """The records of metrics.jsonl; a line that is not a JSON object with a step (a write cut
    short by a crash) is skipped, and a missing file is an empty log."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def append_metrics(directory: Path, record: dict) -> None:
    append_whole(directory / "metrics.jsonl", (json.dumps(record) + "\n").encode("utf-8"))


def keep_metrics_until(directory: Path, step: int, validated: bool = True) -> None:
    """Forget what was logged after `step` (a resumed run is about to log those steps again),
    the validation of `step` itself unless it is `validated` (it is about to run again), and
    any line a crash cut short."""
    kept = [r for r in read_metrics(directory / "metrics.jsonl")
            if r["step"] < step or r["step"] == step and (validated or not any(k.startswith("valid_") for k in r))]
    write_text(directory / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in kept))


@dataclass
class Run:
    """A loaded run: its settings, vocabularies, models (one, or an ensemble's) and tokenizers."""

    directory: Path
    settings: dict
    src_vocab: Vocab
    tgt_vocab: Vocab
    models: list[Transformer]
    tokenizers: tuple[Tokenizer, Tokenizer]

    @cached_property
    def model(self) -> Transformer | Ensemble:
        """What translates: the run's model, or the ensemble of its models (`train --members`)."""
        return self.models[0] if len(self.models) == 1 else Ensemble(self.models)

    def decoding(self) -> tuple[int, float]:
        return chosen_decoding(self.directory, self.settings)

    def held_out(self, split: str = "test") -> Sources:
        """Each held-out source with all of its references."""
        return group_references(read_held_out(self.directory, self.settings, split))


def write_decoding(directory: Path, decoding: dict) -> None:
    """Keep the decoding chosen on the validation set in run.json (replaced atomically)."""
    run = read_run_json(directory)
    write_json(directory / "run.json", {**run, "decoding": decoding})


def load_checkpoint(path: Path) -> dict:
    """The state a model's `save` wrote, with a clear error for a missing or damaged file."""
    if not path.is_file():
        raise RunError(f"checkpoint {path} does not exist")
    try:
        state = tx.load(path)
    except (ValueError, OSError) as e:  # tx.LoadError is a ValueError
        raise RunError(f"checkpoint {path} is unreadable: {e}") from None
    if not isinstance(state.get("weights"), dict):
        raise RunError(f"checkpoint {path} is damaged: it holds no model weights")
    return state


def check_fits(config: dict, state: dict, path: Path) -> None:
    """The checkpoint's weights must have the sizes of the model `config` builds: checked before
    building it, since a run directory from elsewhere may ask for any size."""
    try:
        Transformer.check_fits(config, state["weights"], path)
    except LoadError as e:
        raise RunError(f"{e} (the config of the run's settings in run.json)") from None


def load_model(path: Path) -> Transformer:
    """The model a checkpoint holds (its class name and config are saved beside the weights)."""
    try:
        return Transformer.from_state(load_checkpoint(path), path)
    except (KeyError, TypeError, ValueError) as e:
        raise RunError(f"{path} does not hold a usable model: {e}") from None


def check_vocabularies(directory: Path, sizes: tuple[int, int], src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """The vocabularies must be the ones a model's embeddings and output were sized for (`sizes`)."""
    if (len(src_vocab), len(tgt_vocab)) != tuple(sizes):
        raise RunError(f"{directory / 'vocab.json'} does not fit the model: {len(src_vocab)} source and "
                       f"{len(tgt_vocab)} target tokens, the model has {sizes[0]} and {sizes[1]}")


def load_weights(module: tx.nn.Module, weights: dict, path: Path) -> None:
    try:
        module.load_state_dict(weights)
    except (KeyError, ValueError, TypeError) as e:
        raise RunError(f"{path} does not fit the model the run's settings build: {e}") from None


def open_run(directory: str | Path, device: str = "cpu", which: str = "best", model: int | None = None) -> Run:
    """Rebuild the models of a run directory from its settings and their `which` checkpoints: every
    model of an ensemble, or model number `model` (1, 2, ...) alone."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RunError(f"run directory {directory} does not exist" if not directory.exists()
                       else f"{directory} is a file, not a run directory")
    run = read_run_json(directory)
    src_vocab, tgt_vocab = read_vocabs(directory, run)
    n, models = members(directory, run), []
    if model is not None and not 1 <= model <= n:
        raise ValueError(f"--model {model}: {directory} holds {n} model{'s' * (n > 1)}, numbered 1 to {n}")
    for number in range(1, n + 1) if model is None else (model,):
        path = member_directory(directory, number) / f"{which}.npz"
        loaded = load_model(path)
        check_vocabularies(directory, (loaded.config.src_vocab, loaded.config.tgt_vocab), src_vocab, tgt_vocab)
        models.append(loaded.to(device).eval())
    return Run(directory, run, src_vocab, tgt_vocab, models, read_tokenizers(directory, run))


def members(directory: Path, run: dict) -> int:
    """How many models the run trains (its --members; 1 for a run from before ensembles)."""
    try:
        return MEMBER_COUNTS.check(run["settings"].get("members", 1), "settings.members")
    except ValueError as e:
        raise RunError(f"{directory / 'run.json'} is damaged: {e}") from None
