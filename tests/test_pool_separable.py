"""Max and average pooling one axis at a time (the NumPy path's separable stages) against
the loop twin: windows full of ties and -inf, overlapping, dilated, padded and ceil-mode
geometries, and an upstream gradient holding inf (only the winners may receive it)."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close

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


AVERAGE = [
    (1, (2, 9, 3), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (2, (2, 7, 6, 2), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                       "count_include_pad": False}),
    (2, (2, 19, 21, 2), {"kernel_size": (10, 5), "stride": (9, 4)}),  # shared positions
    (2, (2, 8, 7, 3), {"kernel_size": 2, "stride": 3}),  # gaps between the windows
    (2, (1, 1, 5, 2), {"kernel_size": 2, "stride": 1, "padding": 1}),  # no tap reads all
    (3, (1, 5, 6, 5, 2), {"kernel_size": (3, 2, 3), "stride": (2, 2, 1), "padding": 1,
                          "divisor_override": 5}),
]


@pytest.mark.parametrize("rank, shape, kwargs", AVERAGE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_average_pooling_an_axis_at_a_time_matches_the_loop_twin(rank, shape, kwargs, dtype):
    """The sums per axis (the first axis over merged rows, the backward's stores and adds
    per stride residue) against the loop twin, also where no tap of an axis reads every
    output (1 row, kernel 2, padding 1; 6 columns, kernel 3, stride 2, ceil_mode)."""
    rng = np.random.default_rng(30 + rank)
    x = rng.standard_normal(shape).astype(dtype)
    name = f"avg_pool{rank}d"
    y, cache = getattr(ops, name)(x, **kwargs)
    y_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = getattr(ops, f"{name}_backward")(dy, cache)
    dx_ref = getattr(reference, f"{name}_backward")(dy, cache_ref)
    assert y.dtype == dx.dtype == dtype
    window = int(np.prod(np.broadcast_to(kwargs["kernel_size"], (rank,))))
    assert_close(y, y_ref, terms=window, scale=np.abs(x).max(), what="y")
    assert_close(dx, dx_ref, terms=window, scale=np.abs(dy).max(), what="dx")
    assert np.all(dx[dx_ref == 0] == 0)  # nothing left unwritten in a gap
