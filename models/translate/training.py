"""The training loop of `python -m models train`: batches in, Adam steps, validation and
checkpoints out, with checkpoints that resume exactly.

    settings.py     what `train` accepts          preparation.py  pairs, tokenizers, vocabularies, batches
    run.py          the run directory             averaging.py    checkpoint averaging
    ranks.py        what mpiexec's ranks must agree on

The training step (forward, loss, backward, clipping, Adam) runs under `tx.jit` unless
`--no-jit`: each batch shape is recorded once and every other step of that shape replays
on raw arrays.

A run is deterministic given its seed: the data split, the initial weights, the batch order
(a function of seed and epoch) and dropout (the device's generator is reseeded from seed and
step before every step, so no generator state needs saving, on CPU or GPU). So an
interrupted run resumed from its last checkpoint computes the very same losses as one that
was never interrupted.

With `--time`, the run chooses its own last step once it has timed itself, and again after
each later validation (budget.py); rank 0 times and decides, and its word reaches every rank
through the small all-reduce that every step makes anyway, as an interruption does, so every
rank changes its schedule, or stops, at the same step. The choice is saved in the
checkpoints, so a resumed run keeps it.

Started by `mpiexec -n N`, the same run is data-parallel (`tinygrad_tx.distributed`):
`--batch-size` stays the global batch, and each process trains on its share of every
batch of the same seeded order, so the data a step sees does not depend on N and a run
may be resumed with another N. Only rank 0 prints, validates and writes the run
directory; every rank reads it (on several hosts it must be on a shared file system).

With `--members N` (N processes) the ranks instead train N models of an ensemble, one each:
no gradient is averaged; every rank takes whole batches, in the same order, and its own
initial weights (the seed plus its rank: the first model starts from a one-model run's
weights) and dropout masks. The ranks still step together (the small all-reduce of every
step carries Ctrl-C and the time budget), and each validates its own model and keeps its own
checkpoints (`member_directory`). On the 18k-pair Tatoeba list the two cores of a laptop
gain more as two models than as one data-parallel model (docs/translate.md): one process
alone makes 8,000 target tokens a second, two data-parallel ones 10,300 together, and the
two models' ensemble scored 1 to 2 BLEU above the one model.
"""
from __future__ import annotations

import signal
import time
from functools import cached_property
from typing import Callable

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
import tinygrad_tx.functional as F
from tinygrad_tx import optim, schedules

from . import layer_stats
from .averaging import Average, snapshot_steps
from .budget import CHANGE_BY, PLAN_AT_VALIDATION, Budget, Timing, parse_duration
from ..text.data import PAD_ID
from .evaluation import score, summary, translate
from .plots import plot_curves
from .preparation import JIT_SHAPES, prepare
from .ranks import check_data_agree, check_settings_agree, on_every_rank, together
from .run import (SNAPSHOTS, RunError, append_metrics, check_fits, check_new_run_directory, check_vocabularies,
                  claim, create_run, keep_metrics_until, load_checkpoint, load_weights, member_directory, write_text)
from .settings import TrainSettings, run_directory
from ..transformer import Transformer


class Trainer:
    """One training run in one run directory: `start()`, then `train(progress)`.

    Under mpiexec the caller has joined the job first (`dist.init(device)`, as `cli.main` does),
    so that each rank took its own GPU before anything was allocated."""

    def __init__(self, settings: TrainSettings, started: float | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        """`started`: when the command began, by `clock` (now if not given), from which a --time
        budget counts."""
        started = clock() if started is None else started
        check_settings_agree(settings)  # before any setting sends a rank down another path
        together(check_members, settings.members)
        self.main = dist.rank() == 0  # only rank 0 prints and writes the run's files
        self.ensemble = settings.members > 1  # each rank trains a model of its own
        self.member = dist.rank() if self.ensemble else 0
        self.validates = self.main or self.ensemble  # and keeps checkpoints, in its own directory
        self.shards = 1 if self.ensemble else dist.world_size()  # how many ranks share a batch
        self.shard = 0 if self.ensemble else dist.rank()  # which share of it this rank takes
        self.s, self.dir = settings, run_directory(settings)
        self.out = member_directory(self.dir, self.member + 1)
        self.data = together(prepare, settings, self.dir)
        config = dict(src_vocab=len(self.data.src_vocab), tgt_vocab=len(self.data.tgt_vocab),
                      **settings.model_options(), max_len=2 * self.data.longest + 16, pad_id=PAD_ID,
                      tie_embeddings=settings.shared_vocab or settings.tie_output)
        self.last = together(self._read_last, config) if settings.resume else None
        check_data_agree(self.data, None if self.ensemble else self.last)  # an ensemble's models differ
        tx.manual_seed(settings.seed + self.member)
        model = Transformer(**config).to(settings.device)
        # data-parallel: rank 0's weights on every rank; gradients averaged over the ranks in backward
        self.model = model if self.ensemble else dist.DataParallel(model)
        # AdamW only with a weight decay: a run trained before --weight-decay resumes with the Adam it saved.
        # The decay shrinks the matrices and embeddings, not the biases and LayerNorm's gains and
        # shifts (as is usual: a gain shrunk toward 0 scales its whole layer down); on Tatoeba that
        # was worth about 0.5 BLEU to one model (docs/translate.md)
        adam = dict(lr=settings.lr, betas=(0.9, 0.98), eps=1e-9)
        params = self.model.parameters()
        self.optimizer = (optim.AdamW(params, weight_decay=settings.weight_decay,
                                      no_decay=[p for p in params if p.ndim < 2], **adam)
                          if settings.weight_decay else optim.Adam(params, **adam))
        self.step, self.best = 0, -1.0
        self.most_steps = settings.steps  # a --time run's bound on the steps it chooses
        self._set_steps(settings.steps)
        # --time: the steps are chosen when the run has timed itself (budget.py), at most
        # settings.steps, which until then stands in as the end the warm-up sees
        self.clock = clock
        self.budget = (Budget(parse_duration(settings.time), started, settings.members, dist.world_size())
                       if settings.time else None)
        self.planned = self.budget is None
        self.planned_at: int | None = None  # the step of the last choice; None: not chosen here (resumed)
        self.timing = Timing(clock)
        self.lock = None
        self.warned_no_plot = False
        self.unsaved_best = False  # resumed from a validation that beat best.npz before it was written

    def _set_steps(self, steps: int) -> None:
        """End the run, and decay its learning rate, at `steps` (from the step it is at)."""
        self.s.steps = steps
        warmup = min(self.s.warmup, steps // 4)  # short runs still get to decay
        self.optimizer.lr = self.s.lr  # the peak: a schedule takes it from the optimizer
        if self.s.schedule == "linear":  # straight to zero
            self.schedule = schedules.WarmupLinear(self.optimizer, warmup, steps)
        else:
            self.schedule = schedules.WarmupCosine(self.optimizer, warmup, steps, lr_min=0.05 * self.s.lr)
        self.schedule.load_state_dict({"step_num": self.step + 1})
        kept = getattr(self, "average", None)
        self.average = Average(snapshot_steps(steps, self.s.eval_every, self.s.average))
        if kept is not None:  # weights summed already, if their steps are still among the last validations
            self.average.load_state_dict(kept.state_dict())

    def _read_last(self, config: dict) -> dict:
        """last.npz of the run being resumed, checked against the vocabularies and, before it is
        built, the model `config` describes."""
        path = self.out / "last.npz"
        state = load_checkpoint(path)
        saved = state.get("config") if isinstance(state.get("config"), dict) else {}
        check_vocabularies(self.dir, (saved.get("src_vocab"), saved.get("tgt_vocab")),
                           self.data.src_vocab, self.data.tgt_vocab)
        check_fits(config, state, path)
        return state

    def start(self) -> None:
        """Take the run directory (one `train` at a time), then fill a new one or, with --resume,
        restore the last checkpoint."""
        if not self.s.resume:
            together(check_new_run_directory, self.dir)  # every rank: a user's directory is never written into
        on_every_rank(self._claim() if self.main else None)
        if self.s.resume:
            self.restore()
        elif self.main:
            d = self.data
            create_run(self.dir, self.s.saved(), d.tokenizers, (d.src_vocab, d.tgt_vocab), d.fingerprint,
                       {"valid": d.valid_pairs, "test": d.test_pairs})
        elif self.ensemble:
            self.out.mkdir(parents=True, exist_ok=True)
            write_text(self.out / "metrics.jsonl", "")

    def _claim(self) -> RunError | None:
        """Rank 0 takes the run directory; what stops it, if anything, for every rank to see."""
        try:
            self.lock = claim(self.dir)
            if not self.s.resume:
                check_new_run_directory(self.dir)  # again: the run that held it may have written a checkpoint
        except RunError as e:
            if self.lock is not None:
                self.lock.close()
            return e
        return None

    def train(self, progress) -> str:
        """Train until `steps`; returns "done", "interrupted" (Ctrl-C stops at a step boundary) or
        "out of time" (a --time run's training time is up before the steps it chose are done).
        `progress` takes tqdm's `update`, `set_postfix`, `write`, `total` and `refresh` (a --time
        run sets the total once it has chosen its steps)."""
        stop = []
        previous = signal.signal(signal.SIGINT, lambda *_: stop.append(True))
        try:
            outcome = self._loop(progress, stop)
            dist.barrier()  # every checkpoint is written before the ranks read them all (sharing.py)
            return outcome
        finally:
            signal.signal(signal.SIGINT, previous)
            if self.lock is not None:
                self.lock.close()  # the run directory is free for the next `train`

    def _loop(self, progress, stop: list) -> str:
        self.model.train()
        if self.validates and self.unsaved_best:  # resumed after a validation whose best.npz was not written
            self.validate(progress)
        step = train_step(self.model, self.optimizer, self.s.label_smoothing, self.s.jit, self.s.rdrop, self.shards,
                          self.s.clip_norm)
        device = tx.get_backend(self.s.device)
        tokens, started = 0, time.perf_counter()
        for src, tgt_in, tgt_out in self.batches():
            if self.step >= self.s.steps:
                return "done"
            # one small all-reduce: the batch's real tokens on all ranks, whether any rank was
            # interrupted, and rank 0's word on the time budget (the last step it chose; time is up)
            mine = int((tgt_out != PAD_ID).sum())
            n_tokens, stopping, planned, time_up = dist.all_reduce(
                np.array([mine, len(stop), *self._budget_news(progress)]), op="sum")
            n_tokens = mine if self.ensemble else n_tokens  # a model of an ensemble has the whole batch
            if stopping:  # every rank stops at the same step
                if self.validates:
                    self.save("last.npz")
                return "interrupted"
            if planned:
                self._set_steps(int(planned))
                self.planned = True
                progress.total = self.s.steps
                progress.refresh()
            if time_up:
                if self.validates and self.step % self.s.eval_every:  # the model it has competes for best.npz
                    self.validate(progress)
                return "out of time"
            # dropout masks depend on (seed, step) only, and differ between ranks
            device.seed((self.s.seed * 1_000_003 + self.step) * dist.world_size() + dist.rank())
            if self.s.rdrop:  # R-Drop: each pair twice, under two dropout masks
                src, tgt_in, tgt_out = (np.concatenate([ids, ids]) for ids in (src, tgt_in, tgt_out))
            batch = (tx.Tensor(ids, device=self.s.device) for ids in (src, tgt_in, tgt_out))
            real = n_tokens * (2 if self.s.rdrop else 1)  # of the batch as the step sees it
            loss = step(*batch, tx.Tensor(np.float32(real), device=self.s.device))
            self.schedule.step()
            self.step += 1
            self.timing.stepped(self.step)
            tokens += int(n_tokens)
            progress.update(1)
            if self.step % self.s.log_every == 0:
                rate = tokens / (time.perf_counter() - started)
                loss = loss.item() if self.ensemble else dist.all_reduce(loss.item(), op="mean")
                record = {"step": self.step, "loss": round(loss, 5),
                          "lr": self.schedule.get_lr(), "tokens_per_s": round(rate)}
                progress.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{rate:.0f}", lr=f"{record['lr']:.1e}")
                self.log(record)
            if self.validates and (self.step % self.s.eval_every == 0 or self.step == self.s.steps):
                self.validate(progress)
        return "done"

    def _budget_news(self, progress) -> tuple[int, int]:
        """Rank 0's word on the --time budget before the next step: the last step it chose (0 if
        none now), and whether the training time is up. It chooses when the run has timed its
        steps up to its second validation, or a quarter of its training time and a validation,
        and again after each later validation, from the steps since it last chose. Without a
        budget, (0, 0)."""
        if not self.main or self.budget is None:
            return 0, 0
        now = self.clock()
        if self.budget.training_over(now):
            return 0, 1
        if not self.planned and self.step > 0:
            due = self.budget.plan_due(now, self.timing.started)
            if due and not self.timing.validations:
                self.validate(progress)  # no validation yet: time one now
                now = self.clock()
            if len(self.timing.validations) >= PLAN_AT_VALIDATION or due:
                step_s = self.timing.step_seconds()
                steps = self._plan(now, step_s)
                self.log({"step": self.step, "planned_steps": steps})
                progress.write(f"--time {self.s.time}: {steps} steps of {self.s.batch_size} (about "
                               f"{steps * self.s.batch_size / max(1, len(self.data.train_pairs)):.0f} epochs), "
                               f"timed at {step_s * 1000:.0f} ms a step and "
                               f"{self.timing.validation_seconds():.1f} s a validation")
                return steps, 0
        elif self.planned_at is not None and self.step % self.s.eval_every == 0 and self.step > self.planned_at:
            step_s = self.timing.step_seconds(since=self.planned_at)  # validated just now: time the steps since
            steps = self._plan(now, step_s)
            if abs(steps - self.s.steps) >= CHANGE_BY * self.s.steps:
                self.log({"step": self.step, "planned_steps": steps})
                progress.write(f"--time {self.s.time}: {steps} steps instead of {self.s.steps}, "
                               f"re-timed at {step_s * 1000:.0f} ms a step")
                return steps, 0
        return 0, 0

    def _plan(self, now: float, step_s: float) -> int:
        """The last step that fits the budget at `step_s` seconds a step, at most --steps."""
        steps = self.budget.steps(now, self.step, step_s, self.timing.validation_seconds(),
                                  self.s.eval_every, self.most_steps)
        self.planned_at = self.step
        return steps

    def batches(self):
        """Batches from the current step on: epoch and position follow from the step count."""
        batcher = self.data.batcher
        epoch, skip = divmod(self.step, len(batcher))
        while True:
            for i, batch in enumerate(batcher.batches(epoch, self.shard, self.shards)):
                if i >= skip:
                    yield batch
            epoch, skip = epoch + 1, 0

    # -- validation and checkpoints ------------------------------------------------------
    def validate(self, progress) -> None:
        """Score the model on the validation sources; keep `best.npz`, write `last.npz`. At the
        last step the mean of the last `--average` validations' weights competes as well."""
        with self.timing.validating():
            self._validate(progress)

    def _validate(self, progress) -> None:
        score = self._score(progress, f"step {self.step}")
        won = score > self.best  # the trained weights beat best.npz
        self.best = max(self.best, score)
        self.average.add(self.step, self.model)
        mean = None  # at the last step: the mean weights, if they beat every validation's
        if self.step == self.s.steps and len(self.average.taken) > 1:
            trained = self.model.state_dict()
            self.model.load_state_dict(self.average.mean())
            score = self._score(progress, f"mean of the weights at steps {self.average.taken}",
                                averaged=len(self.average.taken))
            if score > self.best:
                self.best, mean = score, self.average.mean()
            self.model.load_state_dict(trained)  # last.npz goes on from the trained weights
        # last.npz before best.npz: a write that fails between the two (a full disk) leaves what
        # --resume continues from, and best.npz's own score tells it to validate this step again
        self.save("last.npz")
        layer_stats.record(self.out, self.step, self.model)  # each layer's weights and gradients, for `explore`
        if mean is not None:
            trained = self.model.state_dict()
            self.model.load_state_dict(mean)
            self.save("best.npz")
            self.model.load_state_dict(trained)
        elif won:
            self.save("best.npz")
        self.unsaved_best = False
        if self.s.snapshots:  # the weights alone: what `explore` needs to show attention as it formed
            (self.out / SNAPSHOTS).mkdir(exist_ok=True)
            self.model.save(self.out / SNAPSHOTS / f"step_{self.step:06d}.npz")
        if not plot_curves(self.out) and not self.warned_no_plot and self.main:
            progress.write("matplotlib is not installed, so no curves.png: pip install \"tinygrad-tx[viz]\"")
            self.warned_no_plot = True

    def _score(self, progress, what: str, **note) -> float:
        """Greedy translations of the validation sources, logged and shown; returns the number that
        picks the best model (`best_by`)."""
        self.model.eval()
        data = self.data
        sources = [s for s, _ in data.valid_sources]
        references = [refs for _, refs in data.valid_sources]
        outputs = translate(self.model, sources, data.src_vocab, data.tgt_vocab, data.tokenizers)
        metrics = score(outputs, references, data.tokenizers[1])
        self.model.train()
        self.log({"step": self.step, **note, "valid_exact_match": metrics["exact_match"],
                  "valid_token_accuracy": metrics["token_accuracy"], "valid_bleu": metrics["bleu"],
                  "valid_chrf": metrics["chrf"]})
        if not self.main:  # another model of the ensemble: its scores are in its own metrics.jsonl
            return metrics[self.best_by]
        progress.write(f"{what}: validation {summary(metrics, digits=1)}" + " (the first model)" * self.ensemble)
        for s, o, r in list(zip(sources, outputs, references))[:3]:
            progress.write(f"  {s!r} -> {o!r}   (reference {r[0]!r}{' or others' if len(r) > 1 else ''})")
        return metrics[self.best_by]

    @cached_property
    def best_by(self) -> str:
        """What picks best.npz: exact match for a task; for a corpus, which has many right translations,
        BLEU against all references, or chrF where no reference has 4 tokens (BLEU is 0 there)."""
        if self.s.task:
            return "exact_match"
        references = [refs for _, refs in self.data.valid_sources]
        themselves = score([refs[0] for refs in references], references, self.data.tokenizers[1])
        return "bleu" if themselves["bleu_defined"] else "chrf"

    def log(self, record: dict) -> None:
        if self.validates:
            append_metrics(self.out, record)

    def save(self, name: str) -> None:
        """The model file (`Transformer.load` reads it) with the training state beside it."""
        planned = {"planned_steps": self.s.steps} if self.budget is not None and self.planned else {}
        self.model.save(self.out / name, optimizer=self.optimizer.state_dict(),
                        schedule=self.schedule.state_dict(), step=self.step, best=self.best,
                        average=self.average.state_dict(), **planned)

    def restore(self) -> None:
        """Take up the run where last.npz left it."""
        path, state, self.last = self.out / "last.npz", self.last, None  # not kept once taken up
        load_weights(self.model, state["weights"], path)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            self.step, self.best = int(state["step"]), float(state["best"])
            if self.budget is not None and "planned_steps" in state:  # --time: the steps it chose
                self._set_steps(int(state["planned_steps"]))
                self.planned = True
            self.schedule.load_state_dict(state["schedule"])
            self.average.load_state_dict(state.get("average", {}))
        except (KeyError, TypeError, ValueError) as e:
            raise RunError(f"checkpoint {path} is damaged: {type(e).__name__} {e}") from None
        # the score to beat is the one best.npz holds: last.npz, written first, knows a better one
        # if the run stopped before best.npz was (a full disk): then this step validates again
        saved = self._best_saved()
        self.unsaved_best, self.best = self.best > saved, saved
        if self.validates:
            keep_metrics_until(self.out, self.step, validated=not self.unsaved_best)

    def _best_saved(self) -> float:
        """The validation score best.npz holds (below every score if there is none yet)."""
        path = self.out / "best.npz"
        if not path.exists():
            return -1.0
        try:
            return float(load_checkpoint(path)["best"])
        except (KeyError, TypeError, ValueError) as e:
            raise RunError(f"checkpoint {path} is damaged: {type(e).__name__} {e}") from None


def train_step(model: dist.DataParallel | Transformer, optimizer: optim.Optimizer, label_smoothing: float, jit: bool,
               rdrop: float = 0.0, shards: int = 1, clip_norm: float = 1.0):
    """One step as a function of the batch's id Tensors and its real-token count (a Tensor, so
    that it is data, not part of the jit's signature), returning the loss: jitted unless --no-jit.
    With `rdrop` the batch holds every pair twice and the loss adds R-Drop's term. `shards`: the
    data-parallel ranks the batch is split over (`token_mean`); `clip_norm`: the gradients' global
    norm's bound (0: none)."""
    params = model.parameters()

    def step(src: tx.Tensor, tgt_in: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor) -> tx.Tensor:
        logits = model(src, tgt_in)  # (B, T, V)
        loss = token_mean(logits, tgt_out, n_tokens, label_smoothing, shards)
        if rdrop:
            loss = loss + rdrop * rdrop_term(logits, tgt_out, n_tokens, shards)
        optimizer.zero_grad()
        loss.backward()  # DataParallel averages the gradients over the ranks here
        if clip_norm:
            optim.clip_grad_norm(params, clip_norm)
        optimizer.step()
        return loss

    return tx.jit(step, max_traces=JIT_SHAPES) if jit else step


def rdrop_term(logits: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor, shards: int = 1) -> tx.Tensor:
    """R-Drop (Liang et al. 2021): the batch holds each pair twice, under two dropout masks, and
    this term pulls the two predictions together: (KL(p1||p2) + KL(p2||p1)) / 2, which is
    sum (p1 - p2)(log p1 - log p2) / 2 over the vocabulary, per real token of the doubled batch
    (as fairseq's R-Drop normalises it)."""
    half = logits.shape[0] // 2
    logp = logits.log_softmax(-1)  # (2B, T, V)
    logp1, logp2 = logp[:half], logp[half:]  # (B, T, V) each
    both_kl = ((logp1.exp() - logp2.exp()) * (logp1 - logp2)).sum(-1)  # (B, T)
    real = (tgt_out[:half] != PAD_ID).astype(logits.dtype)  # (B, T)
    return (both_kl * real).sum() / (2 * n_tokens / shards)


def token_mean(logits: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor, label_smoothing: float,
               shards: int = 1) -> tx.Tensor:
    """The mean cross-entropy per real (non-padding) token of the whole global batch.

    `n_tokens` counts the real tokens of the batch on all `shards` ranks together. Each rank
    sums its own tokens' losses and divides by n_tokens / shards; DataParallel
    then averages over the ranks: (1/N) Σ_r N·sum_r / n_tokens = Σ_r sum_r / n_tokens,
    the global per-token mean, as one process with the whole batch computes it.
    Averaging each rank's own mean would instead weight a token on a rank whose shard
    holds few real tokens (short targets, much padding) more than one on a full rank,
    and the result would depend on how the batch was split. With one process this
    is exactly the usual mean over the non-ignored targets.
    """
    loss_sum = F.cross_entropy(logits, tgt_out, ignore_index=PAD_ID, label_smoothing=label_smoothing,
                               reduction="sum")  # ()
    return loss_sum / (n_tokens / shards)


def check_members(members: int) -> None:
    """An ensemble's models train on a process each: --members N needs N ranks."""
    if members > 1 and dist.world_size() != members:
        raise ValueError(f"--members {members} trains each model on a process of its own, but this job has "
                         f"{dist.world_size()}: leave mpiexec out (train starts the processes) or run "
                         f"mpiexec -n {members}")
