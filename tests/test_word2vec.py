"""word2vec: the batch objective and its sparse gradients (against the loop twin and
central finite differences), sparse updates, the sampling (noise distribution,
subsampling, dynamic window, min_count), and that training on the planted corpus
recovers its word classes."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from handgrad.data import planted_corpus
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient
from handgrad.zoo import Word2Vec, neighbour_purity
from handgrad.zoo import word2vec_data as wd
from handgrad.zoo.word2vec_math import (
    Batch,
    RowGradient,
    batch_objective,
    distinct_rows,
    noise_weights,
    reference_batch_objective,
    scatter_rows,
)

CASES = [(arch, objective) for arch in ("skipgram", "cbow") for objective in ("negative", "nce")]
SIGMAS = 5  # statistical checks allow this many standard errors


def random_case(arch, objective, dtype, rng, vocab=7, dim=3, batch=6, negatives=3):
    """Tables ``(W_in, W_out, bias, shift)`` and a batch in which rows repeat (a small
    vocabulary), CBOW examples have 1 to 4 inputs and some noise words hit the target."""
    w_in = rng.standard_normal((vocab, dim)).astype(dtype)
    w_out = rng.standard_normal((vocab, dim)).astype(dtype)
    nce = objective == "nce"
    bias = rng.standard_normal(vocab).astype(dtype) if nce else None
    shift = np.log(negatives * rng.dirichlet(np.ones(vocab))).astype(dtype) if nce else None
    width = 1 if arch == "skipgram" else 4
    inputs = rng.integers(0, vocab, (batch, width))
    mask = rng.random((batch, width)) < 0.6
    mask[:, 0] = True
    outputs = rng.integers(0, vocab, (batch, 1 + negatives))
    outputs[0, 1] = outputs[0, 0]  # an accidental hit
    weights = noise_weights(outputs, objective == "negative", dtype)
    return (w_in, w_out, bias, shift), Batch(inputs, mask, outputs, weights)


def bound(tables, batch):
    """``(terms, scale)`` of the rounding tolerance: a gradient entry sums up to ``count
    (1 + K)`` products of a score's derivative and a vector entry, and each score is a
    D-term dot product (plus bias and shift), so its size is bounded by ``D max|W_in|
    max|W_out| + max|b| + max|shift|``."""
    w_in, w_out, bias, shift = tables
    dim, samples = w_in.shape[1], batch.outputs.shape[1]
    count = max(np.bincount(batch.inputs[batch.mask]).max(), np.bincount(
        batch.outputs.reshape(-1)).max())
    sizes = [np.abs(t).max() for t in (w_in, w_out)]
    score = dim * sizes[0] * sizes[1] + sum(np.abs(t).max() for t in (bias, shift)
                                            if t is not None)
    terms = count * samples * dim
    return terms, count * samples * (1 + score) * (1 + max(sizes))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("arch", "objective"), CASES)
def test_sparse_gradient_matches_the_loop_twin(arch, objective, dtype):
    rng = np.random.default_rng(0)
    tables, batch = random_case(arch, objective, dtype, rng)
    loss, grads = batch_objective(*tables, batch)
    ref_loss, ref_grads = reference_batch_objective(*tables, batch)
    terms, scale = bound(tables, batch)
    assert_close(loss, ref_loss, dtype=dtype, terms=terms * len(batch), scale=scale * len(batch),
                 what="loss")
    for name, grad, ref in zip(("W_in", "W_out", "bias"), grads, ref_grads):
        if ref is None:
            assert grad is None
            continue
        np.testing.assert_array_equal(grad.rows, ref.rows)  # the touched rows, once each
        assert grad.values.dtype == dtype
        assert_close(grad.values, ref.values, dtype=dtype, terms=terms, scale=scale, what=name)


@pytest.mark.parametrize(("arch", "objective"), CASES)
def test_sparse_gradient_matches_finite_differences(arch, objective):
    rng = np.random.default_rng(1)
    tables, batch = random_case(arch, objective, np.float64, rng)
    _, grads = batch_objective(*tables, batch)
    for table, grad, name in zip(tables[:3], grads, ("W_in", "W_out", "bias")):
        if table is None:
            continue
        dense = np.zeros_like(table)  # the test's own scatter: every other row is 0
        dense[grad.rows] = grad.values
        numeric, error = numeric_gradient(lambda: batch_objective(*tables, batch)[0], table,
                                          with_error=True)
        assert_gradient_close(dense, numeric, error, what=name)


def test_scatter_rows_adds_repeated_rows_in_order():
    vectors = np.array([[1.0, 2.0], [10.0, 20.0]])
    ids = np.array([4, 1, 4, 4])
    rows, inverse = distinct_rows(ids, num_rows=6)
    np.testing.assert_array_equal(rows[inverse], ids)
    grad = scatter_rows((rows, inverse), np.array([0, 0, 1, 0]),
                        np.array([1.0, 3.0, 0.5, -2.0]), vectors)
    np.testing.assert_array_equal(grad.rows, [1, 4])
    np.testing.assert_array_equal(grad.values, [[3.0, 6.0], [1 + 5 - 2, 2 + 10 - 4]])


def planted_model(arch="skipgram", objective="negative", **kwargs):
    corpus = planted_corpus(0, sentences=3000)
    model = Word2Vec(dim=16, arch=arch, objective=objective, seed=0, **kwargs)
    return corpus, model.build_vocabulary(corpus)


@pytest.mark.parametrize(("arch", "objective"), CASES)
def test_a_step_changes_only_the_rows_of_its_batch(arch, objective):
    corpus, model = planted_model(arch, objective)
    model.tables["output"][...] = model.rng.standard_normal(model.tables["output"].shape)
    ids = wd.encode(corpus.tokens, model._index)
    inputs, mask, targets = model._examples(ids[:200])
    batch = wd.make_batch(inputs[:8], mask[:8], targets[:8], model.negatives,
                          np.cumsum(model.noise_distribution), objective == "negative",
                          model.dtype, model.rng)
    before = {name: table.copy() for name, table in model.tables.items()}
    model.train_batch(batch, lr=0.1)
    touched = {"input": np.unique(batch.inputs[batch.mask]),
               "output": np.unique(batch.outputs), "bias": np.unique(batch.outputs)}
    for name, table in model.tables.items():
        changed = np.flatnonzero((table != before[name]).reshape(len(table), -1).any(axis=1))
        assert set(changed) <= set(touched[name]), name
        assert len(changed) >= 1, name
    assert len(touched["output"]) < len(model.vocabulary)


def test_a_step_allocates_nothing_the_size_of_the_vocabulary():
    vocab, dim = 100_000, 32
    model = Word2Vec(dim=dim, min_count=1, seed=0).build_vocabulary(
        [f"w{i}" for i in range(vocab)])
    rng = np.random.default_rng(0)
    inputs = rng.integers(0, vocab, (256, 1))
    batch = wd.make_batch(inputs, np.ones(inputs.shape, bool), rng.integers(0, vocab, 256), 5,
                          np.cumsum(model.noise_distribution), True, model.dtype, rng)
    table_bytes = vocab * dim * model.dtype.itemsize
    tracemalloc.start()
    try:
        model.train_batch(batch, lr=0.025)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < table_bytes / 4, (peak, table_bytes)  # a V x D gradient would be >= 1x


def test_noise_distribution_is_the_unigram_to_the_three_quarters():
    counts = np.array([1000, 100, 10, 1])
    expected = counts**0.75 / np.sum(counts**0.75)
    assert_close(wd.noise_distribution(counts), expected, dtype=np.float64, terms=4)
    rng = np.random.default_rng(0)
    draws = 200_000
    sample = wd.draw_noise(np.cumsum(expected), draws, rng)
    frequency = np.bincount(sample, minlength=4) / draws
    assert np.all(np.abs(frequency - expected)
                  <= SIGMAS * np.sqrt(expected * (1 - expected) / draws))


def test_subsampling_keeps_words_with_word2vecs_probability():
    counts = np.array([5000, 500, 50, 5])
    t = 1e-2
    z = counts / counts.sum()
    keep = wd.keep_probabilities(counts, t)
    assert_close(keep, np.minimum((np.sqrt(z / t) + 1) * t / z, 1), dtype=np.float64, terms=4)
    assert keep[0] < 0.2 and keep[-1] == 1.0
    np.testing.assert_array_equal(wd.keep_probabilities(counts, 0.0), np.ones(4))
    ids = np.repeat(np.arange(4), 20_000)
    kept = np.bincount(wd.subsample(ids, keep, np.random.default_rng(0)), minlength=4) / 20_000
    assert np.all(np.abs(kept - keep) <= SIGMAS * np.sqrt(keep * (1 - keep) / 20_000) + 1e-12)


def test_min_count_drops_rare_words_and_sorts_by_frequency():
    tokens = ["b"] * 3 + ["a"] * 3 + ["c"] * 5 + ["rare"]
    words, counts = wd.build_vocabulary(tokens, min_count=2)
    assert words == ["c", "a", "b"] and counts.tolist() == [5, 3, 3]
    ids = wd.encode(["a", "rare", "c", "unseen"], {w: i for i, w in enumerate(words)})
    assert ids.tolist() == [1, 0]
    model = Word2Vec(dim=4, min_count=4).build_vocabulary(tokens + ["a"])
    assert model.vocabulary == ["c", "a"]


def test_the_dynamic_window_is_uniform_in_one_to_window():
    n, window = 20_000, 4
    targets, contexts, spans = wd.window_offsets(n, window, np.random.default_rng(0))
    distance = np.abs(contexts - targets)
    assert spans.min() == 1 and spans.max() == window
    assert np.all((distance >= 1) & (distance <= spans[targets]))
    assert np.all((contexts >= 0) & (contexts < n))
    for d in range(1, window + 1):  # P(span >= d) = (window - d + 1) / window, both sides
        p = (window - d + 1) / window
        observed = np.sum(distance == d) / (2 * (n - d))
        assert abs(observed - p) <= SIGMAS * np.sqrt(p * (1 - p) / (n - d)), d


def test_cbow_examples_hold_the_window_of_each_word():
    ids = np.arange(50) * 10
    inputs, mask, targets = wd.cbow_examples(ids, 3, np.random.default_rng(0))
    assert sorted(targets.tolist()) == ids.tolist()
    for row, keep, target in zip(inputs, mask, targets):
        context = row[keep] // 10
        assert 1 <= len(context) <= 6 and target // 10 not in context.tolist()
        assert np.all(np.abs(context - target // 10) <= 3)


@pytest.mark.parametrize(("arch", "objective", "epochs"),
                         [("skipgram", "negative", 2), ("skipgram", "nce", 2),
                          ("cbow", "negative", 5), ("cbow", "nce", 5)])
def test_training_on_the_planted_corpus_recovers_the_classes(arch, objective, epochs):
    corpus, model = planted_model(arch, objective)
    _, chance = neighbour_purity(model, corpus.classes, 5)
    history = model.fit(corpus, epochs=epochs, batch_size=256)
    purity, _ = neighbour_purity(model, corpus.classes, 5)
    # Measured 1.0 for seeds 0-5 of corpus and model; random vectors give ~chance (0.09).
    assert chance < 0.1 and purity >= 0.8, (purity, chance)
    assert len(history["loss"]) == epochs and history["loss"][-1] < history["loss"][0]
    assert all(speed > 0 for speed in history["words_per_second"])


def test_most_similar_is_the_cosine_ranking():
    _, model = planted_model()
    model.tables["input"][...] = model.rng.standard_normal(model.tables["input"].shape)
    word = model.vocabulary[3]
    result = model.most_similar(word, k=4)
    unit = model.vectors / np.linalg.norm(model.vectors, axis=1, keepdims=True)
    cosine = unit @ unit[3]
    expected = [model.vocabulary[i] for i in np.argsort(-cosine) if i != 3][:4]
    assert [w for w, _ in result] == expected
    assert_close(np.array([c for _, c in result]),
                 np.sort(np.delete(cosine, 3))[::-1][:4], dtype=np.float32, terms=16)
    np.testing.assert_array_equal(model.word_vector(word), model.vectors[3])


def test_most_similar_and_the_constructor_refuse_bad_input():
    _, model = planted_model()
    with pytest.raises(KeyError, match="'nosuchword' is not in the vocabulary"):
        model.most_similar("nosuchword")
    with pytest.raises(ValueError, match="'nosuchword' is not in the vocabulary"):
        model.word_vector("nosuchword")
    with pytest.raises(TypeError, match="a word must be a str; received 3"):
        model.most_similar(3)
    word = model.vocabulary[0]
    with pytest.raises(ValueError, match=r"'k' must be an int >= 1"):
        model.most_similar(word, k=0)
    with pytest.raises(ValueError, match=f"at most the {len(model.vocabulary) - 1} other"):
        model.most_similar(word, k=len(model.vocabulary))
    with pytest.raises(ValueError, match="call fit first"):
        Word2Vec().most_similar("a")
    for kwargs, error, fragment in [
            ({"arch": "glove"}, ValueError, "'arch' must be one of 'skipgram', 'cbow'"),
            ({"objective": "softmax"}, ValueError, "'objective' must be one of"),
            ({"dim": 0}, ValueError, "'dim'"), ({"window": 0}, ValueError, "'window'"),
            ({"negatives": 2.5}, TypeError, "'negatives' must be an int >= 1; received 2.5"),
            ({"subsample": -1}, ValueError, "'subsample'"), ({"lr": 0}, ValueError, "'lr'"),
            ({"dtype": "int32"}, TypeError, "'dtype' must be float32 or float64")]:
        with pytest.raises(error, match=fragment):
            Word2Vec(**kwargs)
    with pytest.raises(TypeError, match=r"'corpus' must be a handgrad\.data\.Corpus or a list"):
        Word2Vec().fit("a text, not a list of words")
    with pytest.raises(ValueError, match="at least 2 are needed"):
        Word2Vec(min_count=1).fit(["alone", "alone"])


def test_the_loss_gradient_rows_are_a_row_gradient():
    rng = np.random.default_rng(2)
    tables, batch = random_case("cbow", "nce", np.float64, rng)
    grads = batch_objective(*tables, batch)[1]
    assert all(isinstance(g, RowGradient) and np.all(np.diff(g.rows) > 0) for g in grads)


def test_fit_returns_a_history_and_calls_the_callbacks_hooks():
    from handgrad.data import planted_corpus
    from handgrad.training import Callback, EarlyStopping, History

    class Recorder(Callback):
        def __init__(self):
            self.epochs, self.batches = [], 0

        def on_epoch_end(self, epoch, logs=None):
            self.epochs.append((epoch, logs["loss"]))

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1

    model, recorder = Word2Vec(dim=8, min_count=1, seed=0), Recorder()
    history = model.fit(planted_corpus(), epochs=2, batch_size=4096, callbacks=[recorder])
    assert isinstance(history, History) and history.epoch == [0, 1]
    assert [loss for _, loss in recorder.epochs] == history["loss"] == model.history["loss"]
    assert recorder.batches >= 2
    stop = EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    assert len(model.fit(planted_corpus(), epochs=5, batch_size=4096, callbacks=[stop]).epoch) < 5
    with pytest.raises(TypeError, match=r"Word2Vec.fit: 'y' must be None"):
        model.fit(planted_corpus(), 2)
