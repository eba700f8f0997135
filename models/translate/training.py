"""Training a translation model on a toy task or a TSV corpus, with checkpoints that resume exactly.

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
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
import tinygrad_tx.functional as F
from tinygrad_tx import optim

from .data import PAD_ID, Batcher, Pair, Vocab, encode_pairs, read_tsv, split_pairs, tokenize
from .evaluation import score, translate
from .plots import plot_curves
from .run import RunError, load_checkpoint, read_json, write_json, write_pairs
from .tasks import TASKS, get_task
from ..transformer import Transformer


@dataclass
class TrainSettings:
    """Everything `train` accepts; the command line fills it, a task's defaults fill the gaps."""

    task: str | None = None
    data: str | None = None
    level: str = "word"  # tokenisation of a --data corpus
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
    eval_every: int = 500
    log_every: int = 10
    device: str = "cpu"
    resume: bool = False


def run_directory(settings: TrainSettings) -> Path:
    """--out, or runs/<task name or corpus file name>."""
    return Path(settings.out or f"runs/{settings.task or Path(settings.data).stem}")


def settings_for(given: dict) -> TrainSettings:
    """The settings of a run: for a new run, the task's defaults under what was given; with
    `resume`, those saved in the run directory under what was given again (say, more steps)."""
    if not given.get("resume"):
        task_defaults = TASKS[given["task"]].defaults if given.get("task") in TASKS else {}
        return TrainSettings(**{**task_defaults, **given})
    directory = run_directory(TrainSettings(**given))
    saved = read_json(directory / "run.json")["settings"]
    return TrainSettings(**{**saved, **given, "out": str(directory)})


def load_pairs(settings: TrainSettings) -> tuple[dict[str, list[Pair]], str, str]:
    """Train/valid/test pairs and the source/target tokenisation levels."""
    if (settings.task is None) == (settings.data is None):
        raise ValueError("train needs exactly one of --task NAME or --data pairs.tsv")
    if settings.task is not None:
        task = get_task(settings.task)
        n = settings.n_held_out
        return task.make_splits(settings.seed, settings.n_train, n, n), task.src_level, task.tgt_level
    return split_pairs(read_tsv(settings.data), settings.seed), settings.level, settings.level


class Trainer:
    """One training run in one run directory."""

    def __init__(self, settings: TrainSettings):
        dist.init(settings.device)  # first: each rank takes its own GPU before anything is allocated
        self.main = dist.rank() == 0  # only rank 0 prints, validates and writes
        self.s = settings
        self.dir = run_directory(settings)
        splits, self.src_level, self.tgt_level = load_pairs(settings)
        self.train_pairs, self.valid_pairs, self.test_pairs = splits["train"], splits["valid"], splits["test"]
        tokenized = [(tokenize(s, self.src_level), tokenize(t, self.tgt_level)) for s, t in self.train_pairs]
        self.src_vocab = Vocab.build(s for s, _ in tokenized)
        self.tgt_vocab = Vocab.build(t for _, t in tokenized)
        longest = max(max(len(s), len(t)) for s, t in tokenized)
        tx.manual_seed(settings.seed)
        self.model = Transformer(
            len(self.src_vocab), len(self.tgt_vocab), d_model=settings.d_model, num_heads=settings.heads,
            num_encoder_layers=settings.layers, num_decoder_layers=settings.layers, d_ff=settings.d_ff,
            dropout=settings.dropout, max_len=2 * longest + 16, pad_id=PAD_ID).to(settings.device)
        self.parallel = dist.DataParallel(self.model)  # with several ranks: averages gradients in backward
        self.optimizer = optim.Adam(self.model.parameters(), lr=settings.lr, betas=(0.9, 0.98), eps=1e-9)
        warmup = min(settings.warmup, settings.steps // 4)  # short runs still get to decay
        self.schedule = optim.WarmupCosine(self.optimizer, warmup, settings.steps, settings.lr, settings.lr * 0.05)
        src_ids, tgt_ids = encode_pairs(self.train_pairs, self.src_vocab, self.tgt_vocab,
                                        self.src_level, self.tgt_level)
        self.batcher = Batcher(src_ids, tgt_ids, settings.batch_size, seed=settings.seed)
        self.step, self.best, self.warned_no_plot = 0, -1.0, False

    # -- the run directory -------------------------------------------------------------
    def start(self) -> None:
        """Create the run directory, or, with --resume, restore the last checkpoint."""
        if self.s.resume:
            self.restore()
            return
        if (self.dir / "last.npz").exists():
            raise RunError(f"{self.dir} already holds a run; use --resume to continue it or --out for a new one")
        if not self.main:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.dir / "run.json", {
            "src_level": self.src_level, "tgt_level": self.tgt_level,
            "settings": {k: v for k, v in asdict(self.s).items() if k != "resume"}})
        write_json(self.dir / "vocab.json", {"src": self.src_vocab.to_dict(), "tgt": self.tgt_vocab.to_dict()})
        write_pairs(self.dir / "valid.tsv", self.valid_pairs)
        write_pairs(self.dir / "test.tsv", self.test_pairs)
        (self.dir / "metrics.jsonl").write_text("")

    def save(self, name: str) -> None:
        """The model file (`Transformer.load` reads it) with the training state beside it."""
        self.model.save(self.dir / name, optimizer=self.optimizer.state_dict(),
                        schedule=self.schedule.state_dict(), step=self.step, best=self.best)

    def restore(self) -> None:
        state = load_checkpoint(self.dir / "last.npz")
        self.model.load_state_dict(state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.step, self.best = int(state["step"]), float(state["best"])
        if not self.main:
            return
        # forget what was logged after the checkpoint: those steps are about to run again
        log = self.dir / "metrics.jsonl"
        kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= self.step]
        log.write_text("".join(line + "\n" for line in kept))

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

    def _loop(self, progress, stop) -> str:
        self.model.train()
        params = self.model.parameters()
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
            logits = self.model(src, tgt_in)  # (B, T, V)
            loss = self.loss(logits, tgt_out, int(n_tokens))
            self.optimizer.zero_grad()
            loss.backward()
            optim.clip_grad_norm(params, 1.0)
            self.optimizer.step()
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

    def loss(self, logits: tx.Tensor, tgt_out, n_tokens: int) -> tx.Tensor:
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
        """Score greedy translations of the validation pairs; keep `best.npz`, write `last.npz`."""
        self.model.eval()
        sources = [s for s, _ in self.valid_pairs]
        references = [t for _, t in self.valid_pairs]
        outputs = translate(self.model, sources, self.src_vocab, self.tgt_vocab, (self.src_level, self.tgt_level))
        metrics = score(outputs, references, self.tgt_level)
        self.model.train()
        self.log({"step": self.step, "valid_exact_match": metrics["exact_match"],
                  "valid_token_accuracy": metrics["token_accuracy"], "valid_bleu": metrics["bleu"]})
        progress.write(f"step {self.step}: validation exact match {metrics['exact_match']:.1f}%, "
                       f"token accuracy {metrics['token_accuracy']:.1f}%")
        for s, o, r in list(zip(sources, outputs, references))[:3]:
            progress.write(f"  {s!r} -> {o!r}   (reference {r!r})")
        if metrics["exact_match"] > self.best:
            self.best = metrics["exact_match"]
            self.save("best.npz")
        self.save("last.npz")
        if not plot_curves(self.dir) and not self.warned_no_plot:
            progress.write("matplotlib is not installed, so no curves.png: pip install \"tinygrad-tx[viz]\"")
            self.warned_no_plot = True
