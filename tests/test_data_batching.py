"""Tests for handgrad.data's minibatch iteration."""

import numpy as np
import pytest

from handgrad.data import batches, num_batches


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("n", "batch_size"), [(103, 10), (100, 10), (5, 8), (1, 1), (0, 4)])
def test_batches_cover_each_example_once(n, batch_size, drop_last):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n) * 3
    seen, sizes = [], []
    for xb, yb in batches(x, y, batch_size, rng=5, drop_last=drop_last):
        np.testing.assert_array_equal(xb[:, 0], 2 * yb / 3)
        seen.append(yb // 3)
        sizes.append(len(yb))
    assert len(sizes) == num_batches(n, batch_size, drop_last)
    seen = np.concatenate(seen) if seen else np.zeros(0, int)
    if drop_last:
        assert all(size == batch_size for size in sizes)
        assert len(seen) == (n // batch_size) * batch_size
        assert len(np.unique(seen)) == len(seen)
    else:
        assert sizes[:-1] == [batch_size] * (len(sizes) - 1)
        np.testing.assert_array_equal(np.sort(seen), np.arange(n))


def test_batches_shuffle_is_seeded():
    x = np.arange(50)

    def order(rng):
        return np.concatenate(list(batches(x, batch_size=7, rng=rng)))

    np.testing.assert_array_equal(order(3), order(3))
    np.testing.assert_array_equal(order(np.random.default_rng(3)), order(3))
    assert not np.array_equal(order(3), order(4))
    assert not np.array_equal(order(3), x)
    generator = np.random.default_rng(0)
    assert not np.array_equal(order(generator), order(generator))  # the generator advances


def test_batches_without_shuffle_are_ordered_views():
    x = np.arange(24, dtype=np.float64).reshape(12, 2)
    parts = list(batches(x, batch_size=5, shuffle=False))
    assert [len(p) for p in parts] == [5, 5, 2]
    np.testing.assert_array_equal(np.concatenate(parts), x)
    assert all(np.shares_memory(p, x) for p in parts)


def test_batches_default_rng_leaves_global_state_unchanged():
    before = np.random.get_state()  # noqa: NPY002
    parts = list(batches(np.arange(20), batch_size=6))
    after = np.random.get_state()  # noqa: NPY002
    np.testing.assert_array_equal(before[1], after[1])
    assert before[2:] == after[2:]
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(20))


def test_batches_keeps_dtypes_and_trailing_shape():
    x = np.zeros((9, 4, 4, 1), np.float32)
    y = np.zeros(9, np.int64)
    for xb, yb in batches(x, y, 4, rng=0):
        assert xb.dtype == np.float32 and xb.shape[1:] == (4, 4, 1) and yb.dtype == np.int64
    assert [b.shape for b in batches([[1, 2], [3, 4], [5, 6]], batch_size=2, shuffle=False)] == [
        (2, 2),
        (1, 2),
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "pattern"),
    [
        ((np.zeros(4),), {"batch_size": 0}, ValueError, "'batch_size' must be an int >= 1"),
        ((np.zeros(4),), {"batch_size": 2.5}, TypeError, "'batch_size' must be an int >= 1"),
        ((np.zeros(4),), {"batch_size": True}, TypeError, "'batch_size' must be an int >= 1"),
        ((np.zeros(4), np.zeros(3)), {}, ValueError, "4 in 'x' and 3 in 'y'"),
        ((np.float32(1),), {}, ValueError, "'x' must have a leading example axis"),
        (("abc",), {}, TypeError, "'x' must be an array"),
        ((np.zeros(4), 7), {}, TypeError, "'y' must be an array"),
        ((np.zeros(4),), {"rng": -1}, ValueError, "'rng' must be an int seed >= 0"),
        ((np.zeros(4),), {"rng": "seed"}, TypeError, "'rng' must be a numpy.random.Generator"),
        ((np.zeros(4),), {"shuffle": 1}, TypeError, "'shuffle' must be a bool"),
        ((np.zeros(4),), {"drop_last": None}, TypeError, "'drop_last' must be a bool"),
    ],
)
def test_batches_bad_inputs_fail_at_call_time(args, kwargs, error, pattern):
    with pytest.raises(error, match=f"batches: .*{pattern}"):
        batches(*args, **kwargs)  # no next(): validation is eager


@pytest.mark.parametrize(
    ("args", "error", "pattern"),
    [
        ((-1, 4), ValueError, "'n' must be an int >= 0"),
        ((1.5, 4), TypeError, "'n' must be an int >= 0"),
        ((10, 0), ValueError, "'batch_size' must be an int >= 1"),
        ((10, 3, "no"), TypeError, "'drop_last' must be a bool"),
    ],
)
def test_num_batches_bad_inputs(args, error, pattern):
    with pytest.raises(error, match=f"num_batches: .*{pattern}"):
        num_batches(*args)


def test_num_batches_values():
    assert num_batches(10, 3) == 4 and num_batches(10, 3, drop_last=True) == 3
    assert num_batches(9, 3) == 3 == num_batches(9, 3, True)
    assert num_batches(0, 5) == 0 and num_batches(2, 5, True) == 0
