"""The NumPy block loops on two threads (ops/_block_threads.py): every block runs once, on
the caller and the worker, errors come back to the caller, and the results are the
same bits as on one thread."""

import threading

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import _block_threads, _resample_blocks
from handgrad.ops._engine import dispatch


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setattr(_block_threads, "THREADS", 2)


def test_every_block_runs_once_on_the_caller_and_the_worker(two_threads):
    seen, lock = [], threading.Lock()

    def work(block):
        with lock:
            seen.append((block, threading.current_thread().name))

    _block_threads.run_blocks(work, range(7))
    assert sorted(block for block, _ in seen) == list(range(7))
    names = {name for _, name in seen}
    assert threading.current_thread().name in names
    assert any(name.startswith("handgrad-blocks") for name in names)


# 8 blocks: the caller runs 0-3, the worker 4-7; each half stops at its error, and the
# other half still finishes before the error is raised
@pytest.mark.parametrize("failing, done_before", [(1, {0, 4, 5, 6, 7}),
                                                  (6, {0, 1, 2, 3, 4, 5})])
def test_an_error_in_either_half_reaches_the_caller(two_threads, failing, done_before):
    done = []

    def work(block):
        if block == failing:
            raise KeyError(block)
        done.append(block)

    with pytest.raises(KeyError):
        _block_threads.run_blocks(work, range(8))
    assert set(done) == done_before


def test_one_thread_runs_every_block_in_order(monkeypatch):
    monkeypatch.setattr(_block_threads, "THREADS", 1)
    seen = []
    _block_threads.run_blocks(lambda block: seen.append((block, threading.get_ident())), "abc")
    assert [b for b, _ in seen] == list("abc") and {t for _, t in seen} == {threading.get_ident()}


@pytest.mark.parametrize("value, threads", [("1", 1), ("2", 2)])
def test_the_environment_chooses_the_threads(monkeypatch, value, threads):
    monkeypatch.setenv("HANDGRAD_NUMPY_THREADS", value)
    assert _block_threads._threads_from_env() == threads


def test_a_bad_thread_count_is_refused(monkeypatch):
    monkeypatch.setenv("HANDGRAD_NUMPY_THREADS", "4")
    with pytest.raises(ValueError, match="HANDGRAD_NUMPY_THREADS must be 1 or 2; received '4'"):
        _block_threads._threads_from_env()


@pytest.mark.parametrize("mode, align", [("bilinear", False), ("bilinear", True),
                                         ("trilinear", False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpolation_gives_the_same_bits_on_two_threads(monkeypatch, mode, align, dtype):
    shape = (6, 9, 10, 8, 3) if mode == "trilinear" else (6, 19, 21, 5)
    x = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    monkeypatch.setattr(_resample_blocks, "RESAMPLE_BLOCK_BYTES", 1)  # one image per block
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        with dispatch.use_compiled(False):
            y, cache = ops.interpolate(x, scale_factor=2, mode=mode, align_corners=align)
            dx = ops.interpolate_backward(np.cos(y), cache)
        results.append((y, dx))
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("half_bytes, blocks", [(1, 2), (1 << 30, 1)])
def test_a_batch_within_one_block_splits_in_halves_of_enough_bytes(monkeypatch, half_bytes,
                                                                   blocks):
    """(6, 19, 21, 5) -> 38 x 42 float64 fits one block of RESAMPLE_BLOCK_BYTES: it splits
    in two for the two threads when each half holds RESAMPLE_HALF_BYTES or more."""
    monkeypatch.setattr(_block_threads, "THREADS", 2)  # as on a machine of two cores
    x = np.random.default_rng(4).standard_normal((6, 19, 21, 5))
    with dispatch.use_compiled(False):
        whole, _ = ops.interpolate(x, scale_factor=2, mode="bilinear")
        monkeypatch.setattr(_resample_blocks, "RESAMPLE_HALF_BYTES", half_bytes)
        seen = []
        monkeypatch.setattr(_resample_blocks, "run_blocks",
                            lambda work, parts: seen.append(parts) or [work(p) for p in parts])
        y, _ = ops.interpolate(x, scale_factor=2, mode="bilinear")
    assert [len(parts) for parts in seen] == [blocks]
    np.testing.assert_array_equal(y, whole)


def _pool_inputs(dtype, ties):
    x = np.random.default_rng(5).standard_normal((5, 12, 10, 3)).astype(dtype)
    if ties:  # two maxima in some 2x2 windows: the tiled backward declines, the other runs
        x[1, 2:4, 4:6] = 7.0
        x[3, 0, 0, 0] = np.nan
    return x


@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2,
                                                          "padding": 1}])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pooling_gives_the_same_bits_on_two_threads(monkeypatch, kwargs, ties, dtype):
    """The NumPy max pooling blocks (tiled windows, and the separable stages) one image per
    block, on one and on two threads."""
    from handgrad.ops import _blocks, _separable_pool

    x = _pool_inputs(dtype, ties)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 1)
    monkeypatch.setattr(_separable_pool, "STAGE_BLOCK_VALUES", 1)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        with dispatch.use_compiled(False):
            y, cache = ops.max_pool2d(x, **kwargs)
            dx = ops.max_pool2d_backward(np.cos(np.nan_to_num(y)), cache)
        results.append((y, dx))
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("kwargs, w_shape", [({"padding": 1, "groups": 4}, (3, 3, 1, 4)),
                                             ({"padding": 2, "groups": 4}, (5, 3, 1, 8))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_halves_give_the_same_results(monkeypatch, kwargs, w_shape, dtype):
    """The NumPy depthwise einsums on the two halves of the batch: y and dx the same bits
    as on one thread, dw (the halves' sums added) within the rounding of the sum."""
    from handgrad.testing import assert_close

    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 9, 8, 4)).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    monkeypatch.setattr(_block_threads, "MIN_HALF_BYTES", 0)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        with dispatch.use_compiled(False):
            y, cache = ops.conv2d(x, w, **kwargs)
            results.append((y, *ops.conv2d_backward(np.cos(y), cache)[:2]))
    (y1, dx1, dw1), (y2, dx2, dw2) = results
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(dx1, dx2)
    assert_close(dw2, dw1, dtype=dtype, terms=y1[..., 0].size, what="dw")


def test_callers_on_several_threads_share_the_worker(two_threads, monkeypatch):
    """Four threads interpolate at once (the NumPy path, chosen once for all of them:
    ``use_compiled`` is process-wide), each handing half its blocks to the one worker:
    every result is the one thread's."""
    monkeypatch.setattr(_resample_blocks, "RESAMPLE_BLOCK_BYTES", 1)
    images = [np.random.default_rng(seed).standard_normal((4, 7, 9, 3)) for seed in range(4)]

    def run(x):
        y, cache = ops.interpolate(x, scale_factor=2, mode="bilinear")
        return y, ops.interpolate_backward(np.sin(y), cache)

    results = [None] * len(images)

    def caller(i):
        for _ in range(5):
            results[i] = run(images[i])

    with dispatch.use_compiled(False):
        expected = [run(x) for x in images]
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(images))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    for want, got in zip(expected, results):
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b)


def _forward_backward(op, x, *args, **kwargs):
    """(y, dx) of ``ops.<op>`` and its backward with dy = cos(y)."""
    y, cache = getattr(ops, op)(x, *args, **kwargs)
    return y, getattr(ops, op + "_backward")(np.cos(y), cache)


@pytest.mark.parametrize("op, args, kwargs", [
    ("pad", (2,), {"mode": "reflect"}), ("pad", (((1, 3), (2, 0)),), {"mode": "replicate"}),
    ("pad", (1,), {"mode": "circular"}), ("pad", (2,), {"mode": "constant", "value": 0.5}),
    ("pixel_shuffle", (2,), {}), ("pixel_unshuffle", (2,), {}),
    ("interpolate", (), {"scale_factor": 2, "mode": "nearest"})])
@pytest.mark.parametrize("compiled", [False, True])
def test_copies_by_half_batches_give_the_same_bits_on_two_threads(monkeypatch, op, args,
                                                                  kwargs, compiled):
    """pad, pixel (un)shuffle and nearest upsampling copy (and sum) half the batch per
    thread, on both kernel paths: the same bits as one thread (5 images: halves of 3 and
    2, every split from the first byte)."""
    x = np.random.default_rng(7).standard_normal((5, 6, 8, 4))
    monkeypatch.setattr(_block_threads, "MIN_HALF_BYTES", 0)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        with dispatch.use_compiled(compiled):
            results.append(_forward_backward(op, x, *args, **kwargs))
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
