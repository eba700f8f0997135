"""Reading corpora as users have them, and splitting them without leakage."""
import pytest

from models.translate import corpus
from models.translate.corpus import DataError, normalise, read_corpus, read_tsv, split_by_source


def write(tmp_path, content: bytes):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(content)
    return path


# --- normalisation ---------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("Cours\u00a0!", "Cours !"),  # no-break space before "!"
    ("Cours\u202f!", "Cours !"),  # narrow no-break space, as French typography sets it
    ("\u00ab\u202fOui\u202f\u00bb", "\u00ab Oui \u00bb"),
    ("Je l\u2019ai vu.", "Je l'ai vu."),  # typographic apostrophe
    ("e\u0301te\u0301", "\u00e9t\u00e9"),  # decomposed accents -> NFC
    ("  le   chat\t ", "le chat"),
])
def test_normalise(raw, expected):
    assert normalise(raw) == expected
    assert normalise(expected) == expected  # idempotent


# --- reading ------------------------------------------------------------------

def test_two_columns_with_bom_crlf_blank_lines_and_spaces(tmp_path):
    path = write(tmp_path, "\ufeffthe cat\tle chat\r\n\n  \r\nhé\tho  \r\n".encode())
    assert read_tsv(path) == [("the cat", "le chat"), ("hé", "ho")]
    assert read_corpus(path).ignored_columns is None


ANKI = ("Run!\tCours\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (CM) & #906331 (sacredceltic)\r\n"
        "Run!\tCourez\u00a0!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (CM) & #906332 (sacredceltic)\r\n"
        "Who?\tQui ?\tCC-BY 2.0 (France) Attribution: tatoeba.org #2083030 (CK) & #4366796 (gillux)\r\n")


def test_anki_format_ignores_the_attribution_and_says_so(tmp_path):
    path = write(tmp_path, ("\ufeff" + ANKI).encode())
    read = read_corpus(path)
    assert read.pairs == [("Run!", "Cours !"), ("Run!", "Courez !"), ("Who?", "Qui ?")]
    assert read.columns == 3
    assert "3 tab-separated columns" in read.ignored_columns and "ignoring" in read.ignored_columns


def test_columns_can_be_chosen(tmp_path):
    path = write(tmp_path, ANKI.encode())
    assert read_corpus(path, src_col=2, tgt_col=1).pairs[0] == ("Cours !", "Run!")
    with pytest.raises(DataError, match="two different numbers"):
        read_corpus(path, src_col=1, tgt_col=1)
    with pytest.raises(DataError, match="line 1.*only 3 columns"):
        read_corpus(path, src_col=1, tgt_col=4)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(DataError, match="nothere.tsv"):
        read_tsv(tmp_path / "nothere.tsv")


def test_line_without_tab_names_line_and_shows_it(tmp_path):
    path = write(tmp_path, b"a\tb\n\nno tab here\n")
    with pytest.raises(DataError, match=r"line 3.*no tab.*'no tab here'") as err:
        read_tsv(path)
    assert str(path) in str(err.value)


def test_long_lines_are_truncated_in_messages(tmp_path):
    with pytest.raises(DataError) as err:
        read_tsv(write(tmp_path, b"x" * 500))
    assert "x" * 100 not in str(err.value) and "..." in str(err.value)


@pytest.mark.parametrize("line, side", [(b"\tle chat", "source"), (b"the cat\t \xc2\xa0 ", "target")])
def test_empty_side(tmp_path, line, side):
    with pytest.raises(DataError, match=f"line 2: empty {side}"):
        read_tsv(write(tmp_path, b"a\tb\n" + line + b"\n"))
    assert read_corpus(write(tmp_path, b"a\tb\n" + line + b"\n"), allow_empty=True).pairs[1].count("") == 1


def test_bad_utf8_names_the_line(tmp_path):
    with pytest.raises(DataError, match="line 3: not valid UTF-8"):
        read_tsv(write(tmp_path, b"a\tb\nc\td\ne\t\xff\xfe\n"))


@pytest.mark.parametrize("content", [b"", b"\n  \n\n", b"\xef\xbb\xbf\r\n"])
def test_empty_corpus(tmp_path, content):
    with pytest.raises(DataError, match="empty"):
        read_tsv(write(tmp_path, content))


# --- references and splits ----------------------------------------------------

def test_group_references_keeps_every_distinct_target_in_order():
    pairs = [("a", "1"), ("b", "2"), ("a", "3"), ("a", "1")]
    assert corpus.group_references(pairs) == [("a", ["1", "3"]), ("b", ["2"])]


# 100 sources, source i with (i % 4) + 1 translations, and one exact duplicate pair each
PAIRS = [(f"src{i}", f"tgt{i}.{k}") for i in range(100) for k in range(i % 4 + 1)]


def test_split_keeps_every_pair_and_all_pairs_of_a_source_together():
    splits = split_by_source(PAIRS + PAIRS[:30], seed=0)
    assert sorted(sum(splits.values(), [])) == sorted(PAIRS)  # every translation, duplicates once
    owner = {}
    for name, pairs in splits.items():
        for source, _ in pairs:
            assert owner.setdefault(source, name) == name  # no source in two splits
    assert [len({s for s, _ in splits[k]}) for k in ("train", "valid", "test")] == [85, 5, 10]


def test_split_is_deterministic_by_seed():
    assert split_by_source(PAIRS, seed=0) == split_by_source(PAIRS, seed=0)
    assert split_by_source(PAIRS, seed=0) != split_by_source(PAIRS, seed=1)


def test_validation_and_test_are_capped_and_the_rest_trains():
    splits = split_by_source(PAIRS, seed=0, valid_frac=0.3, test_frac=0.3, max_valid=7, max_test=11)
    assert [len({s for s, _ in splits[k]}) for k in ("train", "valid", "test")] == [82, 7, 11]


def test_split_of_three_sources_gives_one_each_and_fewer_is_an_error():
    splits = split_by_source([("a", "1"), ("b", "2"), ("c", "3"), ("a", "4")], seed=0)
    assert sorted(len({s for s, _ in part}) for part in splits.values()) == [1, 1, 1]
    with pytest.raises(DataError, match="at least 3"):
        split_by_source([("a", "1"), ("b", "2"), ("a", "3")], seed=0)


def test_split_rejects_bad_fractions():
    with pytest.raises(ValueError):
        split_by_source(PAIRS, seed=0, valid_frac=0.5, test_frac=0.5)


def test_percentiles_nearest_rank():
    assert corpus.percentiles(list(range(1, 101))) == "p50 50, p90 90, p99 99, max 100"
    assert corpus.percentiles([7]) == "p50 7, p90 7, p99 7, max 7"


def test_describe_counts_what_a_user_checks(tmp_path):
    lines = ANKI + "Run!\tCours\u202f!\tx\nSame\tSame\tx\nEmpty\t\tx\n"
    report = "\n".join(corpus.describe(read_corpus(write(tmp_path, lines.encode()), allow_empty=True), "word", 100))
    assert "6 pairs, 4 distinct sources" in report
    assert "ignoring the others" in report
    assert "duplicate pairs: 1; empty side: 1; identical sides: 1" in report


# --- CR-only line endings ---------------------------------------------------------------

def test_a_corpus_with_cr_endings_is_read_line_by_line(tmp_path):
    """A file with CR-only line endings was read as one line of 201 columns; it is read line by line."""
    pairs = [("Run!", "Cours !"), ("Who?", "Qui ?"), ("Wow!", "Ça alors !")]
    for ending in ("\r", "\r\n", "\n"):
        path = tmp_path / "pairs.tsv"
        path.write_bytes("".join(f"{s}\t{t}\tCC-BY{ending}" for s, t in pairs).encode())
        corpus = read_corpus(path)
        assert corpus.pairs == pairs and corpus.columns == 3, ending
