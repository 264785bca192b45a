"""word2vec's compiled per-example SGD (handgrad.zoo.word2vec_kernels) against the
batched NumPy objective it replaces: one example's step is ``-lr`` times the batch
gradient of that example, a stream is those steps in reading order with a linearly
decaying rate, the noise table draws ``q``, and fit takes either path."""

from __future__ import annotations

import numpy as np
import pytest

from handgrad.data import planted_corpus
from handgrad.ops._engine import dispatch
from handgrad.testing import assert_close
from handgrad.zoo import Word2Vec, neighbour_purity
from handgrad.zoo import word2vec_data as wd
from handgrad.zoo import word2vec_kernels as wk
from handgrad.zoo.word2vec_math import Batch, batch_objective, noise_weights, sgd_step
from test_word2vec import CASES, bound, planted_model

KERNELS = ("_next", "_draw_noise", "example_step", "train_stream")
PATHS = ["compiled", "python"]  # the numba function, and the same source run by Python


def kernel(function, path):
    """The compiled function, or its source run by Python, calling the others' sources
    (NumPy's uint64 scalars warn on the generator's wrap-around, which is meant)."""
    if path == "compiled":
        if not dispatch.available():
            pytest.skip("numba is not installed: the compiled kernels are not available")
        return function

    def python(*args):
        compiled = {name: getattr(wk, name) for name in KERNELS}
        try:
            for name, value in compiled.items():
                setattr(wk, name, getattr(value, "py_func", value))
            with np.errstate(over="ignore"):
                return getattr(function, "py_func", function)(*args)
        finally:
            for name, value in compiled.items():
                setattr(wk, name, value)

    return python


def value_scale(tables):
    """The size of a score, ``D max|W_in| max|W_out| + max|bias| + max|shift|``, times
    the largest table entry: what a step's gradient terms are made of."""
    w_in, w_out, bias, shift = tables
    score = w_in.shape[1] * np.abs(w_in).max() * np.abs(w_out).max() + sum(
        np.abs(t).max(initial=0) for t in (bias, shift))
    return (1 + score) * (1 + max(np.abs(w_in).max(), np.abs(w_out).max()))


def tables_for(objective, dtype, rng, vocab=7, dim=3, negatives=3):
    w_in = rng.standard_normal((vocab, dim)).astype(dtype)
    w_out = rng.standard_normal((vocab, dim)).astype(dtype)
    nce = objective == "nce"
    bias = rng.standard_normal(vocab).astype(dtype) if nce else np.zeros(0, dtype)
    shift = (np.log(negatives * rng.dirichlet(np.ones(vocab))).astype(dtype) if nce
             else np.zeros(0, dtype))
    return w_in, w_out, bias, shift


def reference_step(tables, inputs, outputs, skip_hits, lr):
    """The batched path's step on a batch of one example; returns its loss."""
    w_in, w_out, bias, shift = tables
    nce = len(bias) > 0
    batch = Batch(np.array([inputs]), np.ones((1, len(inputs)), bool), np.array([outputs]),
                  noise_weights(np.array([outputs]), skip_hits, w_in.dtype))
    loss, grads = batch_objective(w_in, w_out, bias if nce else None, shift if nce else None,
                                  batch)
    for table, grad in zip(tables[:3], grads):
        if grad is not None:
            sgd_step(table, grad, lr)
    return loss, batch


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("arch", "objective"), CASES)
def test_one_example_step_is_minus_lr_times_the_batch_gradient(arch, objective, dtype, path):
    rng = np.random.default_rng(3)
    tables = tables_for(objective, dtype, rng)
    # CBOW: a window in which a word appears twice; the noise words are distinct, and for
    # negative sampling one equals the target (skipped, as the batch's weight 0 skips it).
    inputs = [4] if arch == "skipgram" else [1, 4, 1, 6]
    outputs = [2, 2, 5, 0] if objective == "negative" else [2, 3, 5, 0]
    skip_hits = objective == "negative"
    lr = 0.3
    expected = [t.copy() for t in tables]
    ref_loss, batch = reference_step(expected, inputs, outputs, skip_hits, lr)
    w_in, w_out, bias, shift = tables
    dim = w_in.shape[1]
    loss = kernel(wk.example_step, path)(
        w_in, w_out, bias, np.array(inputs), len(inputs), np.array(outputs), skip_hits, lr,
        np.empty(dim, dtype), np.empty(dim, dtype), np.empty(1, dtype), shift)
    terms, scale = bound([t if t.size else None for t in expected], batch)
    assert_close(loss, ref_loss, dtype=dtype, terms=terms, scale=scale, what="loss")
    for name, table, ref in zip(("W_in", "W_out", "bias"), tables, expected):
        assert_close(table, ref, dtype=dtype, terms=terms,
                     scale=np.abs(ref).max(initial=0) + lr * scale, what=name)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("arch", "objective"), CASES)
def test_a_stream_is_the_examples_steps_in_reading_order(arch, objective, path):
    """Window 1 (every span is 1) and a one-slot noise table make the stream's examples
    known: each position's, left context first, at the rate of its position. One noise
    word per example: a word drawn twice would see its first update (word2vec's order)."""
    rng = np.random.default_rng(4)
    tables = tables_for(objective, np.float64, rng, negatives=1)
    ids = np.array([3, 1, 4, 1, 5, 6])
    # Every draw: negative sampling, a word some examples predict (a hit: skipped); NCE,
    # which keeps hits, one no example predicts.
    noise = 1 if objective == "negative" else 2
    lr, start, step = 0.2, 0.1, 0.05
    skip_hits, cbow = objective == "negative", arch == "cbow"
    expected = [t.copy() for t in tables]
    ref_loss, ref_count = 0.0, 0
    for i in range(len(ids)):
        rate = lr * max(1 - start - i * step, 1e-4)
        window = [ids[c] for c in (i - 1, i + 1) if 0 <= c < len(ids)]
        examples = [(window, ids[i])] if cbow else [([ids[i]], word) for word in window]
        for inputs, target in examples:
            ref_loss += reference_step(expected, inputs, [target, noise], skip_hits, rate)[0]
            ref_count += 1
    loss, count = kernel(wk.train_stream, path)(
        *tables, ids, 1, 1, np.array([noise], np.int32), cbow, skip_hits, lr, 1e-4, start,
        step, np.uint64(7))
    assert count == ref_count
    terms = ref_count * 2 * tables[0].shape[1]  # (1 + K) D-term scores per example
    scale = value_scale(expected) + value_scale(tables)
    assert_close(loss, ref_loss, dtype=np.float64, terms=terms, scale=scale * ref_count,
                 what="loss")
    for name, table, ref in zip(("W_in", "W_out", "bias"), tables, expected):
        assert_close(table, ref, dtype=np.float64, terms=terms, scale=scale, what=name)


def test_the_noise_table_draws_the_unigram_to_the_three_quarters():
    counts = np.array([1000, 100, 10, 1])
    q = wd.noise_distribution(counts)
    size = 1000
    table = wd.noise_table(counts, size)
    assert table.dtype == np.int32 and table.shape == (size,)
    assert np.all(np.diff(table) >= 0)  # words in order, each in one run of slots
    assert np.all(np.abs(np.bincount(table, minlength=4) / size - q) <= 1 / size)
    assert wd.noise_table_size(10) == 2**20 and wd.noise_table_size(10**6) == 2**24


@pytest.mark.parametrize("path", PATHS)
def test_the_generator_draws_spans_and_noise_words_uniformly(path):
    """The 31-bit draws that pick the span (1..window) and the table slot are uniform."""
    draw, state = kernel(wk._next, path), np.uint64(11)
    values = []
    for _ in range(4000):
        state, r = draw(np.uint64(state))
        values.append(int(r))
    values = np.array(values)
    assert values.min() >= 0 and values.max() < 2**31
    spans = 1 + (values * 5 >> 31)
    frequency = np.bincount(spans, minlength=6)[1:] / len(values)
    assert np.all(np.abs(frequency - 0.2) <= 5 * np.sqrt(0.2 * 0.8 / len(values)))


@pytest.mark.parametrize("arch", ["skipgram", "cbow"])
def test_fit_takes_the_compiled_path_when_enabled_and_numpy_otherwise(arch, kernel_path,
                                                                     monkeypatch):
    corpus, model = planted_model(arch)
    streams = []

    def spy(*args):
        streams.append(len(args[4]))
        return original(*args)

    original = wk.train_stream
    monkeypatch.setattr(wk, "train_stream", spy)
    history = model.fit(corpus, epochs=1, batch_size=4096)
    assert bool(streams) == (kernel_path == "compiled")
    assert history["loss"][0] > 0 and np.all(np.isfinite(model.vectors))


def test_cbows_default_rate_learns_many_classes_in_two_epochs(kernel_path):
    """At word2vec's 0.05 the gradient of the window's mean (1/n of word2vec's undivided
    step per input vector) left 30 classes at chance after 2 epochs (measured 0.02-0.03,
    both paths); the default 0.2 recovers them (measured 1.00, seeds 0 and 1)."""
    corpus = planted_corpus(0, classes=30, words_per_class=20, filler_words=300,
                            sentences=8000)
    model = Word2Vec(dim=32, arch="cbow", seed=0)
    model.fit(corpus, epochs=2, batch_size=512)
    purity, chance = neighbour_purity(model, corpus.classes, 5)
    assert chance < 0.04 and purity >= 0.9, (purity, chance)
