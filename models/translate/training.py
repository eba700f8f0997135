"""The training loop of `python -m models train`: batches in; steps, validations and checkpoints out.

`train_step` is the step (forward, loss, backward, clipping, Adam), run under `tx.jit` unless
`--no-jit`: each batch shape is recorded once and every other step of that shape replays on
raw arrays. `Trainer.train` is the loop around it: a batch, the step, the learning-rate
schedule; then logging, validation and checkpoints. What it needs besides has a file of its own:

    losses.py        the loss per real token; R-Drop's doubled batch and term
    optimization.py  Adam(W), and the learning rate's warm-up and decay
    interrupts.py    Ctrl-C and SIGTERM: a stop at the next step boundary, last.npz saved
    budget.py        --time: the run times itself and chooses its last step
    ranks.py         data-parallel and ensemble ranks: what they agree on, the all-reduce of each step
    validating.py    a validation's scores           averaging.py   checkpoint averaging
    preparation.py   pairs, vocabularies, batches    run.py, starting.py   the run directory, claimed

A run is deterministic given its seed: the data split, the initial weights, the batch order (of
seed and epoch) and dropout (`reseed`), so an interrupted run resumed from its last checkpoint
computes the very same losses as one never interrupted.
"""
from __future__ import annotations

import contextlib
import time
from functools import cached_property
from typing import Callable, Iterator

import numpy as np

import tinygrad_tx as tx
import tinygrad_tx.distributed as dist
from tinygrad_tx import optim

from . import layer_stats
from .averaging import Average, snapshot_steps, weights
from .budget import Budget, Planner, Timing, parse_duration
from .interrupts import stop_requests
from .losses import doubled, rdrop_term, token_mean
from .optimization import adam, decay, stretch
from .plots import plot_curves
from .preparation import JIT_SHAPES, prepare
from .ranks import check_data_agree, check_members, check_settings_agree, step_news, together
from .run import (SNAPSHOTS, RunError, append_metrics, check_new_run_directory, keep_metrics_until, load_weights,
                  member_directory)
from .settings import TrainSettings, run_directory
from .starting import best_saved, claim_run, new_run, read_last
from .validating import SCORES, best_by, validation
from ..text.data import PAD_ID
from ..transformer import Transformer


def train_step(model: dist.DataParallel | Transformer, optimizer: optim.Optimizer, s: TrainSettings, shards: int = 1):
    """One step as a function of the batch's id Tensors and its real-token count (a Tensor, so
    that it is data, not part of the jit's signature), returning the loss. `shards`: the
    data-parallel ranks the batch is split over (`token_mean`)."""
    params = model.parameters()

    def step(src: tx.Tensor, tgt_in: tx.Tensor, tgt_out: tx.Tensor, n_tokens: tx.Tensor) -> tx.Tensor:
        logits = model(src, tgt_in)  # (B, T, V)
        loss = token_mean(logits, tgt_out, n_tokens, s.label_smoothing, shards)
        if s.rdrop:  # the batch holds every pair twice
            loss = loss + s.rdrop * rdrop_term(logits, tgt_out, n_tokens, shards)
        optimizer.zero_grad()
        loss.backward()  # DataParallel averages the gradients over the ranks here
        if s.clip_norm:
            optim.clip_grad_norm(params, s.clip_norm)
        optimizer.step()
        return loss

    return tx.jit(step, max_traces=JIT_SHAPES) if s.jit else step


class Trainer:
    """One training run in one run directory: `start()`, then `train(progress)`. The loop comes
    first here; how the run is set up follows it."""

    def train(self, progress) -> str:
        """Train until `steps`: "done", "interrupted" (Ctrl-C or SIGTERM: every rank stops at one
        step, last.npz saved) or "out of time" (a --time run's training time is up first).
        `progress`: tqdm's `update`, `set_postfix`, `write`, `total` and `refresh`."""
        step = train_step(self.model, self.optimizer, self.s, self.shards)
        self.model.train()
        self.tokens, self.began = 0, time.perf_counter()  # for the tokens a second
        if self.validates and self.unsaved_best:  # resumed after a validation whose best.npz was not written
            self.validate(progress)
        with stop_requests() as asked, self._holding_the_run():
            for batch in self.batches():  # (src, tgt_in, tgt_out) ids
                if self.step >= self.s.steps:
                    return "done"
                mine = int((batch[-1] != PAD_ID).sum())  # real tokens
                n_tokens, stopping, planned, time_up = step_news(mine, bool(asked), *self._budget_news(progress))
                n_tokens = mine if self.ensemble else n_tokens  # a model of an ensemble has the whole batch
                if stopping or time_up:
                    return self._stop("interrupted" if stopping else "out of time", progress)
                if planned:
                    self._set_steps(planned)
                    progress.total = planned
                    progress.refresh()
                reseed(self.device, self.s.seed, self.step)
                seen, real = doubled(batch, n_tokens) if self.s.rdrop else (batch, n_tokens)  # R-Drop: each pair twice
                loss = step(*(tx.Tensor(ids, device=self.s.device) for ids in seen),
                            tx.Tensor(np.float32(real), device=self.s.device))
                self.schedule.step()
                self.step += 1
                self._after_step(loss, n_tokens, progress)

    @contextlib.contextmanager
    def _holding_the_run(self) -> Iterator[None]:
        """Then the ranks wait until every checkpoint is written (sharing.py reads them all), and the
        run directory is free for the next `train`."""
        try:
            yield
            dist.barrier()
        finally:
            if self.lock is not None:
                self.lock.close()

    def _stop(self, outcome: str, progress) -> str:
        """Interrupted (last.npz saved), or out of time (the model it has competes for best.npz)."""
        if self.validates and outcome == "interrupted":
            self.save("last.npz")
        elif self.validates and self.step % self.s.eval_every:
            self.validate(progress)
        return outcome

    def _after_step(self, loss: tx.Tensor, n_tokens: int, progress) -> None:
        """Time the step, show it, and every --log-every steps log it; validate every --eval-every."""
        self.timing.stepped(self.step)
        self.tokens += n_tokens
        progress.update(1)
        if self.step % self.s.log_every == 0:
            rate = self.tokens / (time.perf_counter() - self.began)
            loss = loss.item() if self.ensemble else dist.all_reduce(loss.item(), op="mean")
            record = dict(step=self.step, loss=round(loss, 5), lr=self.schedule.get_lr(), tokens_per_s=round(rate))
            progress.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{rate:.0f}", lr=f"{record['lr']:.1e}")
            self.log(record)
        if self.validates and (self.step % self.s.eval_every == 0 or self.step == self.s.steps):
            self.validate(progress)

    def _budget_news(self, progress) -> tuple[int, bool]:
        """Rank 0's word on the --time budget (budget.py): the last step it chooses now (0: none),
        and whether the training time is up. Without a budget, and on other ranks, (0, False)."""
        if not self.main or self.planner is None:
            return 0, False
        news = self.planner.news(self.step, self.s.steps, self.planned, lambda: self.validate(progress))
        if news.steps:
            self.log({"step": self.step, "planned_steps": news.steps})
            progress.write(news.said(self.s, self.s.steps if self.planned else None, len(self.data.train_pairs)))
        return news.steps, news.time_up

    def batches(self):
        """Batches (src, tgt_in, tgt_out) from the current step on: epoch and position follow from the step."""
        batcher = self.data.batcher
        epoch, skip = divmod(self.step, len(batcher))
        while True:
            for i, batch in enumerate(batcher.batches(epoch, self.shard, self.shards)):
                if i >= skip:
                    yield batch
            epoch, skip = epoch + 1, 0

    # -- set-up ---------------------------------------------------------------------------
    def __init__(self, settings: TrainSettings, started: float | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        """`started`: when the command began, by `clock` (now if not given), from which a --time
        budget counts. Under mpiexec the caller has joined the job first (`dist.init(device)`, as
        `cli.main` does), so that each rank took its own GPU before anything was allocated."""
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
        self.device = tx.get_backend(settings.device)
        self.data = together(prepare, settings, self.dir)
        config = dict(src_vocab=len(self.data.src_vocab), tgt_vocab=len(self.data.tgt_vocab),
                      **settings.model_options(), max_len=2 * self.data.longest + 16, pad_id=PAD_ID,
                      tie_embeddings=settings.shared_vocab or settings.tie_output)
        self.last = together(read_last, self.out, self.dir, (self.data.src_vocab, self.data.tgt_vocab),
                             config) if settings.resume else None
        check_data_agree(self.data, None if self.ensemble else self.last)  # an ensemble's models differ
        tx.manual_seed(settings.seed + self.member)
        model = Transformer(**config).to(settings.device)
        self.model = model if self.ensemble else dist.DataParallel(model)  # rank 0's weights; gradients averaged
        self.optimizer = adam(self.model.parameters(), settings)
        self.step, self.best, self.lock, self.warned_no_plot = 0, -1.0, None, False
        self.unsaved_best = False  # resumed from a validation that beat best.npz before it was written
        # a --time run chooses its steps once timed (budget.py); until then --steps, its bound, is the end
        self.schedule = decay(self.optimizer, settings)
        self.average = Average(snapshot_steps(settings.steps, settings.eval_every, settings.average))
        self.budget = (Budget(parse_duration(settings.time), started, settings.members, dist.world_size())
                       if settings.time else None)
        self.timing = Timing(clock)
        self.planner = Planner(self.budget, self.timing, settings.steps, settings.eval_every) if self.budget else None
        self.planned = self.budget is None  # whether the steps are chosen (here, or by the run resumed)
        if self.budget is not None:
            together(self.budget.check_start_up, clock())  # before anything is written

    def _set_steps(self, steps: int) -> None:
        """End the run, and decay its learning rate, at `steps` (from the step it is at): chosen."""
        self.s.steps, self.planned = steps, True
        stretch(self.schedule, self.s, steps)
        self.average = self.average.to(snapshot_steps(steps, self.s.eval_every, self.s.average))

    def start(self) -> None:
        """Take the run directory, then fill a new one or, with --resume, restore the last checkpoint."""
        if not self.s.resume:
            together(check_new_run_directory, self.dir)  # every rank: a user's directory is never written into
        self.lock = together(lambda: claim_run(self.dir, self.s.resume) if self.main else None)  # one `train` at a time
        if self.s.resume:
            self.restore()
        elif self.validates:
            new_run(self.dir, self.out, self.s, self.data, self.main)

    # -- validation and checkpoints ------------------------------------------------------
    def validate(self, progress) -> None:
        """Score the model on the validation sources; keep `best.npz`, write `last.npz`. At the
        last step the mean of the last `--average` validations' weights competes as well."""
        with self.timing.validating():
            score = self._score(progress, f"step {self.step}")
            won, self.best = score > self.best, max(self.best, score)  # won: the trained weights beat best.npz
            self.average.add(self.step, self.model)
            mean = None  # at the last step: the mean weights, if they beat every validation's
            if self.step == self.s.steps and len(self.average.taken) > 1:
                averaged = self.average.mean()
                with weights(self.model, averaged):
                    score = self._score(progress, f"mean of the weights at steps {self.average.taken}",
                                        averaged=len(self.average.taken))
                if score > self.best:
                    self.best, mean = score, averaged
            # last.npz before best.npz: a write that fails between the two (a full disk) leaves what
            # --resume continues from, and best.npz's own score tells it to validate this step again
            self.save("last.npz")
            layer_stats.record(self.out, self.step, self.model)  # each layer's weights and gradients, for `explore`
            if won or mean is not None:
                with weights(self.model, mean) if mean is not None else contextlib.nullcontext():
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
        picks the best model."""
        self.model.eval()
        metrics, shown = validation(self.model, self.data, what)
        self.model.train()
        self.log({"step": self.step, **note, **{f"valid_{name}": metrics[name] for name in SCORES}})
        if self.main:  # another model of an ensemble: its scores are in its own metrics.jsonl
            shown[0] += " (the first model)" * self.ensemble
            for line in shown:
                progress.write(line)
        return metrics[self.best_by]

    @cached_property
    def best_by(self) -> str:
        return best_by(self.s.task, self.data)

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
            self.schedule.load_state_dict(state["schedule"])
            self.average.load_state_dict(state.get("average", {}))
        except (KeyError, TypeError, ValueError) as e:
            raise RunError(f"checkpoint {path} is damaged: {type(e).__name__} {e}") from None
        # the score to beat is the one best.npz holds: last.npz, written first, knows a better one
        # if the run stopped before best.npz was (a full disk): then this step validates again
        saved = best_saved(self.out / "best.npz")
        self.unsaved_best, self.best = self.best > saved, saved
        if self.validates:
            keep_metrics_until(self.out, self.step, validated=not self.unsaved_best)


def reseed(device, seed: int, step: int) -> None:
    """Dropout's masks depend on (seed, step) only, and differ between ranks: no generator state
    needs saving for a resumed run to draw the very masks of one never stopped."""
    device.seed((seed * 1_000_003 + step) * dist.world_size() + dist.rank())
