"""Pooling geometries where the windows leave gaps or tile a padded input, and overlapping
windows holding NaN and ties: the kernels (both paths) against their loop twins.

The NumPy kernels write dx per tap into an uninitialized buffer only where the windows
tile the input, and scatter-add at the winners where windows overlap or hold NaN."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close

pytestmark = pytest.mark.usefixtures("kernel_path")

GEOMETRIES = [
    (1, (2, 11, 3), {"kernel_size": 2, "stride": 3}),  # gaps between the windows
    (2, (2, 7, 8, 2), {"kernel_size": 2, "stride": (3, 4)}),
    (2, (2, 5, 7, 2), {"kernel_size": 2, "padding": 1}),  # tiles the padded input
    (3, (1, 5, 4, 7, 2), {"kernel_size": (2, 1, 2), "stride": (3, 1, 2), "padding": (1, 0, 1)}),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("rank, shape, kwargs", GEOMETRIES)
def test_gaps_and_tiles_match_the_loop_twin(kind, rank, shape, kwargs):
    rng = np.random.default_rng(rank)
    x = rng.standard_normal(shape)
    name = f"{kind}_pool{rank}d"
    y, cache = getattr(ops, name)(x, **kwargs)
    y_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    dy = rng.standard_normal(y.shape)
    dx = getattr(ops, f"{name}_backward")(dy, cache)
    dx_ref = getattr(reference, f"{name}_backward")(dy, cache_ref)
    if kind == "max":  # one value per window and per input: exact
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(dx, dx_ref)
    else:
        window = int(np.prod(np.broadcast_to(kwargs["kernel_size"], (rank,))))
        assert_close(y, y_ref, terms=window, what="y")
        assert_close(dx, dx_ref, what="dx")
    assert np.all(dx[np.abs(dx_ref) == 0] == 0)  # nothing left uninitialized in a gap


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_overlapping_windows_with_nan_and_ties_match_the_loop_twin(rank):
    rng = np.random.default_rng(10 + rank)
    x = np.round(rng.standard_normal((2, *(7,) * rank, 3)))  # many ties
    x.reshape(-1)[rng.choice(x.size, 4, replace=False)] = np.nan
    x.reshape(-1)[rng.choice(x.size, 4, replace=False)] = -np.inf
    kwargs = {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
              "return_indices": True}
    name = f"max_pool{rank}d"
    y, index, cache = getattr(ops, name)(x, **kwargs)
    y_ref, index_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    dy = rng.standard_normal(y.shape)
    dx = getattr(ops, f"{name}_backward")(dy, cache)
    dx_ref = getattr(reference, f"{name}_backward")(dy, cache_ref)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(index, index_ref)
    assert_close(dx, dx_ref, terms=4, scale=np.abs(dy).max(), what="dx")


@pytest.mark.parametrize("length", [32767, 40000])
def test_winners_far_into_a_long_image_match_the_loop_twin(length):
    """The compiled path keeps each winner's position in int16 while an image has at most
    32767 positions and in int32 beyond: both reach the far end of the image."""
    rng = np.random.default_rng(length)
    x = np.round(rng.standard_normal((1, length, 2)))  # ties
    x[0, -3:] = 5.0  # the last windows' winners lie beyond int16's reach in the longer one
    kwargs = {"kernel_size": 3, "stride": 2, "padding": 1}
    y, cache = ops.max_pool1d(x, **kwargs)
    y_ref, cache_ref = reference.max_pool1d(x, **kwargs)
    dy = rng.standard_normal(y.shape)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(ops.max_pool1d_backward(dy, cache),
                                  reference.max_pool1d_backward(dy, cache_ref))
