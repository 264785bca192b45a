"""Inputs of the max pooling path tests (tiles, folds): distinct values, made into ties,
windows of zeros (as after a ReLU), windows of -inf or a few NaN; and an upstream
gradient for any output shape, with infinities for the kind "inf_dy"."""

import numpy as np


def pool_input(shape, kind, dtype, rng, tie_step):
    """x of ``shape``: a permutation of 0..size-1, then per ``kind`` rounded to multiples
    of ``tie_step`` ("ties"), half zeros with whole zero windows ("zeros"), the first
    image -inf ("minus_inf") or three NaN ("nan")."""
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(dtype)
    if kind == "ties":
        x = np.round(x / tie_step)
    if kind == "zeros":
        x = np.maximum(rng.standard_normal(shape), 0).astype(dtype)
        x[0] = 0
    if kind == "minus_inf":
        x[0] = -np.inf
    if kind == "nan":
        x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = np.nan
    return x


def upstream(size, kind, dtype, rng):
    """dy(shape): the first prod(shape) of ``size`` normal values (+-inf at both ends for
    "inf_dy"), the same values for every call."""
    values = rng.standard_normal(size).astype(dtype)

    def dy(shape):
        out = values[:np.prod(shape)].reshape(shape).copy()
        if kind == "inf_dy":
            out.reshape(-1)[[0, -1]] = [np.inf, -np.inf]
        return out

    return dy
