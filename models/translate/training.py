"""Training a translation model on a toy task or a TSV corpus, with checkpoints that resume exactly.

The training step (forward, loss, backward, clipping, Adam) runs under `tx.jit`
unless `--no-jit`: each batch shape is recorded once and every other step of
that shape replays on raw arrays. The batcher's length buckets already give few
shapes (2 to 22 an epoch on the built-in tasks), and padding further costs more
than replaying saves (multiples of 8 add 40-50% tokens on the toy tasks), so
lengths are padded only as far as needed to fit an epoch's shapes in the jit's
cache (`length_multiple`).

A run is deterministic given its seed: the data split, the initial weights, the
batch order (a function of seed and epoch) and dropout (the device's generator is
reseeded from seed and step before every step, so no generator state needs saving,
on CPU or GPU). So an interrupted run resumed from its last checkpoint computes the
very same losses as one that was never interrupted.

Started by `mpiexec -n N`, the same run is data-parallel (`tinygrad_tx.distributed`):
`--batch-size` stays the global batch, and each process trains on its share of every
batch of the same seeded order, so the data a step sees does not depend on N and a run
may be resumed with another N. Only rank 0 prints, validates and writes the run
directory; every rank reads it (on several hosts it must be on a shared file system).
"""
from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
import tinygrad_tx.functional as F
from tinygrad_tx import optim
from tinygrad_tx.serialization import write_atomically

from .corpus import group_references, read_corpus, split_by_source
from .data import PAD_ID, Batcher, Pair, Vocab, encode_pairs
from .evaluation import score, translate
from .plots import plot_curves
from .run import (RunError, check_new_run_directory, check_vocabularies, fingerprint, load_checkpoint,
                  load_weights, pairs_text, read_held_out, read_metrics, read_run_json, read_tokenizers,
                  read_vocabs, tokenizer_files, write_run_files, write_text)
from .tasks import TASKS, get_task
from .tokenization import KINDS, Tokenizer
from ..transformer import Transformer


@dataclass
class TrainSettings:
    """Everything `train` accepts; the command line fills it, a task's defaults fill the gaps."""

    task: str | None = None
    data: str | None = None
    src_col: int = 1  # the --data file's columns (1-based) holding source and target
    tgt_col: int = 2
    tokenizer: str = "bpe"  # of a --data corpus: char, word, bpe or unigram (tasks set their own)
    vocab_size: int = 4000  # subword pieces per side (fewer when the corpus is small)
    shared_vocab: bool = False  # one tokenizer and vocabulary for both sides, output tied to embeddings
    out: str | None = None
    steps: int = 3000
    batch_size: int = 64
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    d_ff: int = 256
    dropout: float = 0.1
    lr: float = 2e-3
    warmup: int = 200
    label_smoothing: float = 0.1
    seed: int = 0
    n_train: int = 20000
    n_held_out: int = 500
    max_len: int = 200  # longest sentence, in tokens, to train on: longer pairs are left out
    eval_every: int = 500
    average: int = 1  # the final model may be the mean of the weights at the last N validations
    log_every: int = 10
    device: str = "cpu"
    jit: bool = True  # record the training step once per batch shape and replay it (tx.jit)
    resume: bool = False


JIT_SHAPES = 32  # records the jitted step keeps (least recently used evicted)


def corpus_defaults(n_pairs: int) -> dict:
    """Model, vocabulary and schedule for a --data corpus of `n_pairs` pairs.

    Sized so that 10-100k short pairs train in about 10 minutes of a 2-core laptop's
    CPU: most of a step is the matrix products, and the output layer's share grows
    with the vocabulary, so the vocabulary grows with the corpus (about one piece
    per 8 pairs) up to 4000 pieces (on Tatoeba a step of 96 pairs took 0.19 s with
    2200 target pieces and 0.24 s with 6200); about 25 epochs, but no more than 4000
    steps of 96 pairs. A small corpus gets a smaller model, which overfits less. On the
    18k-pair Tatoeba English-French list this is 2300 pieces per side, 4 heads of a
    128-wide model, 2 layers and 4000 steps (README: "Your own corpus", which has the
    measurements behind these choices: in the same time, 2 layers and more steps beat
    3 layers, batches of 96 beat 64, lr 2e-3 beat 1e-3 and 3e-3; fewer pieces, a shared
    vocabulary, more dropout and checkpoint averaging did not pay).
    """
    small = n_pairs < 3000
    return dict(vocab_size=int(min(4000, max(200, round(n_pairs / 8, -2)))),
                d_model=64 if small else 128, heads=4, layers=2, d_ff=256 if small else 512,
                steps=int(min(4000, max(1000, round(25 * n_pairs / 96, -2)))), batch_size=96,
                lr=2e-3, warmup=400, dropout=0.1, eval_every=500)


def run_directory(settings: TrainSettings) -> Path:
    """--out, or runs/<task name or corpus file name>."""
    return Path(settings.out or f"runs/{settings.task or Path(settings.data).stem}")


FIXED_ON_RESUME = ("task", "data", "src_col", "tgt_col", "tokenizer", "vocab_size", "shared_vocab", "seed", "n_train", "n_held_out", "max_len",
                   "d_model", "heads", "layers", "d_ff")
"""What a resumed run must keep: its data and its model (the rest, say --steps, may change)."""


def settings_for(given: dict) -> TrainSettings:
    """The settings of a run, all checked: for a new run, the task's defaults under what was
    given; with `resume`, those saved in the run directory under what was given again (say,
    more steps), refusing a change of data or model."""
    for name in ("tokenizer", "vocab_size", "shared_vocab", "src_col", "tgt_col"):
        if given.get("task") is not None and given.get(name) is not None:
            raise ValueError(f"--{name.replace('_', '-')} is for --data corpora; task {given['task']!r} "
                             f"has its own tokenisation")
    if given.get("task") is not None:
        get_task(given["task"])  # an unknown name is an error before anything else
    if not given.get("resume"):
        if given.get("data") is not None:
            corpus = read_corpus(given["data"], given.get("src_col", 1), given.get("tgt_col", 2))
            defaults = corpus_defaults(len(corpus.pairs))
        else:
            defaults = TASKS[given["task"]].defaults if given.get("task") in TASKS else {}
        settings = TrainSettings(**{**defaults, **given})
        check_settings(settings)
        return settings
    directory = run_directory(TrainSettings(**given))
    saved = read_run_json(directory)["settings"]
    unknown = set(saved) - {f.name for f in fields(TrainSettings)}
    if unknown:
        raise RunError(f"{directory / 'run.json'} is damaged: unknown settings {sorted(unknown)}")
    for key in FIXED_ON_RESUME:
        if key in given and given[key] != saved.get(key):
            raise RunError(f"--resume: the run in {directory} was trained with {key} {saved.get(key)!r}, "
                           f"not {given[key]!r}; a resumed run keeps its data and model")
    settings = TrainSettings(**{**saved, **given, "out": str(directory)})
    check_settings(settings)
    return settings


def check_settings(s: TrainSettings) -> None:
    """Every setting in range, so that a bad one is one clear line before anything is written."""
    if (s.task is None) == (s.data is None):
        raise ValueError("train needs exactly one of --task NAME or --data pairs.tsv")
    at_least_one = ("steps", "batch_size", "d_model", "heads", "layers", "d_ff", "n_train", "n_held_out",
                    "max_len", "eval_every", "average", "log_every", "src_col", "tgt_col", "vocab_size")
    for name in at_least_one:
        value = getattr(s, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a whole number >= 1, not {value!r}")
    if s.d_model % s.heads:
        raise ValueError(f"--d-model {s.d_model} must be divisible by --heads {s.heads}")
    checks = [("dropout", 0 <= s.dropout < 1, "in [0, 1)"), ("lr", math.isfinite(s.lr) and s.lr > 0, "> 0"),
              ("warmup", s.warmup >= 0, ">= 0"), ("seed", s.seed >= 0, ">= 0"),
              ("label_smoothing", 0 <= s.label_smoothing <= 1, "in [0, 1]"), ("tokenizer", s.tokenizer in KINDS, f"one of {KINDS}")]
    for name, ok, wanted in checks:
        if not ok:
            raise ValueError(f"--{name.replace('_', '-')} must be {wanted}, not {getattr(s, name)!r}")
    if s.out is not None and Path(s.out).exists() and not Path(s.out).is_dir():
        raise ValueError(f"--out {s.out} is a file, not a directory")


def load_pairs(settings: TrainSettings) -> tuple[dict[str, list[Pair]], tuple[str, str], list[str]]:
    """Train/valid/test pairs, the source/target tokenizer kinds, and notes for the log."""
    if settings.task is not None:
        task = get_task(settings.task)
        n = settings.n_held_out
        return task.make_splits(settings.seed, settings.n_train, n, n), (task.src_level, task.tgt_level), []
    corpus = read_corpus(settings.data, settings.src_col, settings.tgt_col)
    notes = [corpus.ignored_columns] if corpus.ignored_columns else []
    return split_by_source(corpus.pairs, settings.seed), (settings.tokenizer, settings.tokenizer), notes


def train_tokenizers(pairs: list[Pair], kinds: tuple[str, str], vocab_size: int,
                     shared: bool) -> tuple[Tokenizer, Tokenizer]:
    """Tokenizers learned from the training pairs only (held-out text must not shape them)."""
    if shared:
        if kinds[0] != kinds[1]:
            raise ValueError(f"--shared-vocab needs one tokenizer for both sides, not {kinds[0]} and {kinds[1]}")
        tokenizer = Tokenizer.train(kinds[0], [s for s, _ in pairs] + [t for _, t in pairs], vocab_size)
        return tokenizer, tokenizer
    return (Tokenizer.train(kinds[0], [s for s, _ in pairs], vocab_size),
            Tokenizer.train(kinds[1], [t for _, t in pairs], vocab_size))


def within_length(splits: dict[str, list[Pair]], tokenizers: tuple[Tokenizer, Tokenizer],
                  max_len: int) -> tuple[dict[str, list[Pair]], int]:
    """The splits without pairs of more than `max_len` tokens on either side, and how many went.

    One very long line would otherwise set the model's maximum length, and every batch's
    attention arrays would be sized for it."""
    def fits(pair: Pair) -> bool:
        return all(len(tokenizer.encode(text)) <= max_len for text, tokenizer in zip(pair, tokenizers))

    kept = {name: [p for p in pairs if fits(p)] for name, pairs in splits.items()}
    dropped = sum(len(splits[name]) - len(kept[name]) for name in splits)
    empty = [name for name, pairs in kept.items() if not pairs]
    if empty:
        raise ValueError(f"no {' or '.join(empty)} pair is at most --max-len {max_len} tokens long")
    return kept, dropped


def length_multiple(batcher: Batcher, max_shapes: int) -> int:
    """The smallest padding multiple (1, 2, 4, ...) that gives an epoch at most `max_shapes`
    batch shapes (batch size, source length, target length)."""
    src_len = [len(s) for s in batcher.src_ids]
    tgt_len = [len(t) + 1 for t in batcher.tgt_ids]  # BOS or EOS added
    indices = batcher.batch_indices(0)
    multiple = 1
    while True:
        shapes = {(len(i), -(-max(src_len[k] for k in i) // multiple), -(-max(tgt_len[k] for k in i) // multiple))
                  for i in indices}
        if len(shapes) <= max_shapes:
            return multiple
        multiple *= 2


class Trainer:
    """One training run in one run directory.

    A new run builds its vocabularies from the training pairs; a resumed one reads them,
    and its held-out pairs, back from the run directory, after checking that the corpus
    still gives the pairs it was trained on (`fingerprint`)."""

    def __init__(self, settings: TrainSettings):
        dist.init(settings.device)  # first: each rank takes its own GPU before anything is allocated
        self.main = dist.rank() == 0  # only rank 0 prints, validates and writes
        self.s = settings
        self.dir = run_directory(settings)
        splits, kinds, self.notes = load_pairs(settings)
        self.fingerprint = fingerprint(splits)
        if settings.resume:  # the run's own tokenizers: retraining them need not give the same pieces
            self.run_json = read_run_json(self.dir)
            self.tokenizers = read_tokenizers(self.dir, self.run_json)
        else:
            self.tokenizers = train_tokenizers(splits["train"], kinds, settings.vocab_size, settings.shared_vocab)
        splits, self.dropped = within_length(splits, self.tokenizers, settings.max_len)
        if settings.resume:
            self.src_vocab, self.tgt_vocab, splits = self._saved_data(splits)
        else:
            self.src_vocab, self.tgt_vocab = self._new_vocabs(splits["train"])
        self.train_pairs, self.valid_pairs, self.test_pairs = splits["train"], splits["valid"], splits["test"]
        self.valid_sources = group_references(self.valid_pairs)
        longest = max(len(tokenizer.encode(text)) for pair in self.train_pairs
                      for text, tokenizer in zip(pair, self.tokenizers))
        tx.manual_seed(settings.seed)
        self.model = Transformer(
            len(self.src_vocab), len(self.tgt_vocab), d_model=settings.d_model, num_heads=settings.heads,
            num_encoder_layers=settings.layers, num_decoder_layers=settings.layers, d_ff=settings.d_ff,
            dropout=settings.dropout, max_len=2 * longest + 16, pad_id=PAD_ID,
            tie_embeddings=settings.shared_vocab).to(settings.device)
        self.parallel = dist.DataParallel(self.model)  # with several ranks: averages gradients in backward
        self.optimizer = optim.Adam(self.model.parameters(), lr=settings.lr, betas=(0.9, 0.98), eps=1e-9)
        warmup = min(settings.warmup, settings.steps // 4)  # short runs still get to decay
        self.schedule = optim.WarmupCosine(self.optimizer, warmup, settings.steps, settings.lr, settings.lr * 0.05)
        src_ids, tgt_ids = encode_pairs(self.train_pairs, self.src_vocab, self.tgt_vocab, self.tokenizers)
        self.batcher = Batcher(src_ids, tgt_ids, settings.batch_size, seed=settings.seed)
        self.jit = settings.jit
        if self.jit:
            self.batcher.length_multiple = length_multiple(self.batcher, JIT_SHAPES)
        self.step, self.best, self.warned_no_plot = 0, -1.0, False
        self.average = Average(snapshot_steps(settings.steps, settings.eval_every, settings.average))

    def _new_vocabs(self, train_pairs: list[Pair]) -> tuple[Vocab, Vocab]:
        src_tok, tgt_tok = self.tokenizers
        if self.s.shared_vocab:
            shared = Vocab.build([src_tok.encode(s) for s, _ in train_pairs] + [tgt_tok.encode(t) for _, t in train_pairs])
            return shared, shared
        return (Vocab.build(src_tok.encode(s) for s, _ in train_pairs),
                Vocab.build(tgt_tok.encode(t) for _, t in train_pairs))

    def _saved_data(self, splits: dict[str, list[Pair]]) -> tuple[Vocab, Vocab, dict[str, list[Pair]]]:
        """Vocabularies and held-out pairs of the run being resumed, once its corpus is known to be
        the same; training pairs whose source is held out are left out, so none can leak in."""
        saved = self.run_json["corpus"].get("fingerprint")
        if saved != self.fingerprint:
            what = f"task {self.s.task!r}" if self.s.task else f"corpus {self.s.data}"
            raise RunError(f"--resume: {what} does not give the pairs the run in {self.dir} was trained on "
                           f"(fingerprint {self.fingerprint[:12]} now, {str(saved)[:12]} in run.json)")
        src_vocab, tgt_vocab = read_vocabs(self.dir, self.run_json)
        held_out = {name: read_held_out(self.dir, self.run_json, name) for name in ("valid", "test")}
        sources = {s for pairs in held_out.values() for s, _ in pairs}
        return src_vocab, tgt_vocab, {"train": [p for p in splits["train"] if p[0] not in sources], **held_out}

    # -- the run directory -------------------------------------------------------------
    def start(self) -> None:
        """Create the run directory, or, with --resume, restore the last checkpoint."""
        if self.s.resume:
            self.restore()
            return
        check_new_run_directory(self.dir)
        if not self.main:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tokenizers, models = tokenizer_files(self.tokenizers)
        vocab = {"src": self.src_vocab.to_dict(), "tgt": self.tgt_vocab.to_dict()}
        write_run_files(self.dir, {
            "tokenizers": tokenizers, "corpus": {"fingerprint": self.fingerprint},
            "settings": {k: v for k, v in asdict(self.s).items() if k != "resume"},
        }, {"vocab.json": json.dumps(vocab, indent=2) + "\n", "valid.tsv": pairs_text(self.valid_pairs),
            "test.tsv": pairs_text(self.test_pairs)})
        for name, model in models.items():
            write_atomically(self.dir / name, lambda f, model=model: f.write(model))
        write_text(self.dir / "metrics.jsonl", "")

    def save(self, name: str) -> None:
        """The model file (`Transformer.load` reads it) with the training state beside it."""
        self.model.save(self.dir / name, optimizer=self.optimizer.state_dict(),
                        schedule=self.schedule.state_dict(), step=self.step, best=self.best,
                        average=self.average.state_dict())

    def restore(self) -> None:
        path = self.dir / "last.npz"
        state = load_checkpoint(path)
        config = state.get("config") if isinstance(state.get("config"), dict) else {}
        check_vocabularies(self.dir, (config.get("src_vocab"), config.get("tgt_vocab")), self.src_vocab, self.tgt_vocab)
        load_weights(self.model, state["weights"], path)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            self.schedule.load_state_dict(state["schedule"])
            self.step, self.best = int(state["step"]), float(state["best"])
            self.average.load_state_dict(state.get("average", {}))
        except (KeyError, TypeError, ValueError) as e:
            raise RunError(f"checkpoint {path} is damaged: {type(e).__name__} {e}") from None
        if self.best >= 0 or (self.dir / "best.npz").exists():  # a validation ran: the final report needs it
            load_checkpoint(self.dir / "best.npz")
        if not self.main:
            return
        # forget what was logged after the checkpoint (those steps are about to run again) and
        # any line a crash cut short
        kept = [r for r in read_metrics(self.dir / "metrics.jsonl") if r["step"] <= self.step]
        write_text(self.dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in kept))

    def log(self, record: dict) -> None:
        if not self.main:
            return
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    # -- training ------------------------------------------------------------------------
    def batches(self):
        """Batches from the current step on: epoch and position follow from the step count."""
        per_epoch = len(self.batcher)
        epoch, skip = divmod(self.step, per_epoch)
        while True:
            for i, batch in enumerate(self.batcher.batches(epoch, dist.rank(), dist.world_size())):
                if i >= skip:
                    yield batch
            epoch, skip = epoch + 1, 0

    def train(self, progress) -> str:
        """Train until `steps`; returns "done" or "interrupted" (Ctrl-C stops at a step boundary)."""
        stop = []
        previous = signal.signal(signal.SIGINT, lambda *_: stop.append(True))
        try:
            return self._loop(progress, stop)
        finally:
            signal.signal(signal.SIGINT, previous)

    def train_step(self):
        """One step as a function of the batch's id Tensors and its real-token count (a Tensor, so
        that it is data, not part of the jit's signature), returning the loss: jitted unless --no-jit."""
        params = self.model.parameters()

        def step(src: tx.Tensor, tgt_in: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor) -> tx.Tensor:
            logits = self.model(src, tgt_in)  # (B, T, V)
            loss = self.loss(logits, tgt_out, n_tokens)
            self.optimizer.zero_grad()
            loss.backward()
            optim.clip_grad_norm(params, 1.0)
            self.optimizer.step()
            return loss

        return tx.jit(step, max_traces=JIT_SHAPES) if self.jit else step

    def _loop(self, progress, stop) -> str:
        self.model.train()
        step = self.train_step()
        device = tx.get_backend(self.s.device)
        tokens, started = 0, time.perf_counter()
        for src, tgt_in, tgt_out in self.batches():
            if self.step >= self.s.steps:
                return "done"
            # one small all-reduce: the batch's real tokens on all ranks, and whether any rank was interrupted
            n_tokens, stopping = dist.all_reduce(np.array([int((tgt_out != PAD_ID).sum()), len(stop)]), op="sum")
            if stopping:  # every rank stops at the same step
                if self.main:
                    self.save("last.npz")
                return "interrupted"
            # dropout masks depend on (seed, step) only, and differ between ranks
            device.seed((self.s.seed * 1_000_003 + self.step) * dist.world_size() + dist.rank())
            batch = (tx.Tensor(ids, device=self.s.device) for ids in (src, tgt_in, tgt_out))
            loss = step(*batch, tx.Tensor(np.float32(n_tokens), device=self.s.device))
            self.schedule.step()
            self.step += 1
            tokens += int(n_tokens)
            progress.update(1)
            if self.step % self.s.log_every == 0:
                rate = tokens / (time.perf_counter() - started)
                record = {"step": self.step, "loss": round(dist.all_reduce(loss.item(), op="mean"), 5),
                          "lr": self.schedule.get_lr(), "tokens_per_s": round(rate)}
                progress.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{rate:.0f}", lr=f"{record['lr']:.1e}")
                self.log(record)
            if self.main and (self.step % self.s.eval_every == 0 or self.step == self.s.steps):
                self.validate(progress)
        return "done"

    def loss(self, logits: tx.Tensor, tgt_out, n_tokens: tx.Tensor) -> tx.Tensor:
        """The mean cross-entropy per real (non-padding) token of the whole global batch.

        `n_tokens` counts the real tokens of the batch on all ranks together. Each rank
        sums its own tokens' losses and divides by n_tokens / world_size; DataParallel
        then averages over the ranks: (1/N) Σ_r N·sum_r / n_tokens = Σ_r sum_r / n_tokens,
        the global per-token mean, as one process with the whole batch computes it.
        Averaging each rank's own mean would instead weight a token on a rank whose shard
        holds few real tokens (short targets, much padding) more than one on a full rank,
        and the result would depend on how the batch was split. With one process this
        is exactly the usual mean over the non-ignored targets.
        """
        loss_sum = F.cross_entropy(logits, tgt_out, ignore_index=PAD_ID, label_smoothing=self.s.label_smoothing,
                                   reduction="sum")
        return loss_sum / (n_tokens / dist.world_size())

    def validate(self, progress) -> None:
        """Score the model on the validation sources; keep `best.npz`, write `last.npz`. At the
        last step the mean of the last `--average` validations' weights competes as well."""
        self._keep_if_best(self._score(progress, f"step {self.step}"))
        self.average.add(self.step, self.model)
        if self.step == self.s.steps and len(self.average.taken) > 1:
            trained = self.model.state_dict()
            self.model.load_state_dict(self.average.mean())
            self._keep_if_best(self._score(progress, f"mean of the weights at steps {self.average.taken}",
                                           averaged=len(self.average.taken)))
            self.model.load_state_dict(trained)  # last.npz goes on from the trained weights
        self.save("last.npz")
        if not plot_curves(self.dir) and not self.warned_no_plot:
            progress.write("matplotlib is not installed, so no curves.png: pip install \"tinygrad-tx[viz]\"")
            self.warned_no_plot = True

    def _score(self, progress, what: str, **note) -> float:
        """Greedy translations of the validation sources, logged and shown; returns the number that
        picks the best model: BLEU against all references for a corpus (it has many right
        translations), exact match for a task."""
        self.model.eval()
        sources = [s for s, _ in self.valid_sources]
        references = [refs for _, refs in self.valid_sources]
        outputs = translate(self.model, sources, self.src_vocab, self.tgt_vocab, self.tokenizers)
        metrics = score(outputs, references, self.tokenizers[1])
        self.model.train()
        self.log({"step": self.step, **note, "valid_exact_match": metrics["exact_match"],
                  "valid_token_accuracy": metrics["token_accuracy"], "valid_bleu": metrics["bleu"],
                  "valid_chrf": metrics["chrf"]})
        progress.write(f"{what}: validation exact match {metrics['exact_match']:.1f}%, "
                       f"token accuracy {metrics['token_accuracy']:.1f}%, BLEU {metrics['bleu']:.1f}")
        for s, o, r in list(zip(sources, outputs, references))[:3]:
            progress.write(f"  {s!r} -> {o!r}   (reference {r[0]!r}{' or others' if len(r) > 1 else ''})")
        return metrics["bleu"] if self.s.data else metrics["exact_match"]

    def _keep_if_best(self, key: float) -> None:
        if key > self.best:
            self.best = key
            self.save("best.npz")


def snapshot_steps(steps: int, every: int, n: int) -> tuple[int, ...]:
    """The steps of the last `n` validations (one every `every` steps, and one at the last step)."""
    return tuple(sorted({*range(every, steps, every), steps}))[-n:] if n > 1 else ()


class Average:
    """Checkpoint averaging: a running sum of the weights at the given steps.

    Late in a decaying schedule the weights still wander around a minimum from batch to
    batch; their mean tends to sit nearer its centre and often translates better than any
    one of them (Vaswani et al. average the last 5 or 20 checkpoints). The sum is saved in
    `last.npz`, so a resumed run averages the very same weights."""

    def __init__(self, steps: tuple[int, ...]):
        self.steps, self.taken, self.sum = steps, [], {}

    def add(self, step: int, model: Transformer) -> None:
        if step in self.steps and step not in self.taken:
            for name, value in model.state_dict().items():
                self.sum[name] = self.sum[name] + value if name in self.sum else value
            self.taken.append(step)

    def mean(self) -> dict[str, np.ndarray]:
        return {name: total / len(self.taken) for name, total in self.sum.items()}

    def state_dict(self) -> dict:
        return {"taken": list(self.taken), "sum": dict(self.sum)}

    def load_state_dict(self, state: dict) -> None:
        """Take the saved sum, unless it holds steps this run no longer averages (resumed with
        other --steps or --average): then the sum starts again."""
        taken = [int(step) for step in state.get("taken", [])]
        if set(taken) <= set(self.steps):
            self.taken, self.sum = taken, dict(state.get("sum", {}))
