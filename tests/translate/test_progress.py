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
