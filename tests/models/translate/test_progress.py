"""The plain progress lines of `train` in a log file: the time to go only once the total is known."""
from models.translate.progress import LogLines


def test_no_time_to_go_before_a_time_budget_has_chosen_its_steps(capsys):
    bar = LogLines(total=None, initial=0)
    bar.set_postfix(loss="2.000")
    assert bar.line(elapsed=60.0) == "step 0: loss 2.000; 1:00 so far"
    for _ in range(30):
        bar.update()
    assert capsys.readouterr().err == ""  # no tenth of an unknown total: a line a minute only
    assert bar.line(elapsed=60.0) == "step 30: loss 2.000 (at step 0); 1:00 so far"
    bar.total = 330  # chosen: 300 steps to go at 30 steps a minute
    assert bar.line(elapsed=60.0) == "step 30/330 (9%): loss 2.000 (at step 0); 1:00 so far, about 10:00 to go"
    for _ in range(3):
        bar.update()  # step 33 is a tenth of 330: one line
    assert capsys.readouterr().err.startswith("step 33/330 (10%)")


def test_a_line_each_tenth_of_a_known_total(capsys):
    bar = LogLines(total=100, initial=0)
    for _ in range(25):
        bar.update()
    assert [line.split(";")[0] for line in capsys.readouterr().err.splitlines()] == ["step 10/100 (10%)",
                                                                                     "step 20/100 (20%)"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_timed_run_says_every_tenth_once_before_and_after_it_chooses_its_steps(capsys):
    """A --time run whose training time ends at 100 s, a step a second: before it has chosen its
    steps, a line at each tenth of the time (10 s, 20 s); it chooses 200 steps at step 26 (13%: the
    tenths up to 20% were said), then 150 at step 101 (67%: a tenth passed, said at once); then a
    line at each tenth of 150 steps. Each tenth once, none left out but one a choice jumped over."""
    clock = Clock()
    bar = LogLines(total=None, initial=0, until=100.0, clock=clock)
    for step in range(1, 151):
        clock.now = float(step)
        if step == 26:
            bar.total = 200
        if step == 101:
            bar.total = 150
        bar.update()
    said = [line.split(";")[0] for line in capsys.readouterr().err.splitlines()]
    assert said == [f"step {n} ({n}% of the training time)" for n in (10, 20)] + [
        "step 60/200 (30%)", "step 80/200 (40%)", "step 100/200 (50%)", "step 101/150 (67%)",
        "step 105/150 (70%)", "step 120/150 (80%)", "step 135/150 (90%)", "step 150/150 (100%)"]


def test_a_total_not_a_multiple_of_ten_gets_a_line_a_tenth(capsys):
    """49 steps: lines at 5, 10, 15, 20, 25, 30, 35, 40, 45 and 49 (not at every fourth step, as
    a line every total // 10 steps said)."""
    bar = LogLines(total=49, initial=0)
    for _ in range(49):
        bar.update()
    steps = [int(line.split("/")[0].split()[1]) for line in capsys.readouterr().err.splitlines()]
    assert steps == [5, 10, 15, 20, 25, 30, 35, 40, 45, 49]


def test_a_resumed_run_says_the_tenths_still_to_come(capsys):
    bar = LogLines(total=100, initial=45)
    for _ in range(10):
        bar.update()
    assert [line.split(";")[0] for line in capsys.readouterr().err.splitlines()] == ["step 50/100 (50%)"]
