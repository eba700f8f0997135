"""Every number the program reads is checked once, where it is read:
a flag of any command, a setting or the decoding of a run's run.json. NaN, infinity, a number too
large to be meant, a negative one, zero where it means nothing, a wrong type: one line naming it,
exit status 2, nothing started, nothing changed.

The flags are checked at parse level (argparse's `type=`, which `cli.main` runs first); run.json's
settings through `cli.main` itself, in this process.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.translate import cli
from models.translate.inputs import Rule
from models.translate.settings import DEFAULTS, TrainSettings

from .test_cli_errors import TINY, assert_one_line_error, run


def numeric_flags() -> list[tuple[str, str, Rule]]:
    """(command, flag, rule) of every flag of every command that takes a number."""
    commands = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    found = []
    for name, command in commands.items():
        for action in command._actions:
            rule = getattr(action.type, "__self__", None)
            if isinstance(rule, Rule) and rule.read in (int, float):
                found.append((name, action.option_strings[0], rule))
    return found


NUMERIC = numeric_flags()
ZERO_MEANS_SOMETHING = {"--warmup", "--seed", "--dropout", "--attention-dropout", "--activation-dropout",
                        "--label-smoothing", "--weight-decay", "--rdrop", "--clip-norm", "--subword-sampling",
                        "--length-penalty"}
"""The numeric flags for which 0 is a value with a meaning (none, off, the first seed), by hand from
their help texts; for every other flag 0 must be refused."""
NEEDS = {"evaluate": ["--run", "R"], "translate": ["--run", "R"], "corpus": ["F"], "explore": ["R"], "train": []}

NEVER_A_VALUE = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e308", "-1e308", "1e400", "9" * 400, "-" + "9" * 400,
                     "abc", "", "0x10", "1,5", "[1]", "true"]),
    st.integers(max_value=-1).map(str),
    st.integers(min_value=10**10).map(str),  # above every flag's bound (the seed's, 2^32 - 1, is the largest)
    st.floats(max_value=-1e-9, allow_nan=False).map(repr))
"""Flag texts no numeric flag may take: non-finite, huge, negative, not a number at all."""


def test_every_command_has_its_numeric_flags_found():
    found = {(c, f) for c, f, _ in NUMERIC}
    assert {("train", "--lr"), ("train", "--steps"), ("train", "--processes"), ("train", "--threads"),
            ("evaluate", "--beam"), ("evaluate", "--length-penalty"), ("translate", "--model"),
            ("corpus", "--vocab-size"), ("explore", "--port")} <= found, found
    train = {f for c, f, _ in NUMERIC if c == "train"}
    assert {"--" + f.name.replace("_", "-") for f in fields(TrainSettings)
            if isinstance(f.default, (int, float)) and not isinstance(f.default, bool)} <= train


def parsed(capsys, command: str, flag: str, text: str) -> tuple[int, str, object]:
    """(exit status, standard error, the parsed value) of `command FLAG TEXT` at parse level."""
    try:
        args = cli.parser().parse_args([command, *NEEDS[command], f"{flag}={text}"])
        return 0, capsys.readouterr().err, getattr(args, flag[2:].replace("-", "_"))
    except SystemExit as e:
        return e.code, capsys.readouterr().err, None


@pytest.mark.parametrize("command, flag, rule", NUMERIC, ids=[f"{c} {f}" for c, f, _ in NUMERIC])
@settings(max_examples=6)
@given(text=NEVER_A_VALUE)
def test_a_flag_refuses_what_no_flag_may_take_in_one_line(capsys, command, flag, rule, text):
    code, err, _ = parsed(capsys, command, flag, text)
    assert_one_line_error(code, err, flag)
    assert "Traceback" not in err and len(err) < 300


@pytest.mark.parametrize("command, flag, rule", NUMERIC, ids=[f"{c} {f}" for c, f, _ in NUMERIC])
def test_zero_is_taken_only_where_it_means_something(capsys, command, flag, rule):
    code, err, value = parsed(capsys, command, flag, "0")
    if flag in ZERO_MEANS_SOMETHING:
        assert code == 0 and value == 0 and not err, err
    else:
        assert_one_line_error(code, err, flag)


@pytest.mark.parametrize("command, flag, rule", [n for n in NUMERIC if n[2].read is int],
                         ids=[f"{c} {f}" for c, f, r in NUMERIC if r.read is int])
def test_a_whole_number_flag_refuses_a_fraction(capsys, command, flag, rule):
    assert_one_line_error(*parsed(capsys, command, flag, "1.5")[:2], flag)


# -- run.json: its settings and its decoding, as strictly as the flags --------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "reverse"
    cli.main(["train", "--task", "reverse", "--out", str(out), *TINY])
    return out


ALWAYS_WRONG = [math.nan, math.inf, -math.inf, 1e308, -1e308, -1, 10**400, -(10**400), [1], {"a": 1}]
"""run.json values no setting may hold (NaN and the infinities as Python's json writes them)."""
NOT_NUMBERS = ["abc", True, None, "1"]


def resumed_with(capsys, trained: Path, monkeypatch, name: str, value) -> tuple[int, str]:
    """`train --out COPY --resume` of a copy of `trained` whose run.json says `name`: `value`; the
    copy's files must come out as they went in, and no process may be started."""
    monkeypatch.setattr(cli, "launch", lambda *a: pytest.fail("processes were started"))
    with tempfile.TemporaryDirectory() as directory:
        copy = Path(directory) / "run"
        shutil.copytree(trained, copy)
        run_json = json.loads((copy / "run.json").read_text())
        run_json["settings"][name] = value
        (copy / "run.json").write_text(json.dumps(run_json))
        before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
        code, _, err = run(capsys, "train", "--out", str(copy), "--resume")
        assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before
    return code, err


SAVED = [f.name for f in fields(TrainSettings) if f.metadata["saved"]]


@pytest.mark.parametrize("name", SAVED)
@settings(max_examples=5)
@given(value=st.sampled_from(ALWAYS_WRONG))
def test_a_run_json_setting_no_flag_could_give_is_one_line(capsys, trained, monkeypatch, name, value):
    code, err = resumed_with(capsys, trained, monkeypatch, name, value)
    assert_one_line_error(code, err, "run.json is damaged", f"settings.{name}")


NUMBERS = [f.name for f in fields(TrainSettings) if f.metadata["saved"] and f.type.split(" |")[0] in ("int", "float")]


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("value", [*NOT_NUMBERS, 0])
def test_a_run_json_number_that_is_not_one_is_one_line(capsys, trained, monkeypatch, name, value):
    """run.json `lr: "abc"` or `warmup: "x"` was a TypeError traceback; a bool is not a number."""
    if (value == 0 and "--" + name.replace("_", "-") in ZERO_MEANS_SOMETHING) or (value is None and DEFAULTS[name] is None):
        pytest.skip("0 or None means something here")
    code, err = resumed_with(capsys, trained, monkeypatch, name, value)
    assert_one_line_error(code, err, "run.json is damaged", f"settings.{name}")


@pytest.mark.parametrize("members", [1000, 3])
def test_run_json_members_start_no_more_processes_than_cores(capsys, trained, monkeypatch, members):
    """run.json members 1000 and `train --resume` ran `mpiexec -n 1000`; now the processes are
    bounded before any is started, by the cores (2 here, whatever the machine)."""
    monkeypatch.setattr(cli, "cores", lambda: 2)
    code, err = resumed_with(capsys, trained, monkeypatch, "members", members)
    assert_one_line_error(code, err, "members", str(members))
    if members == 3:
        assert "at most 2" in err and "cores" in err


def test_a_members_flag_starts_no_more_processes_than_cores(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "cores", lambda: 2)
    monkeypatch.setattr(cli, "launch", lambda *a: pytest.fail("processes were started"))
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(tmp_path / "r"), *TINY, "--members", "3")
    assert_one_line_error(code, err, "--members 3", "at most 2")
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(tmp_path / "r"), *TINY, "--processes", "3")
    assert_one_line_error(code, err, "--processes 3", "at most 2")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("beam, penalty, words", [
    (6, math.nan, ["decoding.length_penalty", "nan"]), (6, -math.inf, ["decoding.length_penalty", "-inf"]),
    (6, 1e308, ["decoding.length_penalty"]), (10**7, 1.0, ["decoding.beam", "10000000"]),
    (17, 1.0, ["decoding.beam", "17"]), (True, 1.0, ["decoding.beam"]), (6, "1", ["decoding.length_penalty"])])
def test_a_damaged_decoding_is_refused_by_evaluate_translate_and_explore(capsys, trained, tmp_path, beam, penalty,
                                                                          words):
    """run.json's decoding NaN scored 0% with exit status 0, and
    `explore --html` wrote its page anyway; a beam of 10^7 ran out of memory; explore refused beams
    above 16 that evaluate and translate took. One range for all three, and nothing written."""
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    run_json = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**run_json, "decoding": {"beam": beam, "length_penalty": penalty}}))
    page = tmp_path / "page.html"
    for command in (["evaluate", "--run", str(copy)], ["translate", "--run", str(copy), "abc"],
                    ["explore", str(copy), "--html", str(page)]):
        code, out, err = run(capsys, *command)
        assert_one_line_error(code, err, "run.json is damaged", *words)
        assert out == ""
    assert not page.exists()


@pytest.mark.parametrize("key", ["beam", "length_penalty"])
@settings(max_examples=4)
@given(value=st.sampled_from(ALWAYS_WRONG + ["6", True, None]))
def test_a_run_json_decoding_no_flag_could_give_is_one_line(capsys, trained, key, value):
    with tempfile.TemporaryDirectory() as directory:
        copy = Path(directory) / "run"
        shutil.copytree(trained, copy)
        run_json = json.loads((copy / "run.json").read_text())
        decoding = {"beam": 6, "length_penalty": 1.0, key: value}
        (copy / "run.json").write_text(json.dumps({**run_json, "decoding": decoding}))
        code, out, err = run(capsys, "evaluate", "--run", str(copy))
    assert_one_line_error(code, err, "run.json is damaged", f"decoding.{key}")
    assert out == ""


def test_the_widest_beam_one_command_takes_every_command_takes(capsys, trained, tmp_path):
    from models.translate.evaluation import MAX_BEAM
    from models.translate.explore import open_explorer

    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    run_json = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**run_json, "decoding": {"beam": MAX_BEAM, "length_penalty": 1.0}}))
    assert run(capsys, "evaluate", "--run", str(copy))[0] == 0
    assert run(capsys, "translate", "--run", str(copy), "abc", "--beam", str(MAX_BEAM))[0] == 0
    info = open_explorer(copy).get["/api/info"]({})
    assert info["beam"] == info["max_beam"] == MAX_BEAM


@pytest.mark.parametrize("args, words", [
    (["--time", "9" * 400 + "s"], ["--time", "720h"]),
    (["--time", "721h"], ["--time"]),
    (["--threads", "99999999999999999999"], ["--threads", "cores"]),
    (["--processes", "4294967298"], ["--processes", "1,024"])])
def test_train_refuses_what_overflowed_or_wrapped_around(capsys, tmp_path, args, words):
    """`--time 999...9s` overflowed at planning, `--threads 10^20` was a ctypes traceback,
    `--processes 4294967298` ran 2 ranks (2^32 + 2, wrapped)."""
    code, _, err = run(capsys, "train", "--task", "copy", "--out", str(tmp_path / "r"), *TINY, *args)
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["evaluate", "translate"])
@pytest.mark.parametrize("penalty", ["nan", "inf", "-inf", "1e308", "-0.5"])
def test_a_non_finite_length_penalty_is_refused(capsys, trained, command, penalty):
    """`evaluate --length-penalty nan` scored 0.00% with exit status 0; `translate` printed empty
    lines, and `inf` turned abcdef into f."""
    code, out, err = run(capsys, command, "--run", str(trained), "--length-penalty", penalty,
                         *(["abcdef"] if command == "translate" else []))
    assert_one_line_error(code, err, "--length-penalty")
    assert out == ""

