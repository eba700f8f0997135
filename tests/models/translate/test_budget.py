"""`train --time`: the run times itself, chooses its steps to fit, chooses again at each later
validation, keeps its choice when resumed, and stops with its best model when the machine turns
slower than it measured.

The Trainer is given a clock that the test drives (each step 0.01 s, each validation 0.5 s),
so the steps a budget buys can be worked out by hand."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from models.translate.budget import EXIT_SHARE, FINAL_SHARE, STALL, Budget, Timing, parse_duration
from models.translate.run import RunError, load_checkpoint
from models.translate.settings import TrainSettings, settings_for
from models.translate.training import Trainer

from .test_cli import REPO, Quiet, run_cli


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400),
                                           ("2m 30s", 150)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["10", "ten minutes", "0m", "", "5x", "m", "10m10m", "1h1h", "2m 2m", "30s1m",
                                  "5s10m", "1e3s", "10 m", "-5m", "721h", "9" * 400 + "s", None, 600])
def test_a_duration_not_hours_minutes_seconds_once_each_above_zero_and_at_most_30_days_is_refused(text):
    """A unit twice ("10m10m" was 20 minutes), units out of order, a number too large to plan
    with (400 nines overflowed at planning), or not a text (run.json's settings): one message."""
    with pytest.raises(ValueError, match="--time must be a duration such as 90s, 10m or 1h30m"):
        parse_duration(text)


def test_the_steps_a_budget_buys():
    """100 s from t=0: training ends at 90 s, the report by 98 s. At t=20 and step 200, steps of 0.05 s and a 1 s
    validation every 100 steps: (90 - 20 - 1) / (0.05 + 1/100) = 1150 more steps, unless --steps
    allows fewer; and at least one more (a run that is out of time ends with a validation)."""
    budget = Budget(100, started=0.0)
    assert budget.training_ends == 100 * (1 - FINAL_SHARE) == 90
    assert budget.steps(now=20, step=200, step_s=0.05, validation_s=1.0, eval_every=100, most=5000) == 1350
    assert budget.steps(now=20, step=200, step_s=0.05, validation_s=1.0, eval_every=100, most=1000) == 1000
    assert budget.steps(now=89.9, step=200, step_s=0.05, validation_s=1.0, eval_every=100, most=5000) == 201
    assert not budget.training_over(89.9) and budget.training_over(90)
    assert budget.deadline == 100 * (1 - EXIT_SHARE) == 98  # the report done, the processes have 2 s to exit


class Clock:
    """Time as the test decides it: each training step and each validation advances it."""

    def __init__(self, step_s=0.01, validation_s=0.5):
        self.now, self.step_s, self.validation_s = 0.0, step_s, validation_s

    def __call__(self) -> float:
        return self.now


def timed_trainer(out, clock: Clock, time="4s", resume=False, steps=1000) -> Trainer:
    settings = TrainSettings(task="reverse", out=str(out), time=time, steps=steps, eval_every=10, log_every=1,
                             d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, n_train=200,
                             batch_size=16, n_held_out=20, dropout=0.2, resume=resume)
    trainer = Trainer(settings, started=0.0, clock=clock)
    step, score = trainer.schedule.step, trainer._score

    def validation(*args, **kwargs):
        clock.now += clock.validation_s
        return score(*args, **kwargs)

    trainer._score = validation
    trainer.log = lambda record, log=trainer.log: (log(record), tick(record))

    def tick(record):
        if "loss" in record:  # logged after every step (log_every=1)
            clock.now += clock.step_s
    return trainer


def records(out, key):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if key in r]


def test_a_timed_run_stops_at_its_steps_if_they_come_first(tmp_path):
    """The same run as below, at most 40 steps: the budget would buy 51, --steps allows 40."""
    trainer = timed_trainer(tmp_path / "run", Clock(), steps=40)
    trainer.start()
    assert trainer.train(Quiet()) == "done"
    assert records(tmp_path / "run", "planned_steps") == [{"step": 20, "planned_steps": 40}]
    assert trainer.step == 40 and trainer.schedule.lr_at(40) == pytest.approx(0.05 * trainer.s.lr)


def test_a_timed_run_chooses_its_steps_and_decays_to_them(tmp_path):
    """4 s: training ends at 3.6 s. Timed at the second validation (step 20, t = 0.2 + 2 x 0.5):
    20 + floor((3.6 - 1.2 - 0.5) / (0.01 + 0.5 / 10)) = 51 steps."""
    trainer = timed_trainer(tmp_path / "run", Clock())
    trainer.start()
    assert trainer.train(Quiet()) == "done"
    assert records(tmp_path / "run", "planned_steps") == [{"step": 20, "planned_steps": 51}]
    assert trainer.step == trainer.s.steps == 51
    assert [r["step"] for r in records(tmp_path / "run", "valid_bleu")] == [10, 20, 30, 40, 50, 51]
    lrs = [r["lr"] for r in records(tmp_path / "run", "lr")]
    assert lrs[-1] == pytest.approx(0.05 * trainer.s.lr)  # the cosine reached its floor at the chosen end
    assert math.isclose(trainer.schedule.lr_at(51), 0.05 * trainer.s.lr)


def test_a_resumed_timed_run_keeps_the_steps_it_chose(tmp_path):
    """Interrupted at step 30, resumed on a machine twice as slow: it still ends at step 51 (the
    21 steps and 3 validations left take 3.42 s of the resumed command's 3.6), with the losses
    of the uninterrupted run."""
    whole = timed_trainer(tmp_path / "whole", Clock())
    whole.start()
    whole.train(Quiet())

    first = timed_trainer(tmp_path / "split", Clock())
    first.log = lambda record, log=first.log: (log(record), record.get("step") == 30 and "loss" in record
                                               and os.kill(os.getpid(), signal.SIGINT))
    first.start()
    assert first.train(Quiet()) == "interrupted" and first.step == 30
    resumed = timed_trainer(tmp_path / "split", Clock(step_s=0.02, validation_s=1.0), resume=True)
    resumed.start()
    assert resumed.step == 30 and resumed.s.steps == 51
    assert resumed.train(Quiet()) == "done" and resumed.step == 51
    losses = [[r["loss"] for r in records(tmp_path / name, "loss")] for name in ("whole", "split")]
    assert losses[0] == losses[1] and len(losses[0]) == 51


def slowed_or_sped(trainer: Trainer, clock: Clock, at_step: int, step_s: float) -> Trainer:
    """`trainer`, whose steps take `step_s` seconds from the one after `at_step` on."""
    trainer.log = lambda record, log=trainer.log: (log(record), record.get("step") == at_step and "loss" in record
                                                   and setattr(clock, "step_s", step_s))
    return trainer


@pytest.mark.parametrize("step_s, steps, ends", [(0.005, 54, 3.37), (0.15, 31, 3.85)])
def test_a_timed_run_chooses_again_after_each_validation(tmp_path, step_s, steps, ends):
    """Steps twice as fast, or 15 times slower, from step 20 on (chosen there: 51 steps). After the
    validation at step 30 (t = 1.2 + 10 steps + 0.5) it times the 10 steps since and chooses again:
    30 + floor((3.6 - 1.75 - 0.5) / (0.005 + 0.05)) = 54 (which the validations at 40 and 50 keep),
    using the training time the faster steps free; or, slower, 30 + at least one = 31, so that
    its schedule still decays to its end rather than being cut off at step 33 (the last validation
    begins just before 3.6 s). A run that chose once would end at step 51 at 3.36 s, or out of time after step 33."""
    clock = Clock()
    trainer = slowed_or_sped(timed_trainer(tmp_path / "run", clock), clock, 20, step_s)
    trainer.start()
    assert trainer.train(Quiet()) == "done"
    assert records(tmp_path / "run", "planned_steps") == [{"step": 20, "planned_steps": 51},
                                                          {"step": 30, "planned_steps": steps}]
    assert trainer.step == trainer.s.steps == steps and clock.now == pytest.approx(ends)
    assert records(tmp_path / "run", "lr")[-1]["lr"] == pytest.approx(0.05 * trainer.s.lr)  # decayed to its end
    saved = load_checkpoint(tmp_path / "run" / "last.npz")
    assert saved["planned_steps"] == steps  # what a resumed run keeps


def test_a_run_that_slows_down_stops_in_time_with_its_best_model(tmp_path):
    """Timed at 0.01 s a step, and again at step 30 (1.8 s: 51 steps still), then 15 times slower:
    the training time (3.6 s) is up after step 40 and its validation (3.3 s, then 3.8 s), where
    it stops with the model it has, saved; --resume would train on to the 51 steps it chose."""
    clock = Clock()
    trainer = slowed_or_sped(timed_trainer(tmp_path / "run", clock), clock, 30, 0.15)
    trainer.start()
    assert trainer.train(Quiet()) == "out of time"
    assert trainer.s.steps == 51 and trainer.step == 40
    assert [r["step"] for r in records(tmp_path / "run", "valid_bleu")][-2:] == [30, 40]
    assert (tmp_path / "run" / "best.npz").exists() and (tmp_path / "run" / "last.npz").exists()


def test_a_stall_is_not_a_new_speed(tmp_path):
    """8 s: training ends at 7.2 s; chosen at step 20 (1.2 s): 20 + floor((7.2 - 1.2 - 0.5) / 0.06)
    = 111 steps. Then the process stalls for 3 s after step 25 (as SIGSTOP or a laptop's sleep
    would stop it). At step 30 (4.8 s) the steps since still take 0.01 s, the stall left out:
    30 + floor((7.2 - 4.8 - 0.5) / 0.06) = 61 steps, which end at 7.11 s. Timed as the mean of the
    steps since (0.31 s a step), the run cut itself to 35 steps and ended at 5.6 s, a fifth of its
    budget unused."""
    clock = Clock()
    trainer = timed_trainer(tmp_path / "run", clock, time="8s")
    trainer.log = lambda record, log=trainer.log: (log(record), record.get("step") == 25 and "loss" in record
                                                   and setattr(clock, "now", clock.now + 3.0))
    trainer.start()
    assert trainer.train(Quiet()) == "done"
    assert records(tmp_path / "run", "planned_steps") == [{"step": 20, "planned_steps": 111},
                                                          {"step": 30, "planned_steps": 61}]
    assert trainer.step == 61 and clock.now == pytest.approx(7.11)


def test_a_run_stopped_for_seconds_by_sigstop_does_not_take_the_stop_for_its_speed(tmp_path):
    """A real stop: `train --time 20s`, SIGSTOP for 6 s after it has chosen its steps, SIGCONT.
    The next choice timed its steps with the stop in them (120 ms a step, where they took 2 to
    4 ms at a load of 6 on 2 cores) and cut the run short; now a stop is left out: each choice's
    timing stays within the STALL factor of the first (the time the stop took is gone all the
    same), and the run ends at the last step it chose."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "models", "train", "--task", "reverse", "--time", "20s",
                                "--steps", "100000", "--eval-every", "50", "--n-held-out", "50", "--d-model", "8",
                                "--num-heads", "2", "--num-encoder-layers", "1", "--num-decoder-layers", "1",
                                "--d-ff", "8", "--batch-size", "8", "--out", str(out)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not (out / "metrics.jsonl").is_file() or not records(out, "planned_steps"):
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGSTOP)
        time.sleep(6)
    finally:
        process.send_signal(signal.SIGCONT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    timed = [float(line.split("timed at ")[1].split(" ms")[0]) for line in stdout.splitlines() if "timed at" in line]
    assert len(timed) > 1 and max(timed) < STALL * max(1.0, timed[0]), timed  # "2 ms": a whole number of them
    last = records(out, "planned_steps")[-1]["planned_steps"]
    assert f"trained to step {last} of {last} in" in stdout


def test_timing_leaves_stalls_out():
    """Steps of 10 ms, one of 70 ms (a busy machine: counted) and one of 12 s (a stall: not).
    Validations of 0.5 and 0.6 s and one of 12.5 s: 0.6 s, the longest that is not a stall."""
    clock = Clock()
    timing = Timing(clock)
    for step, took in enumerate([0.01] * 9 + [12.0] + [0.01] * 9 + [0.07], start=1):
        clock.now += took
        timing.stepped(step)
    assert timing.step_seconds(since=0) == pytest.approx((18 * 0.01 + 0.07) / 19)
    assert timing.step_seconds() == pytest.approx((9 * 0.01 + 0.07) / 10)  # the later half, no stall in it
    for took in (0.5, 12.5, 0.6):
        with timing.validating():
            clock.now += took
    assert timing.validation_seconds() == pytest.approx(0.6)


def test_a_budget_its_start_up_would_take_a_quarter_of_is_refused_before_anything_is_written(tmp_path):
    """`--time 0.5s` spent it all before the first step, then said the best model so far was kept
    and failed to find it. Python and the imports alone take more than an eighth of a second."""
    done = run_cli("train", "--task", "copy", "--time", "0.5s", "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stdout == "", done.stderr
    assert done.stderr.startswith("error: --time 0.5s cannot hold this run: its start-up (Python, reading the data, "
                                  "building the model) took ")
    assert not (tmp_path / "run").exists()
    clock = Clock()
    clock.now = 1.1  # started at 0
    with pytest.raises(RunError, match=r"--time 4s cannot hold this run: .* took 1.1 s of it; give it at least 5s"):
        timed_trainer(tmp_path / "run", clock, time="4s")
    clock.now = 1.0
    timed_trainer(tmp_path / "run", clock, time="4s")  # a quarter


def test_time_is_the_default_for_a_corpus_and_steps_replace_it(tmp_path):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"w{i} x\tv{i} y\n" for i in range(100)))
    assert settings_for({"data": str(corpus)}).time == "10m"
    assert settings_for({"data": str(corpus), "steps": 50}).time is None  # steps alone: exactly those
    assert settings_for({"data": str(corpus), "time": "2m"}).time == "2m"
    both = settings_for({"data": str(corpus), "steps": 50, "time": "2m"})  # at most 50 steps, at most 2 minutes
    assert (both.steps, both.time) == (50, "2m")
    assert settings_for({"task": "copy"}).time is None
    done = run_cli("train", "--task", "copy", "--time", "ten", "--out", str(tmp_path / "no"))
    assert done.returncode == 2 and "--time must be a duration" in done.stderr and not (tmp_path / "no").exists()
