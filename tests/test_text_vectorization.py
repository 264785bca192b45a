"""TextVectorization against the Keras rules written down here (Keras is not a dependency).

Keras semantics relied on:
- standardize "lower_and_strip_punctuation": lowercase, then drop the ASCII punctuation
  !"#$%&()*+,-./:;<=>?@[\\]^_`{|}~' ; split "whitespace": runs of whitespace.
- vocabulary: "" (padding) at 0, "[UNK]" (OOV) at 1, then tokens by descending count, ties
  by descending token (IndexLookup sorts by (count, token) and reverses); max_tokens counts
  the two special entries.
- ngrams=2: the unigrams, then the bigrams joined by a space.
- output_mode "int": ids padded with 0 at the end (or cut) to output_sequence_length, else
  to the longest text of the batch; unknown tokens give 1.
"""

import json

import numpy as np
import pytest

from handgrad import io
from handgrad import layers as L
from handgrad.data import planted_corpus
from handgrad.model import Sequential


def test_vocabulary_order_is_keras_frequency_then_descending_token():
    layer = L.TextVectorization().adapt(["b a c", "b b a", "c d"])
    # counts b 3, a 2, c 2, d 1: the tie a/c goes to the larger token, c
    assert layer.get_vocabulary() == ["", "[UNK]", "b", "c", "a", "d"]
    capped = L.TextVectorization(max_tokens=4).adapt(["b a c", "b b a", "c d"])
    assert capped.get_vocabulary() == ["", "[UNK]", "b", "c"]
    assert capped.vocabulary_size() == 4


def test_standardize_split_and_ngrams():
    texts = ["Hello, World! It's   here.", "(hello) world-wide"]
    layer = L.TextVectorization().adapt(texts)
    assert sorted(layer.get_vocabulary()[2:]) == ["hello", "here", "its", "world", "worldwide"]
    raw = L.TextVectorization(standardize=None, split=None).adapt(["A b", "A b", "c"])
    assert raw.get_vocabulary() == ["", "[UNK]", "A b", "c"]
    chars = L.TextVectorization(split="character", standardize="lower").adapt(["AbA"])
    assert chars.get_vocabulary() == ["", "[UNK]", "a", "b"]
    grams = L.TextVectorization(ngrams=2).adapt(["x y z"])
    ids = grams.forward(["x y z"], training=False)[0]
    vocabulary = grams.get_vocabulary()
    assert [vocabulary[i] for i in ids] == ["x", "y", "z", "x y", "y z"]


def test_int_output_pads_cuts_and_marks_unknown_tokens():
    layer = L.TextVectorization().adapt(["a b c", "a"])  # a 2, then c, b
    vocabulary = layer.get_vocabulary()
    ids = layer.forward(["c a", "a zebra b a"], training=False)
    assert ids.dtype == np.int64 and ids.shape == (2, 4)  # the longest text of the batch
    np.testing.assert_array_equal(ids[0], [vocabulary.index("c"), 2, 0, 0])
    np.testing.assert_array_equal(ids[1], [2, 1, vocabulary.index("b"), 2])
    fixed = L.TextVectorization(output_sequence_length=3, vocabulary=vocabulary)
    np.testing.assert_array_equal(fixed.forward(np.array([["a zebra b a"]])),
                                  [[2, 1, vocabulary.index("b")]])
    assert fixed.output_shape(()) == (3,)
    assert fixed.backward(None) is None  # strings in: no gradient


def test_errors_name_the_argument():
    with pytest.raises(RuntimeError, match="adapt"):
        L.TextVectorization().forward(["a"])
    with pytest.raises(ValueError, match="'split'"):
        L.TextVectorization(split="comma")
    with pytest.raises(ValueError, match="'output_mode'"):
        L.TextVectorization(output_mode="tf_idf")
    with pytest.raises(ValueError, match="'max_tokens'"):
        L.TextVectorization(max_tokens=1)
    with pytest.raises(TypeError, match="entry 1 is not a str"):
        L.TextVectorization().adapt(["a", 3])
    with pytest.raises(ValueError, match="distinct"):
        L.TextVectorization(vocabulary=["a", "a"])
    with pytest.raises(ValueError, match="output_sequence_length"):
        L.TextVectorization(vocabulary=["a"]).output_shape(())


def test_vocabulary_is_saved_with_the_model(tmp_path):
    layer = L.TextVectorization(max_tokens=10, output_sequence_length=5, ngrams=(1, 2))
    layer.adapt(["the cat sat", "the dog sat down", "a cat"])
    config = json.loads(json.dumps(layer.get_config()))
    assert L.TextVectorization.from_config(config).get_vocabulary() == layer.get_vocabulary()
    model = Sequential([layer, L.Embedding(10, 3)], seed=0)
    texts = np.array(["the cat", "a dog sat down"])
    expected = model.forward(texts, training=False)
    io.save(model, tmp_path / "model")
    loaded = io.load(tmp_path / "model")
    assert loaded.layers[0].get_vocabulary() == layer.get_vocabulary()
    np.testing.assert_array_equal(loaded.forward(texts, training=False), expected)


def test_works_on_the_built_in_planted_corpus():
    corpus = planted_corpus(seed=3, sentences=200)
    words = corpus.tokens
    texts = [" ".join(words[i:i + 10]) for i in range(0, len(words), 10)]
    layer = L.TextVectorization(output_sequence_length=10).adapt(texts)
    vocabulary = layer.get_vocabulary()
    assert set(vocabulary[2:]) == set(words)
    counts = {w: words.count(w) for w in set(words)}
    ranked = [counts[w] for w in vocabulary[2:]]
    assert ranked == sorted(ranked, reverse=True)
    ids = layer.forward(texts, training=False)
    assert [vocabulary[i] for i in ids.ravel()] == words  # every word read back
