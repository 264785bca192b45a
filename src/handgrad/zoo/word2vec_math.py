"""The word2vec objectives on one batch, with sparse gradients (and their loop twin).

A batch holds B examples. Example ``b`` reads the input-vector rows ``inputs[b, m]``
where ``mask[b, m]`` (skip-gram: one row, the centre word; CBOW: the words of the
window) and scores the output-vector rows ``outputs[b, j]``: ``j = 0`` the word to
predict, ``j = 1..K`` noise words drawn from the noise distribution ``q``::

    h_b  = sum_m mask[b,m] W_in[inputs[b,m]] / n_b               n_b = sum_m mask[b,m]
    s_bj = W_out[outputs[b,j]] . h_b + bias[outputs[b,j]] - shift[outputs[b,j]]
    L    = sum_b ( weight[b,0] softplus(-s_b0) + sum_{j>=1} weight[b,j] softplus(s_bj) )

as ``-log sigmoid(s) = softplus(-s)`` and ``-log(1 - sigmoid(s)) = softplus(s)``.
Negative sampling (Mikolov et al., 2013): no bias, no shift. NCE (Gutmann and
Hyvarinen, 2010; Mnih and Teh, 2012): a bias per output word and ``shift = log(K q)``,
so that ``sigmoid(s)`` is the posterior that a word came from the data rather than from
the K noise draws. ``weight`` is 1, or 0 for a noise draw to skip (see
:func:`noise_weights`).

The gradients, with ``g_bj = dL/ds_bj = weight[b,j] (sigmoid(s_bj) - [j == 0])``::

    dW_out[outputs[b,j]] += g_bj h_b          dbias[outputs[b,j]] += g_bj
    dh_b = sum_j g_bj W_out[outputs[b,j]]     dW_in[inputs[b,m]]  += mask[b,m] dh_b / n_b

Only the rows a batch touches are computed: each gradient is a :class:`RowGradient`,
the sorted distinct rows and their summed gradient; a row named several times (a
frequent word, a noise word drawn twice) gets the sum of its terms. No ``V x D`` array is
ever made. :func:`reference_batch_objective` is the same computation written as plain
loops over examples and words, to read and to test against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops import special


@dataclass(frozen=True)
class Batch:
    """``inputs`` (B, M) int and ``mask`` (B, M) bool: the input rows of each example
    (at least one per example); ``outputs`` (B, 1 + K) int: the target, then K noise
    words; ``weights`` (B, 1 + K) float: each score's weight (0 skips it)."""

    inputs: np.ndarray
    mask: np.ndarray
    outputs: np.ndarray
    weights: np.ndarray

    def __len__(self) -> int:
        return len(self.outputs)


@dataclass(frozen=True)
class RowGradient:
    """A sparse gradient of a table: ``rows`` (U,) sorted and distinct, ``values``
    (U, *row_shape) the summed gradient of each of those rows."""

    rows: np.ndarray
    values: np.ndarray


def noise_weights(outputs, skip_hits: bool, dtype) -> np.ndarray:
    """Weights (B, 1 + K): ones, except, with ``skip_hits``, 0 for each noise word equal
    to its example's target (word2vec's rule for negative sampling)."""
    weights = np.ones(outputs.shape, dtype=dtype)
    if skip_hits:
        weights[:, 1:][outputs[:, 1:] == outputs[:, :1]] = 0
    return weights


def distinct_rows(ids, num_rows: int):
    """``(rows, inverse)``: the distinct values of ``ids`` (N,) in ``[0, num_rows)``,
    sorted, and the position in ``rows`` of each id (``rows[inverse] == ids``).

    Found without sorting the N ids: an uninitialized scratch index of ``num_rows``
    integers (only the N entries written are touched) keeps the last position of each
    id, which marks one representative per row. O(N + U log U)."""
    positions = np.arange(ids.size)
    slot = np.empty(num_rows, dtype=np.intp)
    slot[ids] = positions
    rows = np.sort(ids[slot[ids] == positions])
    slot[rows] = np.arange(rows.size)
    return rows, slot[ids]


def scatter_rows(distinct, examples, coefficients, vectors) -> RowGradient:
    """The sparse gradient ``d[ids[n]] += coefficients[n] * vectors[examples[n]]`` for
    n < N, where ``distinct = distinct_rows(ids, V)``; ``vectors`` (B, D). The N D
    products are added in order into their rows by one flat ``np.add.at``
    (deterministic)."""
    rows, inverse = distinct
    width = vectors.shape[1]
    index_type = np.int32 if rows.size * width < 2**31 else np.intp  # half the traffic
    flat = inverse.astype(index_type)[:, None] * index_type(width) + np.arange(
        width, dtype=index_type)
    summed = np.zeros(rows.size * width, dtype=vectors.dtype)
    np.add.at(summed, flat.reshape(-1), (coefficients[:, None] * vectors[examples]).reshape(-1))
    return RowGradient(rows, summed.reshape(rows.size, width))


def scatter_scalars(distinct, values) -> RowGradient:
    """``d[ids[n]] += values[n]``, ``distinct = distinct_rows(ids, V)``: the sparse
    gradient of a gathered vector (the NCE bias)."""
    rows, inverse = distinct
    summed = np.zeros(rows.size, dtype=values.dtype)
    np.add.at(summed, inverse, values)
    return RowGradient(rows, summed)


def _hidden(input_vectors, batch):
    """``(h, counts)``: the mean input vector of each example (B, D) and ``n_b`` (B,)."""
    if batch.inputs.shape[1] == 1:  # skip-gram: one input row each, no mean to take
        return input_vectors.take(batch.inputs[:, 0], axis=0), np.ones(len(batch),
                                                                       input_vectors.dtype)
    rows = input_vectors.take(batch.inputs, axis=0)  # (B, M, D)
    mask = batch.mask.astype(input_vectors.dtype)
    counts = mask.sum(axis=1)
    return np.einsum("bm,bmd->bd", mask, rows) / counts[:, None], counts


def batch_objective(input_vectors, output_vectors, bias, shift, batch):
    """``(loss, (d_input, d_output, d_bias))`` of one batch: the summed loss ``L`` of the
    module's formula (a float) and the sparse gradient of each table (``d_bias`` is None
    when ``bias`` is None, i.e. negative sampling). ``shift`` (V,) or None."""
    num_rows = output_vectors.shape[0]
    hidden, counts = _hidden(input_vectors, batch)
    out_rows = output_vectors.take(batch.outputs, axis=0)  # (B, 1 + K, D)
    scores = np.einsum("bkd,bd->bk", out_rows, hidden)
    if bias is not None:
        scores += bias.take(batch.outputs)
    if shift is not None:
        scores -= shift.take(batch.outputs)
    labels = np.zeros_like(scores)
    labels[:, 0] = 1
    signs = 1 - 2 * labels  # -1 for the target, +1 for the noise words
    loss = float(np.sum(batch.weights * special.softplus(np, signs * scores), dtype=np.float64))
    grad_scores = batch.weights * (special.sigmoid(np, scores) - labels)  # (B, 1 + K)
    grad_hidden = np.einsum("bk,bkd->bd", grad_scores, out_rows)
    examples = np.repeat(np.arange(len(batch)), batch.outputs.shape[1])
    outputs = distinct_rows(batch.outputs.reshape(-1), num_rows)
    d_output = scatter_rows(outputs, examples, grad_scores.reshape(-1), hidden)
    d_bias = None if bias is None else scatter_scalars(outputs, grad_scores.reshape(-1))
    example, slot = np.nonzero(batch.mask)
    d_input = scatter_rows(distinct_rows(batch.inputs[example, slot], num_rows), example,
                           1 / counts[example], grad_hidden)
    return loss, (d_input, d_output, d_bias)


def sgd_step(table, gradient: RowGradient, lr) -> None:
    """``table[rows] -= lr * values``, in place: only the touched rows change."""
    table[gradient.rows] -= table.dtype.type(lr) * gradient.values


# ----------------------------------------------------------------------- loop twin


def _log_sigmoid(x: float) -> float:
    """``log(sigmoid(x))`` of a Python float, without overflow."""
    return -np.log1p(np.exp(-x)) if x >= 0 else x - np.log1p(np.exp(x))


def _add(table: dict, row: int, value):
    table[row] = table[row] + value if row in table else value


def _as_row_gradient(table: dict, dtype, row_shape) -> RowGradient:
    rows = sorted(table)
    values = np.array([table[r] for r in rows], dtype=dtype).reshape(len(rows), *row_shape)
    return RowGradient(np.array(rows, dtype=np.intp), values)


def reference_batch_objective(input_vectors, output_vectors, bias, shift, batch):
    """:func:`batch_objective` as plain loops over the examples and their words, one
    score at a time, with dicts of touched rows (float64 arithmetic on the rows)."""
    dim = input_vectors.shape[1]
    loss, d_input, d_output, d_bias = 0.0, {}, {}, {}
    for b in range(len(batch)):
        rows = [int(r) for r, keep in zip(batch.inputs[b], batch.mask[b]) if keep]
        hidden = np.zeros(dim)
        for r in rows:
            hidden += input_vectors[r]
        hidden /= len(rows)
        grad_hidden = np.zeros(dim)
        for j, word in enumerate(int(w) for w in batch.outputs[b]):
            score = float(np.dot(output_vectors[word].astype(np.float64), hidden))
            score += 0.0 if bias is None else float(bias[word])
            score -= 0.0 if shift is None else float(shift[word])
            weight, label = float(batch.weights[b, j]), 1.0 if j == 0 else 0.0
            loss -= weight * _log_sigmoid(score if j == 0 else -score)
            grad = weight * (1.0 / (1.0 + np.exp(-score)) - label)
            grad_hidden += grad * output_vectors[word]
            _add(d_output, word, grad * hidden)
            if bias is not None:
                _add(d_bias, word, grad)
        for r in rows:
            _add(d_input, r, grad_hidden / len(rows))
    dtype = input_vectors.dtype
    return loss, (_as_row_gradient(d_input, dtype, (dim,)),
                  _as_row_gradient(d_output, dtype, (dim,)),
                  None if bias is None else _as_row_gradient(d_bias, dtype, ()))
