"""python -m exercises list | check NN | train [python -m models train's options] | explore [RUN_DIR] [...]"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .catalog import EXERCISES, FOLDER, check, find
from .exploring import explore
from .training import train

USAGE = """\
  python -m exercises list                 the exercises: how long each takes, what it teaches
  python -m exercises check 03             check exercise 03 (exercises/03_sum_mean.py)
  python -m exercises train [OPTIONS]      train the reverse task with your code (after every check
                                           passes); OPTIONS go to `python -m models train`
  python -m exercises explore [RUN_DIR] [OPTIONS]   the explorer on the run (runs/exercises), with
                                           your code; OPTIONS (--html FILE, --port N, ...) go to
                                           `python -m models explore`
--dir DIR reads your exercise files from DIR instead of exercises/."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m exercises", description="Write autograd yourself: "
                                "the backward of each op, the walk, Adam; then train with them.",
                                epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default=str(FOLDER), help="the folder of your exercise files (default: this one)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the exercises")
    one = sub.add_parser("check", help="check one exercise")
    one.add_argument("number", help="its number, e.g. 03")
    sub.add_parser("train", help="train the reverse task with your code", add_help=False)
    sub.add_parser("explore", help="the explorer on a run, with your code", add_help=False)
    args, rest = p.parse_known_args(argv)
    if args.command in ("train", "explore"):  # --dir after the command, too; the rest is models'
        later = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        later.add_argument("--dir", default=args.dir)
        known, rest = later.parse_known_args(rest)
        args.dir = known.dir
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "list":
        for e in EXERCISES:
            print(f"{e.number}  {e.file:<20} {e.minutes:>3} min  {e.title}: {e.teaches}")
        return 0
    if args.command == "check":
        try:
            find(args.number)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        report = check(args.number, folder=args.dir)
        print(report)
        return 0 if report else 1
    return (train if args.command == "train" else explore)(rest, Path(args.dir))


sys.exit(main())
