"""word2vec's files and command line: vectors.txt (word2vec's text format, read back and
by gensim when installed), the whole model saved and loaded exactly, text corpora (UTF-8
files, the planted corpus) and ``train --model word2vec``."""

from __future__ import annotations

import importlib.util
import json
import types

import numpy as np
import pytest

from cli_support import assert_one_line_error, assert_usage_error, run_main
from handgrad.cli import run_word2vec
from handgrad.data import Corpus, load_dataset, planted_corpus, read_text, tokenize
from handgrad.io import safetensors
from handgrad.zoo import Word2Vec, load_word2vec_format

TEXT = ("Le café est chaud. Où est l'été ? Straße, straße und Ærø; naïve café été.\n"
        "Le café est froid, l'été est chaud.\n") * 4


@pytest.fixture(scope="module")
def trained():
    corpus = planted_corpus(0, sentences=600)
    model = Word2Vec(dim=6, arch="cbow", objective="nce", seed=0)
    model.fit(corpus, epochs=1, batch_size=128)
    return corpus, model


def test_tokenize_lowercases_and_splits_on_non_word_characters():
    assert tokenize("Où est l'été? Straße_2, ÆRØ-x") == ["où", "est", "l", "été", "straße_2",
                                                         "ærø", "x"]
    with pytest.raises(TypeError, match="'text' must be a str"):
        tokenize(b"bytes")


def test_text_files_are_read_as_utf8(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    corpus = load_dataset(f"text:{path}")
    assert isinstance(corpus, Corpus) and corpus.tokens == tokenize(TEXT)
    assert corpus.classes == {} and len(corpus) == len(tokenize(TEXT))
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt' is not UTF-8 text"):
        read_text(tmp_path / "latin1.txt")
    (tmp_path / "empty.txt").write_text("?! ...", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.txt' holds no words"):
        read_text(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="names no file"):
        load_dataset("text:")


def test_the_planted_corpus_is_deterministic_and_labelled():
    corpus = load_dataset("planted")
    assert corpus.tokens == planted_corpus(0).tokens and len(corpus) == 120_000
    assert planted_corpus(1, sentences=50).tokens != planted_corpus(0, sentences=50).tokens
    small = planted_corpus(3, classes=3, words_per_class=4, sentences=200)
    assert sorted(np.bincount(list(small.classes.values())).tolist()) == [4, 4, 4]
    assert set(small.classes) <= set(small.tokens)
    for kwargs, fragment in [({"classes": 1}, "'classes' must be an int >= 2"),
                             ({"topic_rate": 0}, "'topic_rate' must be a float in (0, 1]")]:
        with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace("]", r"\]")):
            planted_corpus(**kwargs)


def test_vectors_txt_is_word2vecs_text_format(trained, tmp_path):
    _, model = trained
    path = tmp_path / "vectors.txt"
    model.save_word2vec_format(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"{len(model.vocabulary)} {model.dim}"
    assert len(lines) == len(model.vocabulary) + 1
    assert [line.split()[0] for line in lines[1:]] == model.vocabulary
    assert all(len(line.split()) == model.dim + 1 for line in lines[1:])
    words, vectors = load_word2vec_format(path)
    assert words == model.vocabulary
    np.testing.assert_array_equal(vectors, model.vectors)  # 9 digits: float32 exactly


def test_gensim_reads_vectors_txt(trained, tmp_path):
    if importlib.util.find_spec("gensim") is None:
        pytest.skip("gensim is not installed (it is not a dependency)")
    from gensim.models import KeyedVectors

    _, model = trained
    model.save_word2vec_format(tmp_path / "vectors.txt")
    keyed = KeyedVectors.load_word2vec_format(str(tmp_path / "vectors.txt"))
    assert list(keyed.index_to_key) == model.vocabulary
    np.testing.assert_array_equal(keyed.vectors, model.vectors)


def test_malformed_vector_files_name_the_line(tmp_path):
    for text, fragment in [("3\n", "line 1 must be 'V D'"),
                           ("2 2\na 1 2\n", "announces 2 vectors; the file holds 1"),
                           ("1 2\na 1\n", "line 2 must hold a word and 2 numbers"),
                           ("1 2\na 1 x\n", "line 2 holds a value that is not a number")]:
        (tmp_path / "v.txt").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=fragment):
            load_word2vec_format(tmp_path / "v.txt")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_save_and_load_are_exact_and_training_resumes_identically(tmp_path, dtype):
    corpus = planted_corpus(0, sentences=300)
    model = Word2Vec(dim=5, arch="skipgram", objective="nce", seed=0, dtype=dtype)
    model.fit(corpus, epochs=1, batch_size=64)
    model.save(tmp_path / "w2v.safetensors")
    loaded = Word2Vec.load(tmp_path / "w2v.safetensors")
    assert loaded.config() == model.config() and loaded.vocabulary == model.vocabulary
    assert loaded.history == model.history
    np.testing.assert_array_equal(loaded.counts, model.counts)
    for name, table in model.tables.items():
        assert loaded.tables[name].dtype == table.dtype
        np.testing.assert_array_equal(loaded.tables[name], table)
    model.save_word2vec_format(tmp_path / "vectors.txt")  # 9 or 17 digits: exact
    np.testing.assert_array_equal(load_word2vec_format(tmp_path / "vectors.txt", dtype)[1],
                                  model.vectors)
    model.fit(corpus, epochs=1, batch_size=64)
    loaded.fit(corpus, epochs=1, batch_size=64)
    for name, table in model.tables.items():
        np.testing.assert_array_equal(loaded.tables[name], table)


def test_load_refuses_a_file_that_is_not_a_word2vec_model(trained, tmp_path):
    _, model = trained
    safetensors.write(tmp_path / "other.safetensors", {"x": np.zeros(2)}, {"a": "b"})
    with pytest.raises(ValueError, match="is not a word2vec model"):
        Word2Vec.load(tmp_path / "other.safetensors")
    model.save(tmp_path / "m.safetensors")
    tensors, metadata = safetensors.read(tmp_path / "m.safetensors")
    document = json.loads(metadata["handgrad.word2vec"])
    for field, value, fragment in [
            ("config", {**document["config"], "window": 0}, "field 'config' is not a valid"),
            ("vocabulary", ["a", "a"], "field 'vocabulary' must be a list of at least 2"),
            ("rng", {"bit_generator": "Nope"}, "rng.bit_generator")]:
        broken = json.dumps({**document, field: value})
        safetensors.write(tmp_path / "bad.safetensors", tensors, {"handgrad.word2vec": broken})
        with pytest.raises(ValueError, match=fragment):
            Word2Vec.load(tmp_path / "bad.safetensors")
    safetensors.write(tmp_path / "bad.safetensors", {**tensors, "input": tensors["input"][:2]},
                      metadata)
    with pytest.raises(ValueError, match="tensor 'input' must have shape"):
        Word2Vec.load(tmp_path / "bad.safetensors")


def test_cli_trains_on_the_planted_corpus(tmp_path):
    code, _, err = run_main(["train", "--model", "word2vec", "--epochs", 1, "--quiet",
                             "--embedding-dim", 8, "--arch", "cbow", "--out", tmp_path])
    assert code == 0, err
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["dataset"] == "planted" and metrics["arch"] == "cbow"
    assert metrics["vocabulary_size"] == 126 and len(metrics["loss"]) == 1
    assert 0 <= metrics["neighbour_purity"] <= 1 and metrics["words_per_second"][0] > 0
    header = (tmp_path / "vectors.txt").read_text().splitlines()[0]
    assert header == "126 8"
    model = Word2Vec.load(tmp_path / "model.safetensors")
    assert model.dim == 8 and len(model.vocabulary) == 126


def test_cli_trains_on_a_utf8_text_file(tmp_path):
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    code, _, err = run_main(["train", "--model", "word2vec", "--dataset",
                             f"text:{tmp_path / 'corpus.txt'}", "--epochs", 1, "--quiet",
                             "--min-count", 1, "--embedding-dim", 4, "--objective", "nce",
                             "--window", 2, "--negatives", 2, "--subsample", 0,
                             "--out", tmp_path / "run"])
    assert code == 0, err
    words, vectors = load_word2vec_format(tmp_path / "run" / "vectors.txt")
    assert {"été", "café", "straße", "ærø"} <= set(words) and vectors.shape == (len(words), 4)
    assert "neighbour_purity" not in json.loads((tmp_path / "run" / "metrics.json").read_text())


@pytest.mark.parametrize(("argv", "fragments", "status"), [
    (["--window", 0], ["--window must be an int >= 1 for --model word2vec; received 0"], 2),
    (["--subsample", -0.5], ["--subsample must be a finite number >= 0"], 2),
    (["--subsample", float("nan")], ["--subsample must be a finite number >= 0"], 2),
    (["--min-count", 10**6], ["at least 2 are needed (lower min_count"], 1),
    (["--arch", "glove"], ["--arch", "invalid choice: 'glove'"], 2),
    (["--dataset", "text:/no/such/file.txt"], ["cannot load dataset", "file.txt"], 2),
])
def test_cli_bad_options_fail_in_one_line(tmp_path, argv, fragments, status):
    code, out, err = run_main(["train", "--model", "word2vec", "--epochs", 1, "--quiet",
                               "--out", tmp_path / "run", *argv])
    if status == 2:
        assert_usage_error(code, out, err, *fragments)
    else:
        assert_one_line_error(code, out, err, *fragments, status=status)
    assert not (tmp_path / "run" / "vectors.txt").exists()


def test_the_runner_refuses_a_classification_dataset(tmp_path):
    args = types.SimpleNamespace(dataset="digits", epochs=1, batch_size=None, lr=None)
    with pytest.raises(run_word2vec.UsageError, match="trains on a text corpus"):
        run_word2vec.run(args, object(), str(tmp_path))
