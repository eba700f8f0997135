"""Built-in toy translation tasks.

Every task is a random generator of (source, target) string pairs.  Generating
from a seed makes experiments reproducible without shipping data files, and
drawing the splits from one pool of distinct sources guarantees that the test
set measures generalisation: no test source ever appears in training.
"""

from __future__ import annotations

import calendar
import datetime
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ..text import grammar
from ..text.data import Pair

Sampler = Callable[[random.Random], Pair]


@dataclass(frozen=True)
class Task:
    name: str
    description: str  # one line, shown by the `tasks` CLI command
    src_level: str  # tokenisation level of the source: "char" or "word"
    tgt_level: str  # tokenisation level of the target
    sample: Sampler  # draws one pair using the given random generator
    defaults: dict = field(default_factory=dict)  # training settings that suit this task (`train`)

    def example(self) -> Pair:
        """A representative pair; the same on every call."""
        return self.sample(random.Random(0))

    def make_splits(self, seed: int, n_train: int, n_valid: int, n_test: int) -> dict[str, list[Pair]]:
        """Draw held-out valid/test pairs (distinct sources) and training pairs that never share a source with them.

        Training pairs are drawn from the generator as it is, repeats included, so
        its distribution survives: `numbers` gives each digit count a sixth of the
        draws, and the ten one-digit numbers are drawn thousands of times instead of
        once each, as a list of distinct pairs would have them. Held-out sources come
        from those the generator produced only once in a pool of distinct draws: a
        source it keeps repeating (every one- and two-digit number) is one the model
        must learn, so holding it out would leave it untrained.
        """
        for split, n in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
            if n < 0:
                raise ValueError(f"{split} must be >= 0, got {n}")
        rng = random.Random(seed)
        start, pool_size = rng.getstate(), n_train + n_valid + n_test
        while True:
            pool, counts = _draw_distinct(self, rng, pool_size)
            rare = [pair for pair in pool if counts[pair[0]] == 1]
            if len(rare) >= n_valid + n_test:
                break
            # few training pairs make a pool too small to hold out from: draw a larger one (the same
            # draws continued, so a pool that was large enough is never changed)
            rng.setstate(start)
            pool_size += 2 * (n_valid + n_test - len(rare))
        rng.shuffle(rare)
        held_out = rare[:n_valid + n_test]
        excluded = {source for source, _ in held_out}
        train: list[Pair] = []
        for _ in range(20 * n_train + 1000):  # generous; only runs out when held-out covers most of the task
            if len(train) == n_train:
                break
            pair = self.sample(rng)
            if pair[0] not in excluded:
                train.append(pair)
        if len(train) < n_train:
            raise ValueError(f"task {self.name!r} produced only {len(train)} training pairs outside the held-out "
                             f"sources, but {n_train} were requested")
        return {"train": train, "valid": held_out[:n_valid], "test": held_out[n_valid:]}


def _draw_distinct(task: Task, rng: random.Random, count: int) -> tuple[list[Pair], Counter]:
    """Sample until `count` different sources have been seen (first target wins), counting each source."""
    by_source: dict[str, str] = {}
    counts: Counter = Counter()
    max_draws = 20 * count + 1000  # generous; only hit when the task is too small
    for _ in range(max_draws):
        if len(by_source) == count:
            break
        source, target = task.sample(rng)
        by_source.setdefault(source, target)
        counts[source] += 1
    if len(by_source) < count:
        raise ValueError(f"task {task.name!r} produced only {len(by_source)} distinct "
                         f"sources in {max_draws} draws, but {count} were requested")
    return list(by_source.items()), counts


# --- copy / reverse / sort -------------------------------------------------

SYMBOLS = "abcdefghijklmnop"
MIN_SYMBOLS, MAX_SYMBOLS = 3, 10


def _symbol_sampler(transform: Callable[[str], str]) -> Sampler:
    """Pairs of (random letter string, transform(string))."""
    def sample(rng: random.Random) -> Pair:
        length = rng.randint(MIN_SYMBOLS, MAX_SYMBOLS)
        source = "".join(rng.choice(SYMBOLS) for _ in range(length))
        return source, transform(source)
    return sample


# --- numbers ---------------------------------------------------------------

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
         "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
         "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _below_thousand(n: int) -> list[str]:
    """Words for 1..999 ("zero" is only ever said for the whole number)."""
    hundreds, rest = divmod(n, 100)
    words = [_ONES[hundreds], "hundred"] if hundreds else []
    if 0 < rest < 20:
        words.append(_ONES[rest])
    elif rest >= 20:
        words.append(_TENS[rest // 10])
        if rest % 10:
            words.append(_ONES[rest % 10])
    return words


def number_to_words(n: int) -> str:
    """English words for 0 <= n < 1,000,000: no hyphens and no "and"."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_to_words handles 0..999999, got {n}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words = _below_thousand(thousands) + ["thousand"] if thousands else []
    return " ".join(words + _below_thousand(rest))


def _sample_number(rng: random.Random) -> Pair:
    """Pick the digit count first, so 7 is as likely a magnitude as 700005."""
    digits = rng.randint(1, 6)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    n = rng.randint(low, 10 ** digits - 1)
    return str(n), number_to_words(n)


# --- dates -----------------------------------------------------------------

# Spelled out rather than taken from `calendar`, whose names follow the locale.
MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FIRST_DATE, LAST_DATE = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st, 22nd, 23rd."""
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _month(d: datetime.date) -> str:
    return MONTHS[d.month - 1]


def _weekday(d: datetime.date) -> str:
    return WEEKDAYS[d.weekday()]


# Numeric formats are US month/day.  Two-digit years are unambiguous because
# the years span exactly one century: 50-99 mean 19xx and 00-49 mean 20xx.
DATE_FORMATS: dict[str, Callable[[datetime.date], str]] = {          # 1999-03-03 becomes
    "ordinal_of": lambda d: f"{ordinal(d.day)} of {_month(d)} {d.year}",    # 3rd of March 1999
    "month_ordinal": lambda d: f"{_month(d)} {ordinal(d.day)}, {d.year}",   # March 3rd, 1999
    "day_month": lambda d: f"{d.day} {_month(d)} {d.year}",                 # 3 March 1999
    "month_day": lambda d: f"{_month(d)} {d.day} {d.year}",                 # March 3 1999
    "abbrev_comma": lambda d: f"{_month(d)[:3]} {d.day}, {d.year}",         # Mar 3, 1999
    "weekday": lambda d: f"{_weekday(d)}, {_month(d)} {d.day}, {d.year}",   # Wednesday, March 3, 1999
    "dash_abbrev": lambda d: f"{d.day}-{_month(d)[:3]}-{d.year}",           # 3-Mar-1999
    "us_numeric": lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",          # 03/03/1999
    "us_short": lambda d: f"{d.month:02d}/{d.day:02d}/{d.year % 100:02d}",  # 03/03/99
    "dotted": lambda d: f"{d.year}.{d.month:02d}.{d.day:02d}",              # 1999.03.03
}


def _random_day(rng: random.Random) -> datetime.date:
    return FIRST_DATE + datetime.timedelta(days=rng.randint(0, (LAST_DATE - FIRST_DATE).days))


def _edge_day(rng: random.Random) -> datetime.date:
    """A first or last day of a month, or a 29 February: uniform days make these rare
    (a 29 February is 1 day in 1461), yet they are where a model that has only learned
    "day numbers go up to 28" fails."""
    year = rng.randint(FIRST_DATE.year, LAST_DATE.year)
    kind = rng.randrange(3)
    if kind == 2:
        leap = [y for y in range(FIRST_DATE.year, LAST_DATE.year + 1) if calendar.isleap(y)]
        return datetime.date(rng.choice(leap), 2, 29)
    month = rng.randint(1, 12)
    return datetime.date(year, month, 1 if kind == 0 else calendar.monthrange(year, month)[1])


def _sample_date(rng: random.Random) -> Pair:
    """Every format equally often; one date in four is a month edge or a leap day."""
    day = _edge_day(rng) if rng.random() < 0.25 else _random_day(rng)
    fmt = rng.choice(list(DATE_FORMATS.values()))
    return fmt(day), day.isoformat()


# --- probes: the inputs a uniform sample rarely shows --------------------------

def probe_pairs(name: str, seed: int = 12345) -> list[Pair]:
    """A fixed check set that covers a task's inputs, short and edge cases included.

    numbers: every integer 0-100, then 200 random ones of each digit count 1-6
    (distinct, so the short counts give fewer); dates: each format applied to the
    same 50 dates, the range's ends, month ends and leap days among them.
    """
    rng = random.Random(seed)
    if name == "numbers":
        numbers = list(range(101))
        for digits in range(1, 7):
            low = 0 if digits == 1 else 10 ** (digits - 1)
            numbers += [rng.randint(low, 10 ** digits - 1) for _ in range(200)]
        return [(str(n), number_to_words(n)) for n in dict.fromkeys(numbers)]
    if name == "dates":
        days = [FIRST_DATE, LAST_DATE, datetime.date(2000, 2, 29), datetime.date(1952, 2, 29),
                datetime.date(2048, 2, 29), datetime.date(1999, 2, 28), datetime.date(2000, 3, 1),
                datetime.date(1999, 12, 31), datetime.date(2000, 1, 1), datetime.date(2021, 4, 30)]
        for draw, until in ((_edge_day, 25), (_random_day, 50)):
            while len(days) < until:
                days = list(dict.fromkeys(days + [draw(rng)]))  # distinct dates, in drawing order
        return [(fmt(day), day.isoformat()) for fmt in DATE_FORMATS.values() for day in days]
    raise ValueError(f"no probe set for task {name!r}; there are probes for: numbers, dates")


# --- registry --------------------------------------------------------------

# Defaults are sized so each task reaches its target accuracy on a 2-core laptop CPU in
# minutes. The symbol tasks have unlimited fresh data, so no dropout: it only blurs the
# exact counting that sorting needs.
WIDER = dict(steps=4000, d_model=96, d_ff=384, num_encoder_layers=2, num_decoder_layers=2)

TASKS: dict[str, Task] = {task.name: task for task in [
    Task("copy", "copy a string of 3-10 letters a-p", "char", "char",
         _symbol_sampler(lambda s: s), dict(steps=2000, dropout=0.0)),
    Task("reverse", "reverse a string of 3-10 letters a-p", "char", "char",
         _symbol_sampler(lambda s: s[::-1]), dict(steps=2500, dropout=0.0)),
    Task("sort", "sort the letters of a string of 3-10 letters a-p", "char", "char",
         _symbol_sampler(lambda s: "".join(sorted(s))), dict(steps=3000, dropout=0.0)),
    Task("numbers", "integers 0-999999 in digits -> English words "
         "(4213 -> four thousand two hundred thirteen)", "char", "word", _sample_number, WIDER),
    Task("dates", f"dates 1950-2049 in {len(DATE_FORMATS)} formats (numeric ones US M/D, "
         "YY 50-99=19YY, 00-49=20YY) -> ISO YYYY-MM-DD", "char", "char", _sample_date, WIDER),
    Task("grammar", "simple English sentences -> French (gender, number, adjective placement)",
         "word", "word", grammar.sample_pair, WIDER),
]}


def get_task(name: str) -> Task:
    """Look a task up by name, listing the known names when it is missing."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None
