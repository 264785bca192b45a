"""From a stream of words to word2vec's training examples: the vocabulary, the noise
distribution, subsampling of frequent words, the dynamic window and the batches.

All of it is vectorized over the stream (loops run over window offsets only) and draws
its randomness from the Generator it is given.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .._checks import describe
from ..data import Corpus
from .word2vec_math import Batch, noise_weights

NOISE_POWER = 0.75


def as_tokens(op, data) -> list:
    """The words of a :class:`~handgrad.data.Corpus` or a list of str."""
    tokens = data.tokens if isinstance(data, Corpus) else data
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{op}: 'corpus' must be a handgrad.data.Corpus or a list of words "
                        f"(str); received {describe(data)}")
    if not tokens:
        raise ValueError(f"{op}: 'corpus' holds no words")
    return tokens


def build_vocabulary(tokens, min_count: int):
    """``(words, counts)``: the words seen at least ``min_count`` times, most frequent
    first (ties in alphabetical order), and their counts (int64)."""
    counted = [(w, c) for w, c in Counter(tokens).items() if c >= min_count]
    counted.sort(key=lambda item: (-item[1], item[0]))
    return [w for w, _ in counted], np.array([c for _, c in counted], dtype=np.int64)


def encode(tokens, index: dict) -> np.ndarray:
    """The ids (int64) of the words of ``tokens`` in ``index``; other words are dropped
    (as word2vec drops words under ``min_count``)."""
    ids = np.fromiter((index.get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))
    return ids[ids >= 0]


def noise_distribution(counts, power=NOISE_POWER) -> np.ndarray:
    """``q(w) = count(w)^power / sum_v count(v)^power`` (float64), word2vec's unigram^0.75."""
    weights = np.asarray(counts, dtype=np.float64) ** power
    return weights / weights.sum()


def noise_table_size(vocabulary: int) -> int:
    """The slots of the noise table for a vocabulary of this size: 100 per word, at
    least 2^20 and at most 2^24 (4 to 64 MiB of int32)."""
    return int(np.clip(100 * vocabulary, 2**20, 2**24))


def noise_table(counts, size=None) -> np.ndarray:
    """word2vec's unigram table: ``size`` (default :func:`noise_table_size`) word ids
    (int32), slot ``s`` holding the word whose interval of the cumulative ``q`` holds
    ``(s + 1/2) / size``, so that a uniform slot is a draw from ``q`` to within
    ``1 / size`` per word (a word of ``q < 1 / size`` may get no slot)."""
    q = noise_distribution(counts)
    size = noise_table_size(len(q)) if size is None else size
    slots = np.searchsorted(np.cumsum(q), (np.arange(size) + 0.5) / size, side="right")
    return np.minimum(slots, len(q) - 1).astype(np.int32)


def keep_probabilities(counts, threshold: float) -> np.ndarray:
    """The probability that subsampling keeps each occurrence of a word of frequency
    ``z = count / total``: ``(sqrt(z / t) + 1) t / z`` capped at 1, ``t = threshold``
    (the formula of word2vec's C code, also gensim's; the paper's ``1 - sqrt(t / z)`` is
    the discard probability of a slightly different rule). ``t = 0``: keep all."""
    counts = np.asarray(counts, dtype=np.float64)
    if threshold == 0:
        return np.ones_like(counts)
    ratio = counts / counts.sum() / threshold  # z / t
    return np.minimum((np.sqrt(ratio) + 1) / ratio, 1.0)


def subsample(ids, keep, rng) -> np.ndarray:
    """The ids each kept with probability ``keep[id]``, independently, in order."""
    return ids[rng.random(len(ids)) < keep[ids]]


def window_offsets(n: int, window: int, rng):
    """``(targets, contexts, spans)`` for a stream of ``n`` words: every pair of
    positions ``(i, i +- d)`` with ``1 <= d <= r_i`` inside the stream, where ``r_i`` is
    the effective window of position ``i``, drawn uniformly in ``1..window`` (word2vec's
    dynamic window: a context at distance ``d`` is kept with probability
    ``(window - d + 1) / window``). ``spans`` (n,) are the ``r_i``."""
    spans = rng.integers(1, window + 1, size=n)
    targets, contexts = [], []
    for d in range(1, min(window, n - 1) + 1):
        right = np.flatnonzero(spans[: n - d] >= d)  # i with context i + d
        left = np.flatnonzero(spans[d:] >= d) + d  # i with context i - d
        targets += [right, left]
        contexts += [right + d, left - d]
    if not targets:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, spans
    return np.concatenate(targets), np.concatenate(contexts), spans


def skipgram_examples(ids, window, rng):
    """``(inputs (P, 1), mask (P, 1), targets (P,))``: each (centre, context) pair of
    the dynamic window, the centre as input, the context word to predict, shuffled."""
    centres, contexts, _ = window_offsets(len(ids), window, rng)
    order = rng.permutation(len(centres))
    inputs = ids[centres[order]][:, None]
    return inputs, np.ones(inputs.shape, dtype=bool), ids[contexts[order]]


def cbow_examples(ids, window, rng):
    """``(inputs (P, 2 window), mask, targets (P,))``: each position with at least one
    context word; its input rows are the words of its dynamic window (``mask`` marks the
    filled slots), the word itself is the target; shuffled."""
    n = len(ids)
    targets, contexts, _ = window_offsets(n, window, rng)
    slot = contexts - targets + window - (contexts > targets)  # offsets -w..-1, 1..w
    inputs = np.zeros((n, 2 * window), dtype=ids.dtype)
    mask = np.zeros((n, 2 * window), dtype=bool)
    inputs[targets, slot] = ids[contexts]
    mask[targets, slot] = True
    has_context = np.flatnonzero(mask.any(axis=1))
    order = has_context[rng.permutation(len(has_context))]
    return inputs[order], mask[order], ids[order]


def draw_noise(cumulative, shape, rng) -> np.ndarray:
    """Word ids of the given shape drawn from the distribution whose cumulative sums
    are ``cumulative`` (inverse-CDF sampling)."""
    draws = np.searchsorted(cumulative, rng.random(shape) * cumulative[-1], side="right")
    return np.minimum(draws, len(cumulative) - 1)


def make_batch(inputs, mask, targets, negatives, cumulative, skip_hits, dtype, rng):
    """A :class:`~handgrad.zoo.word2vec_math.Batch`: these examples, each with
    ``negatives`` noise words drawn from the noise distribution."""
    noise = draw_noise(cumulative, (len(targets), negatives), rng)
    outputs = np.concatenate([targets[:, None], noise], axis=1)
    return Batch(inputs, mask, outputs, noise_weights(outputs, skip_hits, dtype))
