import datetime
import re

import pytest

from models.text import grammar
from models.translate import tasks
from models.translate.tasks import TASKS
from models.text.grammar import ADJECTIVE_BY_EN, NOUN_BY_EN, VERB_BY_EN, NounPhrase, Sentence

from .test_cli_errors import run
from .test_run import TINY

SIZES = dict(n_train=300, n_valid=50, n_test=50)


# --- every task --------------------------------------------------------------

@pytest.mark.parametrize("name", list(tasks.TASKS))
def test_splits_are_disjoint_by_source_and_sized(name):
    splits = tasks.get_task(name).make_splits(seed=1, **SIZES)
    sources = {split: [s for s, _ in pairs] for split, pairs in splits.items()}
    assert [len(sources[k]) for k in ("train", "valid", "test")] == [300, 50, 50]
    for split in ("valid", "test"):  # training may repeat what the generator repeats
        assert len(set(sources[split])) == len(sources[split]), f"duplicates in {split}"
    assert not set(sources["test"]) & set(sources["train"])
    assert not set(sources["valid"]) & set(sources["train"])
    assert not set(sources["valid"]) & set(sources["test"])


@pytest.mark.parametrize("name", list(tasks.TASKS))
def test_splits_are_deterministic_by_seed(name):
    task = tasks.get_task(name)
    assert task.make_splits(seed=7, **SIZES) == task.make_splits(seed=7, **SIZES)
    assert task.make_splits(seed=7, **SIZES) != task.make_splits(seed=8, **SIZES)


@pytest.mark.parametrize("name", list(tasks.TASKS))
def test_example_is_a_nonempty_string_pair(name):
    task = tasks.get_task(name)
    src, tgt = task.example()
    assert isinstance(src, str) and isinstance(tgt, str) and src.strip() and tgt.strip()
    assert task.example() == (src, tgt)
    assert task.src_level in ("char", "word") and task.tgt_level in ("char", "word")
    assert task.description and "\n" not in task.description


def test_get_task_unknown_names_the_task_and_lists_known_ones():
    with pytest.raises(ValueError, match="'nope'") as err:
        tasks.get_task("nope")
    for name in tasks.TASKS:
        assert name in str(err.value)


def test_too_many_requested_pairs_is_an_error():
    tiny = tasks.Task("tiny", "one digit", "char", "char", lambda rng: (str(rng.randint(0, 9)), "x"))
    assert len(tiny.make_splits(0, 8, 1, 1)["train"]) == 8
    with pytest.raises(ValueError, match="tiny"):
        tiny.make_splits(0, 10, 1, 1)


# --- copy / reverse / sort -----------------------------------------------------

def test_symbol_task_targets():
    lengths = set()
    for name, expected in [("copy", lambda s: s), ("reverse", lambda s: s[::-1]),
                           ("sort", lambda s: "".join(sorted(s)))]:
        for src, tgt in tasks.get_task(name).make_splits(seed=3, **SIZES)["train"]:
            assert set(src) <= set(tasks.SYMBOLS)
            assert tgt == expected(src)
            lengths.add(len(src))
    assert lengths == set(range(3, 11))


# --- numbers -----------------------------------------------------------------

@pytest.mark.parametrize("n, words", [
    (0, "zero"), (7, "seven"), (10, "ten"), (13, "thirteen"), (19, "nineteen"),
    (20, "twenty"), (45, "forty five"), (90, "ninety"), (100, "one hundred"),
    (101, "one hundred one"), (110, "one hundred ten"), (999, "nine hundred ninety nine"),
    (1000, "one thousand"), (1001, "one thousand one"), (4213, "four thousand two hundred thirteen"),
    (12000, "twelve thousand"), (20005, "twenty thousand five"),
    (100000, "one hundred thousand"), (700005, "seven hundred thousand five"),
    (999999, "nine hundred ninety nine thousand nine hundred ninety nine"),
])
def test_number_to_words(n, words):
    assert tasks.number_to_words(n) == words


@pytest.mark.parametrize("n", [-1, 1_000_000])
def test_number_to_words_out_of_range(n):
    with pytest.raises(ValueError):
        tasks.number_to_words(n)


def test_numbers_cover_all_magnitudes():
    pairs = tasks.get_task("numbers").make_splits(seed=0, **SIZES)["train"]
    digit_counts = {len(src) for src, _ in pairs}
    assert digit_counts == {1, 2, 3, 4, 5, 6}
    for src, tgt in pairs:
        assert tgt == tasks.number_to_words(int(src)) and str(int(src)) == src


# --- dates -------------------------------------------------------------------

MARCH_3_1999 = {
    "ordinal_of": "3rd of March 1999",
    "month_ordinal": "March 3rd, 1999",
    "day_month": "3 March 1999",
    "month_day": "March 3 1999",
    "abbrev_comma": "Mar 3, 1999",
    "weekday": "Wednesday, March 3, 1999",
    "dash_abbrev": "3-Mar-1999",
    "us_numeric": "03/03/1999",
    "us_short": "03/03/99",
    "dotted": "1999.03.03",
}


def test_every_date_format_on_a_hand_checked_date():
    assert set(tasks.DATE_FORMATS) == set(MARCH_3_1999)
    for name, expected in MARCH_3_1999.items():
        assert tasks.DATE_FORMATS[name](datetime.date(1999, 3, 3)) == expected


@pytest.mark.parametrize("day, text", [
    (datetime.date(2001, 12, 25), "Tuesday, December 25, 2001"),
    (datetime.date(1969, 7, 20), "Sunday, July 20, 1969"),
    (datetime.date(2024, 2, 29), "Thursday, February 29, 2024"),
])
def test_weekday_format(day, text):
    assert tasks.DATE_FORMATS["weekday"](day) == text


def test_two_digit_years_use_the_documented_pivot():
    assert tasks.DATE_FORMATS["us_short"](datetime.date(1950, 1, 9)) == "01/09/50"
    assert tasks.DATE_FORMATS["us_short"](datetime.date(2049, 12, 31)) == "12/31/49"
    assert tasks.DATE_FORMATS["us_short"](datetime.date(2005, 11, 30)) == "11/30/05"


@pytest.mark.parametrize("n, text", [
    (1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
    (13, "13th"), (21, "21st"), (22, "22nd"), (23, "23rd"), (30, "30th"), (31, "31st")])
def test_ordinal(n, text):
    assert tasks.ordinal(n) == text


# Independent parsers for each format (strptime accepts unpadded days).
_STRPTIME = ["%d of %B %Y", "%B %d, %Y", "%d %B %Y", "%B %d %Y", "%b %d, %Y",
             "%A, %B %d, %Y", "%d-%b-%Y", "%m/%d/%Y", "%Y.%m.%d"]


def _parse_date(text):
    """All dates the text can mean under any format (should be exactly one)."""
    found = set()
    m = re.fullmatch(r"(\d\d)/(\d\d)/(\d\d)", text)
    if m:
        yy = int(m[3])
        found.add(datetime.date(1900 + yy if yy >= 50 else 2000 + yy, int(m[1]), int(m[2])))
    plain = re.sub(r"(\d+)(st|nd|rd|th)\b", r"\1", text)
    for fmt in _STRPTIME:
        try:
            found.add(datetime.datetime.strptime(plain, fmt).date())
        except ValueError:
            pass
    return found


def test_generated_dates_parse_back_to_their_target():
    pairs = tasks.get_task("dates").make_splits(seed=5, n_train=1000, n_valid=0, n_test=0)["train"]
    for src, tgt in pairs:
        day = datetime.date.fromisoformat(tgt)
        assert datetime.date(1950, 1, 1) <= day <= datetime.date(2049, 12, 31)
        assert _parse_date(src) == {day}, src
        if "," in src and src.split(",")[0] in tasks.WEEKDAYS:
            assert src.startswith(tasks.WEEKDAYS[day.weekday()])


# --- grammar -----------------------------------------------------------------

def np_(noun, adj=None, plural=False, definite=True):
    return NounPhrase(NOUN_BY_EN[noun], plural, definite, ADJECTIVE_BY_EN[adj] if adj else None)


@pytest.mark.parametrize("subject, verb, obj, english, french", [
    (np_("cat", "small"), "eat", np_("apple", "red"),
     "the small cat eats the red apple", "le petit chat mange la pomme rouge"),
    (np_("girl", "small"), "see", np_("dog", definite=False),
     "the small girl sees a dog", "la petite fille voit un chien"),
    (np_("cat", plural=True), "eat", np_("apple", "old", definite=False),
     "the cats eat an old apple", "les chats mangent une vieille pomme"),
    (np_("woman", "beautiful", plural=True), "look for", np_("horse", "white", plural=True),
     "the beautiful women look for the white horses", "les belles femmes cherchent les chevaux blancs"),
    (np_("mouse", "white", plural=True, definite=False), "carry", np_("knife", "new", plural=True),
     "some white mice carry the new knives", "des souris blanches portent les nouveaux couteaux"),
    (np_("wolf", "small", plural=True, definite=False), "buy",
     np_("car", "small", plural=True, definite=False),
     "some small wolves buy some small cars", "de petits loups achètent de petites voitures"),
    (np_("queen", "happy"), "hold", np_("newspaper", plural=True),
     "the happy queen holds the newspapers", "la reine heureuse tient les journaux"),
    (np_("fox", "old"), "watch", np_("apple", definite=False),
     "the old fox watches an apple", "le vieux renard regarde une pomme"),
])
def test_hand_translated_sentences(subject, verb, obj, english, french):
    sentence = Sentence(subject, VERB_BY_EN[verb], obj)
    assert sentence.english() == english
    assert sentence.french() == french


_FR_ARTICLES = {"le": ("m", False), "la": ("f", False), "un": ("m", False), "une": ("f", False),
                "les": (None, True), "des": (None, True), "de": (None, True)}
_FR_NOUNS = {form: (noun.gender, plural) for noun in grammar.NOUNS
             for form, plural in ((noun.fr, False), (noun.fr_plural, True))}
_FR_VERBS = {form: plural for verb in grammar.VERBS
             for form, plural in ((verb.fr_singular, False), (verb.fr_plural, True))}


def _check_noun_phrase(words):
    """Check the agreement inside a French noun phrase; return its number."""
    article, rest = words[0], words[1:]
    art_gender, art_plural = _FR_ARTICLES[article]
    noun_at = [i for i, w in enumerate(rest) if w in _FR_NOUNS]
    assert len(noun_at) == 1, words
    gender, plural = _FR_NOUNS[rest[noun_at[0]]]
    # "souris" is both singular and plural: then the article decides the number.
    plural = art_plural if rest[noun_at[0]] == "souris" else plural
    assert art_plural == plural and art_gender in (None, gender), words
    for adj_word in rest[:noun_at[0]] + rest[noun_at[0] + 1:]:
        adj = next(a for a in grammar.ADJECTIVES if adj_word in a.fr_forms)
        assert adj_word == adj.fr(gender, plural), words
        assert adj.before_noun == (noun_at[0] == 1), words
    if article == "de":
        assert noun_at[0] == 1 and len(rest) == 2, words
    return plural


def test_generated_french_agrees_in_gender_and_number():
    pairs = tasks.get_task("grammar").make_splits(seed=2, n_train=2000, n_valid=0, n_test=0)["train"]
    for english, french in pairs:
        words = french.split()
        verb_at = [i for i, w in enumerate(words) if w in _FR_VERBS]
        assert len(verb_at) == 1, french
        subject_plural = _check_noun_phrase(words[:verb_at[0]])
        _check_noun_phrase(words[verb_at[0] + 1:])
        assert _FR_VERBS[words[verb_at[0]]] == subject_plural, french
        assert _english_subject_is_plural(english.split()) == subject_plural, (english, french)


_EN_PLURAL_NOUNS = {noun.en_plural for noun in grammar.NOUNS}
_EN_VERBS = {form: plural for verb in grammar.VERBS
             for form, plural in ((verb.en_singular, False), (verb.en_plural, True))}


def _english_subject_is_plural(words):
    """Check article, noun and verb agreement of the English subject; return its number."""
    noun_at = 2 if words[1] in ADJECTIVE_BY_EN else 1
    plural = words[noun_at] in _EN_PLURAL_NOUNS
    verb = words[noun_at + 1] + (" for" if words[noun_at + 2] == "for" else "")
    assert _EN_VERBS[verb] == plural, words
    article = words[0]
    assert article == "the" or (article == "some") == plural, words
    if article in ("a", "an"):
        assert (article == "an") == (words[1][0] in "aeiou"), words
    return plural


def test_grammar_task_has_many_distinct_sentences():
    pairs = tasks.get_task("grammar").make_splits(seed=0, n_train=5000, n_valid=500, n_test=500)
    assert len({src for src, _ in pairs["train"]}) > 4900  # training draws rarely repeat a sentence


# The tables are checked against the regular rules plus a hand-written list of
# exceptions, so a typo in a table cannot hide behind the agreement checks above.
_IRREGULAR_ADJECTIVES = {
    "bon": ("bon", "bonne", "bons", "bonnes"),
    "beau": ("beau", "belle", "beaux", "belles"),
    "vieux": ("vieux", "vieille", "vieux", "vieilles"),
    "nouveau": ("nouveau", "nouvelle", "nouveaux", "nouvelles"),
    "blanc": ("blanc", "blanche", "blancs", "blanches"),
    "heureux": ("heureux", "heureuse", "heureux", "heureuses"),
}
_IRREGULAR_PLURALS = {
    "cheval": "chevaux", "journal": "journaux", "gâteau": "gâteaux", "bateau": "bateaux",
    "chapeau": "chapeaux", "couteau": "couteaux", "manteau": "manteaux", "souris": "souris",
    "wolf": "wolves", "woman": "women", "mouse": "mice", "knife": "knives",
    "fox": "foxes", "box": "boxes", "dress": "dresses",
}
_BEFORE_NOUN = {"petit", "grand", "bon", "beau", "joli", "jeune", "vieux", "nouveau", "mauvais"}


def test_adjective_table_follows_french_rules():
    for adj in grammar.ADJECTIVES:
        ms = adj.fr_forms[0]
        fs = ms if ms.endswith("e") else ms + "e"
        regular = (ms, fs, ms if ms[-1] in "sx" else ms + "s", fs + "s")
        assert adj.fr_forms == _IRREGULAR_ADJECTIVES.get(ms, regular), adj
        assert adj.before_noun == (ms in _BEFORE_NOUN), adj


def test_noun_table_plurals_and_no_elision_needed():
    for noun in grammar.NOUNS:
        assert noun.fr_plural == _IRREGULAR_PLURALS.get(noun.fr, noun.fr + "s"), noun
        assert noun.en_plural == _IRREGULAR_PLURALS.get(noun.en, noun.en + "s"), noun
        assert noun.fr[0] not in "aeiouhâéèêîôœ", noun  # so "le"/"la" never become "l'"
    assert len(grammar.NOUNS) == len({n.fr for n in grammar.NOUNS}) == len(NOUN_BY_EN)


# --- coverage of short and edge inputs ------------------------------------------

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
         "sixteen seventeen eighteen nineteen".split()
_DECADES = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}


def test_every_number_to_one_hundred():
    expected = _UNITS + [_DECADES[n // 10] + ("" if n % 10 == 0 else " " + _UNITS[n % 10]) for n in range(20, 100)]
    assert [tasks.number_to_words(n) for n in range(101)] == expected + ["one hundred"]


def test_numbers_training_data_gives_every_digit_count_its_share():
    splits = tasks.get_task("numbers").make_splits(seed=0, n_train=6000, n_valid=500, n_test=500)
    pairs = splits["train"]
    assert {str(n) for n in range(100)} <= {s for s, _ in pairs}  # every short number is trained on
    counts = [sum(len(s) == d for s, _ in pairs) for d in range(1, 7)]
    assert all(800 < c < 1200 for c in counts), counts  # about 1000 each, repeats included
    held_out = {s for split in ("valid", "test") for s, _ in splits[split]}
    assert not held_out & {s for s, _ in pairs} and min(map(len, held_out)) >= 3


def test_numbers_probe_covers_every_length():
    probe = dict(tasks.probe_pairs("numbers"))
    assert all(probe[str(n)] == tasks.number_to_words(n) for n in range(101))
    lengths = [len(s) for s in probe]
    assert [lengths.count(d) for d in (1, 2)] == [10, 90] and all(lengths.count(d) > 180 for d in range(3, 7))


# Leap day, range ends and a 31st in every format, written out by hand
EDGE_DATES = {
    datetime.date(2000, 2, 29): ["29th of February 2000", "February 29th, 2000", "29 February 2000",
                                 "February 29 2000", "Feb 29, 2000", "Tuesday, February 29, 2000",
                                 "29-Feb-2000", "02/29/2000", "02/29/00", "2000.02.29"],
    datetime.date(1950, 1, 1): ["1st of January 1950", "January 1st, 1950", "1 January 1950", "January 1 1950",
                                "Jan 1, 1950", "Sunday, January 1, 1950", "1-Jan-1950", "01/01/1950",
                                "01/01/50", "1950.01.01"],
    datetime.date(2049, 12, 31): ["31st of December 2049", "December 31st, 2049", "31 December 2049",
                                  "December 31 2049", "Dec 31, 2049", "Friday, December 31, 2049",
                                  "31-Dec-2049", "12/31/2049", "12/31/49", "2049.12.31"],
}


@pytest.mark.parametrize("day", list(EDGE_DATES))
def test_every_format_of_edge_dates(day):
    assert [fmt(day) for fmt in tasks.DATE_FORMATS.values()] == EDGE_DATES[day]


def test_dates_training_data_holds_month_edges_and_leap_days():
    pairs = tasks.get_task("dates").make_splits(seed=0, n_train=4000, n_valid=0, n_test=0)["train"]
    days = [datetime.date.fromisoformat(t) for _, t in pairs]
    leap_days = sum(d.month == 2 and d.day == 29 for d in days)
    month_ends = sum((d + datetime.timedelta(days=1)).day == 1 for d in days)
    # uniform days would give about 3 leap days and 130 month ends in 4000
    assert leap_days > 100 and month_ends > 400 and sum(d.day == 1 for d in days) > 400


def test_dates_probe_is_every_format_of_fifty_dates_with_edges():
    probe = tasks.probe_pairs("dates")
    days = {t for _, t in probe}
    assert len(probe) == 50 * len(tasks.DATE_FORMATS) and len(days) == 50
    assert {"2000-02-29", "1950-01-01", "2049-12-31"} <= days
    for src, tgt in probe:
        assert _parse_date(src) == {datetime.date.fromisoformat(tgt)}, src
    with pytest.raises(ValueError, match="no probe"):
        tasks.probe_pairs("copy")


# --- a tiny --n-train ----------------------------------------------------------------

@pytest.mark.parametrize("name", list(TASKS))
def test_a_task_holds_out_as_many_as_asked_whatever_n_train(name):
    """`--n-train 1` said "999 rarely drawn sources ... 1000 requested"; a task
    draws a larger pool to hold out from."""
    splits = TASKS[name].make_splits(0, 1, 500, 500)
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [1, 500, 500]
    held_out = {s for s, _ in splits["valid"] + splits["test"]}
    assert len(held_out) == 1000 and splits["train"][0][0] not in held_out


def test_n_train_1_trains(capsys, tmp_path):
    """The same end to end: `train --n-train 1` trains."""
    code, _, err = run(capsys, "train", "--task", "reverse", "--out", str(tmp_path / "r"), *TINY, "--n-train", "1")
    assert code == 0, err
