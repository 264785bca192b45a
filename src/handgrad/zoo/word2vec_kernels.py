"""word2vec's training loop as word2vec's C code runs it, compiled with numba: one SGD
step per example, in reading order, on one thread.

:func:`train_stream` walks a stream of word ids (already subsampled). Each position
draws its window ``r`` uniformly in ``1..window``; skip-gram then makes one example per
context word (the centre's input vector predicts the context word), CBOW one example
(the mean of the window's input vectors predicts the word). Each example draws its
``K`` noise words from the unigram^0.75 table (:func:`~.word2vec_data.noise_table`) and
:func:`example_step` applies its update at once, so the next example reads the updated
rows. The learning rate decays linearly with the position in the stream.

:func:`example_step` is the update of one example of :mod:`.word2vec_math`'s objective,
with ``g_j = sigmoid(s_j) - [j == 0]`` (0 for a skipped noise word)::

    W_out[o_j] -= lr g_j h        bias[o_j] -= lr g_j        (j = 0..K, in order)
    W_in[i_m]  -= lr / n sum_j g_j W_out[o_j]                 (the rows before the step)

that is ``-lr`` times :func:`~.word2vec_math.batch_objective`'s gradient for a batch of
that one example (when its output words are distinct; a noise word drawn twice sees its
first update, as in word2vec). Without numba the same functions run as plain Python
(for tests on tiny inputs); training then takes the batched NumPy path instead.

Random numbers come from a 64-bit linear congruential generator (the top 31 bits of
each state) seeded by the caller: no state is shared between calls or threads.
"""

from __future__ import annotations

import math

import numpy as np

try:  # pragma: no cover - exercised when the optional dependency is present
    import numba
except ImportError:  # pragma: no cover
    numba = None

_MULTIPLIER = 6364136223846793005  # Knuth's MMIX LCG
_INCREMENT = 1442695040888963407


def _compiled(function):
    """``function`` compiled (cached, no GIL; sums may be reassociated so that they
    vectorize), or unchanged without numba."""
    if numba is None:  # pragma: no cover
        return function
    return numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})(function)


@_compiled
def _next(state):
    """``(state, r)``: the generator's next state and 31 random bits (0 <= r < 2^31)."""
    state = np.uint64(state) * np.uint64(_MULTIPLIER) + np.uint64(_INCREMENT)
    return state, np.int64(state >> np.uint64(33))


@_compiled
def _draw_noise(table, outputs, state):
    """``outputs[1:]`` drawn from ``table`` (uniform over its slots); the new state."""
    size = table.shape[0]
    for k in range(1, outputs.shape[0]):
        state, r = _next(state)
        outputs[k] = table[r * size >> 31]
    return state


@_compiled
def example_step(w_in, w_out, bias, rows, n_rows, outputs, skip_hits, lr, hidden, grad_hidden,
                 scalar, shift):
    """One example's SGD step, in place; returns its loss (float). ``rows[:n_rows]``: the
    input rows; ``outputs`` (1 + K,): the word to predict, then the noise words (one
    equal to the target is skipped when ``skip_hits``); ``bias``/``shift`` (V,) for NCE,
    empty (0,) for negative sampling. ``hidden``, ``grad_hidden`` (D,) and ``scalar``
    (1,): scratch of the tables' dtype."""
    dim = w_in.shape[1]
    nce = bias.shape[0] > 0
    first = rows[0]
    for d in range(dim):
        hidden[d] = w_in[first, d]
        grad_hidden[d] = 0
    for m in range(1, n_rows):
        row = rows[m]
        for d in range(dim):
            hidden[d] += w_in[row, d]
    if n_rows > 1:
        scalar[0] = 1.0 / n_rows
        mean = scalar[0]
        for d in range(dim):
            hidden[d] *= mean
    loss, product = 0.0, 1.0
    for j in range(outputs.shape[0]):
        word = outputs[j]
        if j > 0 and skip_hits and word == outputs[0]:
            continue
        score = w_out[word, 0] * hidden[0]
        for d in range(1, dim):
            score += w_out[word, d] * hidden[d]
        s = float(score)
        if nce:
            s += float(bias[word]) - float(shift[word])
        z = -s if j == 0 else s  # the loss is softplus(z) = max(z, 0) + log(1 + e)
        e = math.exp(-abs(s))
        loss += max(z, 0.0)
        product *= 1.0 + e  # <= 2 per word: one log per example
        g = (1.0 / (1.0 + e) if s >= 0 else e / (1.0 + e)) - (1.0 if j == 0 else 0.0)
        scalar[0] = g
        grad = scalar[0]
        scalar[0] = lr * g
        step = scalar[0]
        for d in range(dim):
            grad_hidden[d] += grad * w_out[word, d]
            w_out[word, d] -= step * hidden[d]
        if nce:
            bias[word] -= step
    scalar[0] = lr / n_rows
    step = scalar[0]
    for m in range(n_rows):
        row = rows[m]
        for d in range(dim):
            w_in[row, d] -= step * grad_hidden[d]
    return loss + math.log(product)


@_compiled
def train_stream(w_in, w_out, bias, shift, ids, window, negatives, table, cbow, skip_hits,
                 lr, min_fraction, progress, progress_step, seed):
    """Train on ``ids`` (N,) in order; returns ``(loss, examples)``. Position ``i``'s
    learning rate is ``lr * max(1 - progress - i * progress_step, min_fraction)``;
    ``table``: the noise table; ``seed``: a uint64 that seeds the generator."""
    n, dim = ids.shape[0], w_in.shape[1]
    hidden = np.empty(dim, w_in.dtype)
    grad_hidden = np.empty(dim, w_in.dtype)
    scalar = np.empty(1, w_in.dtype)
    rows = np.empty(2 * window, np.int64)  # the window's words
    centre = np.empty(1, np.int64)
    outputs = np.empty(1 + negatives, np.int64)
    state = np.uint64(seed)
    loss, examples = 0.0, 0
    for i in range(n):
        rate = lr * max(1.0 - progress - i * progress_step, min_fraction)
        state, r = _next(state)
        span = 1 + (r * window >> 31)
        count = 0
        for c in range(max(0, i - span), min(n, i + span + 1)):
            if c != i:
                rows[count] = ids[c]
                count += 1
        if count == 0:
            continue
        for c in range(1 if cbow else count):
            if cbow:  # the mean of the window predicts the word
                inputs, n_inputs, outputs[0] = rows, count, ids[i]
            else:  # the centre predicts each word of the window
                inputs, n_inputs, outputs[0], centre[0] = centre, 1, rows[c], ids[i]
            state = _draw_noise(table, outputs, state)
            loss += example_step(w_in, w_out, bias, inputs, n_inputs, outputs, skip_hits, rate,
                                 hidden, grad_hidden, scalar, shift)
            examples += 1
    return loss, examples
