"""Several threads may run ops and inference at once (a web server serving predictions).

The reproductions run in a subprocess, so a crash (numba's workqueue pool aborts the
process on concurrent launches) fails the test instead of killing pytest. Every
thread's results must equal those of a single-threaded run."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops._engine import dispatch as _accel
from handgrad.ops._tile_pool import tiles

TIMEOUT_S = 120
needs_numba = pytest.mark.skipif(not _accel.available(), reason="numba is not installed")
PATHS = [pytest.param("1", marks=needs_numba, id="compiled"), pytest.param("0", id="numpy")]


def run_script(script, numba_flag="1", *args, **env):
    """Run ``script`` in a fresh interpreter; return its last stdout line, parsed as JSON."""
    env = {**os.environ, "HANDGRAD_NUMBA": numba_flag, **env}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=TIMEOUT_S,
                          check=False)
    killed = f" (killed by signal {-done.returncode})" if done.returncode < 0 else ""
    assert done.returncode == 0, f"exit status {done.returncode}{killed}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


# Shared by the scripts: start the workers together, collect any exception or mismatch.
THREADS = """
    import json, sys, threading
    import numpy as np
    from handgrad.ops._engine import dispatch as _accel

    def hammer(work, n_threads, calls):
        start, failures = threading.Barrier(n_threads), []
        def worker(index):
            start.wait()
            try:
                for _ in range(calls):
                    failures.extend(work(index))
            except Exception as error:  # reported, so the test shows it
                failures.append(f"thread {index}: {error!r}")
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return failures

    def serial_variant_ran():
        kernels = _accel.kernels
        return kernels is not None and any(
            getattr(kernels.serial, name).signatures for name in vars(kernels.serial))
"""

OPS_SCRIPT = THREADS + """
    from handgrad import ops

    _accel.PARALLEL_POOL_BYTES = 0  # small pooling calls take the parallel kernels too

    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 13, 11, 4))
    w = {m: rng.standard_normal((3, 3, 1, 4 * m)) for m in (1, 2)}
    b = rng.standard_normal(8)

    def run_ops():
        out = []
        for kwargs in ({"kernel_size": 3, "stride": 2, "padding": 1},
                       {"kernel_size": 2, "ceil_mode": True}):
            y, cache = ops.max_pool2d(x, **kwargs)
            out += [y, ops.max_pool2d_backward(y * 0.5 - 1, cache)]
            y, cache = ops.avg_pool2d(x, count_include_pad=False, **kwargs)
            out += [y, ops.avg_pool2d_backward(y * 0.5 - 1, cache)]
        for m, wm in w.items():
            y, cache = ops.conv2d(x, wm, b[:4 * m], padding=1, stride=(1, 2), groups=4)
            out += [y, *ops.conv2d_backward(y * 0.5 - 1, cache)]
        return out

    expected = run_ops()

    def work(index):
        return [f"thread {index}, result {i} differs from the single-threaded run"
                for i, (got, want) in enumerate(zip(run_ops(), expected))
                if not np.array_equal(got, want)]

    failures = hammer(work, 4, int(sys.argv[1]))
    print(json.dumps({"failures": failures[:5], "compiled": _accel.enabled(x),
                      "serial_ran": serial_variant_ran()}))
"""

PREDICT_SCRIPT = THREADS + """
    import copy, math
    from handgrad import layers as L
    from handgrad.model import Sequential
    from handgrad.testing import assert_close

    model = Sequential([L.Conv2D(8, 3, padding=1), L.ReLU(), L.Conv2D(16, 3, padding=1,
                        groups=8), L.MaxPool2D(2), L.AvgPool2D(2, padding=1), L.Flatten(),
                        L.Dense(10)], seed=0, dtype="float64", input_shape=(12, 12, 3))
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((n, 12, 12, 3)) for n in (5, 16, 33, 40)]
    expected = [model.predict(x, batch_size=8) for x in inputs]
    # Only the BLAS products may round differently under threads. Each summing stage
    # (fan-ins: conv 3*3*3, depthwise 3*3, average 2*2, dense 4*4*16) adds about
    # eps*sqrt(fan-in) relative to its terms, carried on by the later layers; the same
    # network with |W|, |b| on |x| bounds those terms (ReLU and pooling are monotone).
    terms = round(sum(math.sqrt(n) for n in (27, 9, 4, 256)) ** 2)
    magnitude = copy.deepcopy(model)
    for value in magnitude.named_parameters().values():
        np.abs(value, out=value)
    scales = [magnitude.predict(np.abs(x)).max() for x in inputs]

    def work(index):
        got = model.predict(inputs[index], batch_size=8)
        assert_close(got, expected[index], terms=terms, scale=scales[index],
                     what=f"thread {index}: threaded vs serial predict")
        return []

    calls = int(sys.argv[1])
    failures = hammer(work, len(inputs), calls)
    print(json.dumps({"failures": failures[:5], "compiled": _accel.enabled(inputs[0]),
                      "serial_ran": serial_variant_ran()}))
"""


@pytest.mark.parametrize("numba_flag", PATHS)
def test_four_threads_run_pooling_and_depthwise_ops_at_once(numba_flag):
    out = run_script(OPS_SCRIPT, numba_flag, 40)
    assert out["failures"] == []
    assert out["compiled"] is (numba_flag == "1")
    if numba_flag == "1":  # the threads did collide: some calls took the serial variant
        assert out["serial_ran"]


@pytest.mark.parametrize("numba_flag", PATHS)
def test_threads_calling_predict_at_once_get_the_serial_predictions(numba_flag):
    out = run_script(PREDICT_SCRIPT, numba_flag, 15)
    assert out["failures"] == []
    assert out["compiled"] is (numba_flag == "1")
    if numba_flag == "1":
        assert out["serial_ran"]


LOCK_SCRIPT = """
    import json
    import numba
    import numpy as np
    from handgrad import ops
    from handgrad.ops._engine import dispatch as _accel
    from handgrad.ops._engine import kernels as _accel_kernels

    _accel.PARALLEL_POOL_BYTES = 0  # small pooling calls take the parallel kernels too
    x = np.random.default_rng(0).standard_normal((3, 8, 8, 4))
    w = np.random.default_rng(1).standard_normal((3, 3, 1, 4))
    with _accel_kernels._launch_lock:  # another thread is inside a parallel kernel
        y, cache = ops.max_pool2d(x, 2)
        ops.max_pool2d_backward(y, cache)
        y, cache = ops.avg_pool2d(x, 2)
        ops.avg_pool2d_backward(y, cache)
        y, cache = ops.conv2d(x, w, groups=4)
        ops.conv2d_backward(y, cache)
    try:
        layer_after_serial = numba.threading_layer()
    except ValueError:  # no parallel kernel has launched a thread pool
        layer_after_serial = None
    ops.max_pool2d(x, 2)  # the lock is free: the pooling loop launches in parallel
    print(json.dumps({"after_serial": layer_after_serial,
                      "after_parallel": numba.threading_layer()}))
"""


@needs_numba
def test_a_call_that_finds_the_launch_lock_taken_runs_serially():
    out = run_script(LOCK_SCRIPT)
    assert out["after_serial"] is None  # the serial variants launched no thread pool
    assert out["after_parallel"] == "workqueue"


FORK_SCRIPT = """
    import json, os
    from handgrad.ops._engine import kernels as _accel_kernels

    with _accel_kernels._launch_lock:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child starts with a free lock
            os.write(write, b"1" if not _accel_kernels._launch_lock.locked() else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        print(json.dumps({"child_lock_free": os.read(read, 1) == b"1"}))
"""


@needs_numba
@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available")
def test_a_process_forked_during_a_parallel_kernel_can_run_parallel_kernels():
    assert run_script(FORK_SCRIPT)["child_lock_free"]


FORK_BLOCKS_SCRIPT = """
    import json, os, signal
    from handgrad.ops import _block_threads

    _block_threads.THREADS = 2
    _block_threads.run_blocks(lambda block: None, range(2))  # the parent's worker runs
    pid = os.fork()
    if pid == 0:  # no worker thread came along: a stale pool would queue forever
        signal.alarm(20)
        done = _block_threads.run_blocks(lambda block: 2 * block, range(4))
        os._exit(0 if done == [0, 2, 4, 6] else 1)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"child": os.waitstatus_to_exitcode(status)}))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available")
def test_a_forked_child_runs_numpy_blocks_on_its_own_worker():
    """The NumPy block loops' worker does not survive a fork; the child makes its own
    (with the parent's pool kept, its blocks would wait forever: the alarm ends it)."""
    assert run_script(FORK_BLOCKS_SCRIPT)["child"] == 0


@needs_numba
def test_the_users_threading_layer_choice_is_kept():
    code = ("import json, numba; import handgrad.ops; "
            "print(json.dumps(numba.config.THREADING_LAYER))")
    assert run_script(code, NUMBA_THREADING_LAYER="safe") == "safe"
    assert run_script(code) == "workqueue"


# ------------------------------------------------ the two compiled variants agree
def _pool_cases():
    rng = np.random.default_rng(2)
    for shape, kernel, stride, padding, dilation, ceil_mode in [
        ((5, 9, 7, 3), 3, 2, 1, 1, False),
        ((2, 10, 10, 16), 2, 2, 0, 1, True),
        ((4, 1, 17, 5), (1, 3), (1, 2), (0, 1), (1, 2), True),
    ]:
        x = rng.standard_normal(shape)
        x[0, 0, 0, 0] = np.nan  # the NaN rule must hold in both variants
        yield x, dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode), \
            dilation


def _run_both(name, *args):
    """Call the parallel and the serial variant of kernel ``name`` on copies of ``args``
    (outputs are written in place); return the two sets of arguments afterwards."""
    results = []
    for variant in (_accel.kernels.parallel, _accel.kernels.serial):
        copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        getattr(variant, name)(*copies)
        results.append(copies)
    return results


def _assert_same(name, *args):
    parallel, serial = _run_both(name, *args)
    for a, b in zip(parallel, serial):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=name)


@needs_numba
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parallel_and_serial_variants_compute_identical_results(dtype):
    for x, kwargs, dilation in _pool_cases():
        x = x.astype(dtype)
        with _accel.use_compiled(True):  # for the winners' index (also with HANDGRAD_NUMBA=0)
            y, cache = ops.max_pool2d(x, dilation=dilation, **kwargs)
        g, g3, x3, y3 = (_accel.geometry_2d(cache.axes), _accel.geometry_3d(cache.axes),
                         _accel.as_3d(x), _accel.as_3d(y))
        dy = _accel.as_3d(np.random.default_rng(3).standard_normal(y.shape).astype(dtype))
        _assert_same("max_pool", x3, g3, np.empty_like(y3), np.empty(y3.shape, np.int32))
        flat = np.full((x.shape[0], x[0].size), np.nan, dtype)  # the kernel clears it
        _assert_same("max_pool_backward", dy, _accel.as_3d(cache.index), flat)
        scale = np.random.default_rng(4).uniform(0.1, 1, y3.shape[1:4]).astype(dtype)
        _assert_same("avg_pool", x3, g3, scale, np.empty_like(y3))
        _assert_same("avg_pool_backward", dy, g3, scale, np.full_like(x3, np.nan),
                     tiles(cache.axes))
        for multiplier in (1, 3):  # the loops take the input's channels repeated m times
            n_taps = g[4] * g[5]
            x_rep = np.repeat(x, multiplier, axis=-1)
            wt = np.random.default_rng(5).standard_normal(
                (n_taps, x_rep.shape[-1])).astype(dtype)
            out = np.empty((*y.shape[:3], wt.shape[1]), dtype)
            bias = np.random.default_rng(7).standard_normal(wt.shape[1]).astype(dtype)
            _assert_same("depthwise", x_rep, wt, g, bias, out)
            dy_w = np.random.default_rng(6).standard_normal(out.shape).astype(dtype)
            for want_dw in (True, False):  # two chunks of the batch (2 and 3 images)
                rows = (n_taps, out.shape[2], wt.shape[1]) if want_dw else (0, 0, 0)
                _assert_same("depthwise_backward", x_rep, wt, dy_w, g,
                             np.full_like(x_rep, np.nan), np.full((2, *rows), np.nan, dtype),
                             want_dw)


@needs_numba
def test_the_variants_are_compiled_as_named():
    for name in vars(_accel.kernels.parallel):
        assert getattr(_accel.kernels.parallel, name).targetoptions.get("parallel") is True
        assert not getattr(_accel.kernels.serial, name).targetoptions.get("parallel")
        assert callable(getattr(_accel.kernels, name))


def test_threads_predicting_with_an_unbuilt_model_build_it_once():
    """Lazy build under threads: one build, the same parameters as a serial build."""
    import threading

    from handgrad import layers as L
    from handgrad.model import Sequential

    def network():
        return Sequential([L.Conv2D(4, 3), L.ReLU(), L.Flatten(), L.Dense(3)], seed=0)

    x = np.random.default_rng(0).standard_normal((4, 6, 6, 2)).astype(np.float32)
    reference = network()
    expected = reference.predict(x)
    model, builds, results = network(), [], [None] * 8
    original = model.build

    def counting_build(*args, **kwargs):
        builds.append(1)
        return original(*args, **kwargs)

    model.build = counting_build
    start = threading.Barrier(len(results))

    def worker(index):
        start.wait()
        results[index] = model.predict(x)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(results))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1
    for key, value in reference.named_parameters().items():
        assert np.array_equal(model.named_parameters()[key], value), key
    for got in results:
        assert np.array_equal(got, expected)  # same parameters, same kernels, same order


@needs_numba
def test_pooling_takes_the_parallel_kernel_only_for_large_inputs():
    small = np.zeros((2, 4, 4, 3))
    large = np.broadcast_to(0.0, (_accel.PARALLEL_POOL_BYTES // 8,))  # no memory behind it
    for name in ("max_pool", "max_pool_backward", "avg_pool", "avg_pool_backward"):
        assert _accel._pool_kernel(name, small) is getattr(_accel.kernels.serial, name)
        assert _accel._pool_kernel(name, large) is getattr(_accel.kernels, name)


@needs_numba
def test_resampling_takes_the_parallel_kernel_only_for_large_outputs_and_both_agree():
    """Below ``PARALLEL_RESAMPLE_BYTES`` of output the serial twin runs; the parallel one
    (blocks of rows on numba's threads) gives the same values bit for bit."""
    from handgrad.ops._engine import taps
    from handgrad.ops._engine.kernels import sized

    limit = taps.PARALLEL_RESAMPLE_BYTES
    assert sized(taps._kernel, limit - 1, limit) is taps._kernel.serial
    assert sized(taps._kernel, limit, limit) is taps._kernel
    x = np.random.default_rng(4).standard_normal((3, 5, 6, 7, 4))
    with _accel.use_compiled(True):  # also under HANDGRAD_NUMBA=0
        y, cache = ops.interpolate(x, size=(9, 4, 13), mode="trilinear")
    maps = [(a.index, a.weight) for a in cache.maps]
    serial = taps.resample(x, maps)
    original = taps.PARALLEL_RESAMPLE_BYTES
    try:
        taps.PARALLEL_RESAMPLE_BYTES = 0
        parallel = taps.resample(x, maps)
    finally:
        taps.PARALLEL_RESAMPLE_BYTES = original
    np.testing.assert_array_equal(parallel, serial)
    np.testing.assert_array_equal(serial, y)


@needs_numba
def test_resampling_a_large_batch_in_halves_on_two_threads_gives_the_serial_bits(
        monkeypatch):
    """From 2 MB of output a batch is resampled half per NumPy thread (the serial twin on
    each half); the values are those of the serial kernel over the whole batch."""
    from handgrad.ops import _block_threads
    from handgrad.ops._engine import taps

    monkeypatch.setattr(_block_threads, "THREADS", 2)  # whatever HANDGRAD_NUMPY_THREADS says
    x = np.random.default_rng(5).standard_normal((5, 16, 16, 64))
    with _accel.use_compiled(True):  # also under HANDGRAD_NUMBA=0
        y, cache = ops.interpolate(x, scale_factor=2, mode="bilinear")
        dy = np.random.default_rng(6).standard_normal(y.shape)
        dx = ops.interpolate_backward(dy, cache)
    assert y.nbytes >= 2 * _block_threads.MIN_HALF_BYTES
    assert len(_block_threads.array_halves(np, x.shape[0], y.nbytes)) == 2
    for source, taps_of_axes, out in ((x, [(a.index, a.weight) for a in cache.maps], y),
                                      (dy, [a.transposed for a in cache.maps], dx)):
        whole = np.empty_like(out)
        arrays = []
        for index, weight in [(taps._IDENTITY, None)] + taps_of_axes:
            arrays += [np.ascontiguousarray(index, dtype=np.int64),
                       np.ones(index.shape) if weight is None else np.ascontiguousarray(weight)]
        taps._kernel.serial(_accel.as_3d(source), *arrays, _accel.as_3d(whole))
        np.testing.assert_array_equal(out, whole)


@needs_numba
def test_depthwise_dx_alone_runs_the_row_loop_in_halves_with_the_serial_bits(monkeypatch):
    """dx alone with strides (the row loop) runs on half the batch per NumPy thread from
    2 MB of dy: the bits of that loop over the whole batch."""
    from handgrad.ops import _block_threads

    monkeypatch.setattr(_block_threads, "THREADS", 2)  # whatever HANDGRAD_NUMPY_THREADS says
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((4, 64, 64, 64)), rng.standard_normal((3, 3, 1, 64))
    y, cache = ops.conv2d(x, w, padding=1, stride=2, groups=64)
    dy = np.cos(y)
    assert len(_block_threads.array_halves(np, 4, dy.nbytes)) == 2
    with _accel.use_compiled(True):
        dx, _ = _accel.depthwise_gradients(x.shape, w, dy, cache.axes)
    g, dx_whole = _accel.geometry_2d(cache.axes), np.empty_like(x)
    _accel.kernels.serial.depthwise_backward(dx_whole, w.reshape(9, 64), dy, g, dx_whole,
                                             np.empty((1, 0, 0, 0)), False)
    np.testing.assert_array_equal(dx, dx_whole)


@needs_numba
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_register_loops_give_the_same_bits_on_half_batches(monkeypatch, stride):
    """The register loops run on half the batch per NumPy thread (from 2 MB): y and dx
    are the bits of one thread over the whole batch; dw adds the two halves' sums, each
    the bits of the backward kernel's rows over its half (stride 1, a "same" convolution:
    unrolled_taps's loop, else register_taps's)."""
    from handgrad.ops import _block_threads
    from handgrad.ops._engine import register_taps, unrolled_taps

    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((4, 64, 64, 64)), rng.standard_normal((3, 3, 1, 64))
    results = []
    for threads in (2, 1):
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        with _accel.use_compiled(True):
            y, cache = ops.conv2d(x, w, padding=1, stride=stride, groups=64)
            dy = np.cos(y)
            results.append((y, *ops.conv2d_backward(dy, cache)[:2]))
            if threads == 2:
                assert len(_block_threads.array_halves(np, 4, dy.nbytes)) == 2
    (y, dx, dw), (y_one, dx_one, _) = results
    np.testing.assert_array_equal(y, y_one)
    np.testing.assert_array_equal(dx, dx_one)
    g, halves = _accel.geometry_2d(cache.axes), []
    same, taps = stride == 1, w.reshape(9, 64)
    kernels = unrolled_taps if same else register_taps
    kernel = kernels.backward_kernel(3, 3)
    for images in (slice(0, 2), slice(2, 4)):
        rows = np.zeros((9, 64) if same else (g[3], 9, 64))
        pad = np.zeros(_accel.padded_image(cache.axes, 64))
        kernel(x[images], np.ascontiguousarray(taps[::-1]) if same else taps, dy[images], g,
               np.empty_like(x[images]), rows, pad, pad.copy())
        halves.append(rows.reshape(-1, 9, 64))
    np.testing.assert_array_equal(dw, np.stack(halves).sum(axis=(0, 1)).reshape(w.shape))


@needs_numba
@pytest.mark.parametrize("pool, args", [("max", (3, 2, 1)), ("avg", (3, 2, 1)),
                                        ("adaptive_max", (7,))])
def test_pooling_a_large_batch_in_halves_gives_the_bits_of_the_whole_batch(pool, args,
                                                                           monkeypatch):
    """From 2 MB a pooling kernel runs its serial twin on half the batch per NumPy thread;
    y and dx are the bits of one call over the whole batch."""
    from handgrad.ops import _block_threads

    x = np.random.default_rng(8).standard_normal((4, 32, 32, 64))
    forward, backward = getattr(ops, f"{pool}_pool2d"), getattr(ops, f"{pool}_pool2d_backward")
    results = []
    for threads in (2, 1):  # halves, then the whole batch in one call
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        with _accel.use_compiled(True):
            y, cache = forward(x, *args)
            dy = np.random.default_rng(9).standard_normal(y.shape)
            results.append((y, backward(dy, cache)))
    monkeypatch.setattr(_block_threads, "THREADS", 2)
    assert len(_block_threads.array_halves(np, 4, x.nbytes)) == 2
    for got, expected in zip(*results):
        np.testing.assert_array_equal(got, expected)
