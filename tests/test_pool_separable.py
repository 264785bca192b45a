"""Max pooling one axis at a time (the NumPy path's separable stages) against the loop twin:
windows full of ties and -inf, overlapping, dilated, padded and ceil-mode geometries,
and an upstream gradient holding inf (only the winners may receive it)."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference

pytestmark = pytest.mark.usefixtures("kernel_path")

GEOMETRIES = [
    (1, (2, 9, 3), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (2, (2, 7, 6, 2), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    (2, (1, 8, 9, 2), {"kernel_size": (2, 3), "stride": 1, "dilation": (2, 1)}),
    (2, (2, 6, 6, 3), {"kernel_size": 2}),
    (3, (1, 5, 6, 5, 2), {"kernel_size": (3, 2, 3), "stride": (2, 2, 1), "padding": 1}),
]


def _run(rank, x, dy_of, kwargs):
    name = f"max_pool{rank}d"
    y, cache = getattr(ops, name)(x, **kwargs)
    y_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    dy = dy_of(y.shape)
    dx = getattr(ops, f"{name}_backward")(dy, cache)
    dx_ref = getattr(reference, f"{name}_backward")(dy, cache_ref)
    np.testing.assert_array_equal(y, y_ref)
    return dx, dx_ref


@pytest.mark.parametrize("rank, shape, kwargs", GEOMETRIES)
def test_ties_and_minus_inf_go_to_the_first_maximum(rank, shape, kwargs):
    rng = np.random.default_rng(rank)
    x = np.round(rng.standard_normal(shape) * 0.7)  # mostly -1, 0, 1: many ties
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = -np.inf
    x[0] = -np.inf  # whole windows of -inf: the first position read wins
    dx, dx_ref = _run(rank, x, lambda s: rng.standard_normal(s), kwargs)
    np.testing.assert_allclose(dx, dx_ref, rtol=4 * np.finfo(x.dtype).eps, atol=0)


@pytest.mark.parametrize("rank, shape, kwargs", GEOMETRIES)
def test_an_infinite_gradient_reaches_only_the_winner(rank, shape, kwargs):
    rng = np.random.default_rng(20 + rank)
    x = rng.standard_normal(shape)

    def dy_of(s):
        dy = rng.standard_normal(s)
        dy.reshape(-1)[0] = np.inf
        return dy

    dx, dx_ref = _run(rank, x, dy_of, kwargs)
    assert not np.isnan(dx).any()
    np.testing.assert_allclose(dx, dx_ref, rtol=4 * np.finfo(x.dtype).eps, atol=0)
