"""`train --data` on a corpus in the Tatoeba/Anki download format, end to end, with tiny models."""
from __future__ import annotations

import hashlib
import json
import random
import re
import shutil

import pytest

from models.text import grammar
from models.translate.corpus import group_references, normalise, read_tsv
from models.translate.run import open_run
from models.translate.settings import TIE_BELOW, corpus_defaults, settings_for

from .test_cli import TINY, run_cli


def write_anki(path, n_sources=150, seed=0):
    """English<TAB>French<TAB>attribution lines with BOM and CRLF; every third source has a second
    translation, and French punctuation spacing is the narrow no-break space."""
    rng, lines = random.Random(seed), []
    for i, (english, french) in enumerate(dict(grammar.sample_pair(rng) for _ in range(n_sources)).items()):
        lines.append(f"{english}\t{french}\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i} (CM)")
        if i % 3 == 0:
            lines.append(f"{english}\t{french} .\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i} (x)")
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    return path


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    data = write_anki(root / "fra.txt")
    out = root / "run"
    # 100 steps, not TINY's 40: test_the_run_directory_is_self_contained draws a translation's attention,
    # and at 40 steps this 16-wide model, at a corpus's peak learning rate of 4e-3, ended every sentence at once
    result = run_cli("train", "--data", str(data), "--out", str(out), "--vocab-size", "120", *TINY, "--steps", "100")
    assert result.returncode == 0, result.stderr
    return data, out, result.stdout


def test_anki_columns_are_noted_once_and_the_tokenizers_saved(corpus_run):
    _, out, stdout = corpus_run
    assert stdout.count("3 tab-separated columns") == 1
    assert "bpe -> bpe tokens" in stdout
    assert (out / "src.model").exists() and (out / "tgt.model").exists()
    saved = json.loads((out / "run.json").read_text())["tokenizers"]["tgt"]
    assert (saved["kind"], saved["file"]) == ("bpe", "tgt.model")
    assert saved["sha256"] == hashlib.sha256((out / "tgt.model").read_bytes()).hexdigest()


def test_split_is_by_source_with_every_reference(corpus_run):
    data, out, _ = corpus_run
    everything = dict(group_references(read_tsv(data)))
    held_out = read_tsv(out / "test.tsv") + read_tsv(out / "valid.tsv")
    test_sources = {s for s, _ in read_tsv(out / "test.tsv")}
    assert not test_sources & {s for s, _ in read_tsv(out / "valid.tsv")}
    for source, refs in group_references(held_out):  # a held-out source comes with all its translations
        assert refs == everything[source]
    assert all(t == normalise(t) and "\u202f" not in t for _, t in held_out)


def test_evaluate_counts_sources_and_references(corpus_run):
    import sacrebleu

    _, out, _ = corpus_run
    result = run_cli("evaluate", "--run", str(out), "--json", "--by-length")
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout)
    sources = group_references(read_tsv(out / "test.tsv"))
    assert metrics["n"] == len(sources) and metrics["references"] == len(read_tsv(out / "test.tsv"))
    assert sum(n for _, n, _ in metrics["by_length"]) == metrics["n"]
    outputs = run_cli("translate", "--run", str(out), stdin="\n".join(s for s, _ in sources) + "\n")
    hypotheses = outputs.stdout.splitlines()
    streams = [[refs[k] if k < len(refs) else None for _, refs in sources] for k in range(2)]
    # --json rounds to 1e-4 of a point, as people write scores
    assert metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, streams).score, abs=5e-5)
    text = run_cli("evaluate", "--run", str(out)).stdout
    beam = json.loads((out / "run.json").read_text())["decoding"]["beam"]  # chosen on the validation set
    assert f"({len(sources)} sources, {metrics['references']} references, {f'beam {beam}' if beam > 1 else 'greedy'}" \
        in text


def test_the_run_directory_is_self_contained(corpus_run, tmp_path):
    data, out, _ = corpus_run
    moved = tmp_path / "fra.txt"
    shutil.move(data, moved)  # the corpus is gone: translate and evaluate need only the run
    try:
        picture = tmp_path / "attention.png"
        result = run_cli("translate", "--run", str(out), "the small cat sees the dog",
                         "--attention", str(picture))
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == 1 and picture.exists()
        assert run_cli("evaluate", "--run", str(out)).returncode == 0
    finally:
        shutil.move(moved, data)


def test_unknown_characters_are_reported(corpus_run):
    _, out, _ = corpus_run
    result = run_cli("translate", "--run", str(out), "the cat \u263a")
    assert result.returncode == 0 and "never occurred in training" in result.stderr


def test_shared_vocabulary_ties_the_embeddings(tmp_path):
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    out = tmp_path / "run"
    result = run_cli("train", "--data", str(data), "--out", str(out), "--shared-vocab", "--tokenizer", "unigram",
                     "--vocab-size", "150", *TINY)
    assert result.returncode == 0, result.stderr
    saved = json.loads((out / "run.json").read_text())
    config = open_run(out).model.config
    assert config.tie_embeddings and config.src_vocab == config.tgt_vocab
    assert saved["tokenizers"]["src"] == saved["tokenizers"]["tgt"]
    assert (saved["tokenizers"]["src"]["kind"], saved["tokenizers"]["src"]["file"]) == ("unigram", "shared.model")
    assert run_cli("translate", "--run", str(out), "the cat").returncode == 0


def test_a_corpus_ties_its_output_layer_unless_told(tmp_path):
    """A corpus's output layer reads the target embedding by default (--tie-output: no output layer of
    its own, the logits are the target embedding's dot products with the decoder's states; the
    vocabularies stay apart); --no-tie-output gives it its own; a task keeps its own, and so does a
    corpus of TIE_BELOW pairs or more (where, seen a few times in ten minutes, the tie lost)."""
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    for given, tied in ((), True), (("--no-tie-output",), False):
        out = tmp_path / f"run-{tied}"
        result = run_cli("train", "--data", str(data), "--out", str(out), *given, "--vocab-size", "150", *TINY)
        assert result.returncode == 0, result.stderr
        model = open_run(out).model
        assert model.config.tie_embeddings is tied and (model.out is None) is tied
        saved = json.loads((out / "run.json").read_text())["settings"]
        assert saved["tie_output"] is tied and not saved["shared_vocab"]
        assert run_cli("translate", "--run", str(out), "the cat").returncode == 0
    assert not settings_for({"task": "copy"}).tie_output
    assert corpus_defaults(TIE_BELOW - 1)["tie_output"] and not corpus_defaults(TIE_BELOW)["tie_output"]


def test_length_filter_is_counted(tmp_path):
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    result = run_cli("train", "--data", str(data), "--out", str(tmp_path / "run"), "--tokenizer", "word",
                     "--max-len", "7", *TINY)
    assert result.returncode == 0, result.stderr
    dropped = int(re.search(r"left out (\d+) pairs longer than --max-len 7 tokens", result.stdout)[1])
    kept = int(re.search(r"training on (\d+) pairs", result.stdout)[1])
    assert dropped > 0 and kept > 0


def test_corpus_command_describes_the_file(tmp_path):
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    result = run_cli("corpus", str(data))
    assert result.returncode == 0, result.stderr
    assert "80 pairs, 60 distinct sources" in result.stdout and "ignoring the others" in result.stdout
    assert "bpe tokens per sentence" in result.stdout
    missing = run_cli("corpus", str(tmp_path / "none.txt"))
    assert missing.returncode == 2 and "not found" in missing.stderr


def test_swapped_columns_train_the_other_direction(tmp_path):
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    out = tmp_path / "run"
    result = run_cli("train", "--data", str(data), "--out", str(out), "--src-col", "2", "--tgt-col", "1",
                     "--tokenizer", "word", *TINY)
    assert result.returncode == 0, result.stderr
    source, target = read_tsv(out / "test.tsv")[0]
    assert source.endswith("!") or source.endswith(".")
    assert not target.endswith("!")


@pytest.mark.parametrize("damage", ["deleted", "replaced"])
def test_a_damaged_tokenizer_model_is_named(corpus_run, tmp_path, damage):
    _, out, _ = corpus_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    if damage == "deleted":
        (copy / "tgt.model").unlink()
    else:
        shutil.copy(copy / "src.model", copy / "tgt.model")
    result = run_cli("evaluate", "--run", str(copy))
    assert result.returncode == 2 and "tgt.model" in result.stderr and "Traceback" not in result.stderr


def test_a_small_corpus_is_told_how_many_epochs_it_makes(tmp_path):
    """The corpus defaults' floor of 1,000 steps of 96 makes a 216-pair corpus train for
    about 440 epochs, not the usual 25; `train` states the epochs before it starts."""
    from models.translate.settings import corpus_defaults

    assert (corpus_defaults(216)["steps"], corpus_defaults(216)["batch_size"]) == (1000, 96)
    data = write_anki(tmp_path / "fra.txt", n_sources=60)
    result = run_cli("train", "--data", str(data), "--out", str(tmp_path / "run"), "--tokenizer", "word",
                     "--steps", "3", "--batch-size", "50")
    line = re.search(r"training on (\d+) pairs.*?(\d+) steps of (\d+) \(about (\d+) epochs\)", result.stdout)
    assert result.returncode == 0 and line, result.stdout + result.stderr
    pairs, steps, batch, epochs = map(int, line.groups())
    assert (steps, batch) == (3, 50) and epochs == round(150 / pairs)


def test_train_keeps_the_decoding_that_scored_best_on_validation(corpus_run):
    """Each try in run.json is recomputed here (translate + sacrebleu on the validation sources),
    and so is its chance against the choice before it (sacrebleu's paired bootstrap): the usual
    beam 6 first, then each try that scored higher with p < 0.05 became the choice; train printed it."""
    from models.translate.evaluation import BEAM, LENGTH_PENALTY, score, translate
    from models.translate.tuning import PENALTIES, SIGNIFICANCE, WIDTHS, chance

    _, out, stdout = corpus_run
    chosen = json.loads((out / "run.json").read_text())["decoding"]
    run = open_run(out)
    sources = run.held_out("valid")
    references = [r for _, r in sources]
    outputs = []
    for tried in chosen["tried"]:
        outputs.append(translate(run.model, [s for s, _ in sources], run.src_vocab, run.tgt_vocab, run.tokenizers,
                                 tried["beam"], length_penalty=tried["length_penalty"]))
        assert tried["bleu"] == pytest.approx(score(outputs[-1], references, run.tokenizers[1])["bleu"], abs=0.01)
    assert [t["beam"] for t in chosen["tried"]][:len(WIDTHS)] == list(WIDTHS)
    assert (chosen["tried"][0]["beam"], chosen["tried"][0]["length_penalty"]) == (BEAM, LENGTH_PENALTY)
    so_far = 0
    for i, tried in enumerate(chosen["tried"][1:], start=1):
        assert tried["p"] == pytest.approx(chance(outputs[i], outputs[so_far], references, "bleu",
                                                  run.tokenizers[1]), abs=1e-3)
        if tried["bleu"] > chosen["tried"][so_far]["bleu"] and tried["p"] < SIGNIFICANCE:
            so_far = i
    assert (chosen["beam"], chosen["length_penalty"]) == (chosen["tried"][so_far]["beam"],
                                                          chosen["tried"][so_far]["length_penalty"])
    if chosen["beam"] > 1:  # the penalties were tried at the chosen width
        assert {t["length_penalty"] for t in chosen["tried"] if t["beam"] == chosen["beam"]} >= set(PENALTIES)
    assert "decoding chosen on validation BLEU" in stdout and f"p < {SIGNIFICANCE}" in stdout
    assert run.decoding() == (chosen["beam"], chosen["length_penalty"])


def test_evaluate_and_translate_decode_as_the_run_chose_unless_told(corpus_run, tmp_path):
    _, out, _ = corpus_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    run_json = json.loads((copy / "run.json").read_text())
    run_json["decoding"] = {**run_json["decoding"], "beam": 3, "length_penalty": 1.5}
    (copy / "run.json").write_text(json.dumps(run_json))
    sources = open_run(copy).held_out("test")
    text = "\n".join(s for s, _ in sources) + "\n"

    def outputs(*flags):
        done = run_cli("translate", "--checkpoint", str(copy), *flags, stdin=text)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def evaluated(*flags):
        done = run_cli("evaluate", "--checkpoint", str(copy), "--json", *flags)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert outputs() == outputs("--beam", "3", "--length-penalty", "1.5") != outputs("--beam", "1")
    assert evaluated() == evaluated("--beam", "3", "--length-penalty", "1.5")
    assert outputs("--beam", "1") == outputs("--beam", "1", "--length-penalty", "0")  # greedy has no penalty
    assert "beam 3, length penalty 1.5" in run_cli("evaluate", "--checkpoint", str(copy)).stdout
    run_json["decoding"]["beam"] = 0
    (copy / "run.json").write_text(json.dumps(run_json))
    done = run_cli("evaluate", "--checkpoint", str(copy))
    assert done.returncode == 2 and "run.json is damaged: decoding.beam" in done.stderr


# -- `corpus` on what has nothing to describe ------------------------------------------------------

@pytest.mark.parametrize("kind", ["char", "word", "bpe", "unigram"])
@pytest.mark.parametrize("empty", ["source", "target"])
def test_corpus_of_empty_sides_is_one_line(capsys, tmp_path, kind, empty):
    """Every source empty was an IndexError (char, word) or sentencepiece's RuntimeError (bpe, unigram)."""
    from .test_cli_errors import assert_one_line_error, run

    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"\tchien {i}\n" if empty == "source" else f"dog {i}\t \n" for i in range(5)))
    code, out, err = run(capsys, "corpus", str(path), "--tokenizer", kind)
    assert_one_line_error(code, err, str(path), f"every {empty}", "empty")
    assert out == ""


@pytest.mark.parametrize("size", ["0", "-5"])
def test_corpus_refuses_a_vocabulary_of_no_pieces(capsys, tmp_path, size):
    """`corpus --vocab-size 0` silently used the default (0 read as "not given")."""
    from .test_cli_errors import assert_one_line_error, run

    data = write_anki(tmp_path / "fra.txt", n_sources=20)
    code, out, err = run(capsys, "corpus", str(data), "--vocab-size", size)
    assert_one_line_error(code, err, "--vocab-size", repr(size))
    assert out == ""
