"""The compiled kernels are optional: without numba (or with HANDGRAD_NUMBA=0) the
pure-NumPy path runs, and both paths give the same numbers."""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops._engine import dispatch as _accel
from handgrad.testing import assert_close, finite_max

from tolerances import chain_terms

BLOCK_NUMBA = textwrap.dedent("""
    import sys
    sys.modules["numba"] = None  # makes `import numba` raise ImportError
    import numpy as np
    from handgrad import ops
    from handgrad.ops._engine import dispatch as _accel
    assert not _accel.available() and not _accel.enabled(np.zeros(1))
    x = np.arange(2 * 4 * 4 * 3, dtype=np.float64).reshape(2, 4, 4, 3)
    y, cache = ops.max_pool2d(x, 2)
    dx = ops.max_pool2d_backward(np.ones_like(y), cache)
    assert y.shape == (2, 2, 2, 3) and dx.sum() == y.size
    print("numpy path ok")
""")


def test_handgrad_runs_without_numba():
    result = subprocess.run([sys.executable, "-c", BLOCK_NUMBA], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "numpy path ok" in result.stdout


def test_environment_variable_turns_the_compiled_kernels_off():
    code = "from handgrad.ops._engine import dispatch; print(dispatch.enabled())"
    env = {**os.environ, "HANDGRAD_NUMBA": "0"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, check=False)
    assert result.stdout.strip() == "False", result.stderr


def _step(x, w, wd, pool_cache=None):
    """conv -> depthwise conv -> max pool -> average pool, then backward from dq = 1:
    returns (q, dx, dw, dwd) and the max pool's cache. With ``pool_cache``, the
    backward sends the gradient to that cache's winners instead."""
    y, c1 = ops.conv2d(x, w, padding=1)
    z, c2 = ops.conv2d(y, wd, padding=1, groups=8)
    p, c3 = ops.max_pool2d(z, 3, stride=2, padding=1)
    q, c4 = ops.avg_pool2d(p, 2, ceil_mode=True, count_include_pad=False)
    dp = ops.avg_pool2d_backward(np.ones_like(q), c4)
    if pool_cache is None:
        dz = ops.max_pool2d_backward(dp, c3)
    else:
        dz = ops.max_pool2d_backward(dp.astype(pool_cache.dtype), pool_cache).astype(dp.dtype)
    dy, dwd, _ = ops.conv2d_backward(dz, c2)
    dx, dw, _ = ops.conv2d_backward(dy, c1)
    return (q, dx, dw, dwd), c3


@pytest.mark.skipif(not _accel.available(), reason="numba is not installed")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_paths_agree_on_a_small_network_step(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 9, 9, 8)).astype(dtype)
    w = rng.standard_normal((3, 3, 8, 8)).astype(dtype)
    wd = rng.standard_normal((3, 3, 1, 8)).astype(dtype)
    results = []
    for flag in (False, True):
        with _accel.use_compiled(flag):
            results.append(_step(x, w, wd))
    # The size of the terms: the step on absolute values, through the same winners
    # (a window's max of |z| bounds |z| at the winner).
    with _accel.use_compiled(False):
        sizes, _ = _step(*(np.abs(a).astype(np.float64) for a in (x, w, wd)), results[0][1])
    # Terms summed per stage: KxC (conv), K (depthwise), 1 (max), 2x2 + 1 (average and
    # its division); backward: 1 (average), <= 2x2 (overlapping 3x3 max windows at
    # stride 2), K (depthwise dx), then K x C (conv dx) or N x H x W (dwd, dw).
    kernel, positions = 3 * 3, math.prod(x.shape[:-1])
    forward, backward = [kernel * x.shape[-1], kernel, 1, 5], [1, 4]
    stages = {"q": forward, "dx": [*forward, *backward, kernel, kernel * x.shape[-1]],
              "dw": [*forward, *backward, kernel, positions],
              "dwd": [*forward, *backward, positions]}  # the order _step returns
    for name, a, b, size in zip(stages, results[0][0], results[1][0], sizes):
        assert_close(a, b, dtype=dtype, terms=chain_terms(*stages[name]),
                     scale=finite_max(size), what=name)


def _step_3d(x, w, wd):
    """conv3d (C = 8 per group: the compiled col2im's size) -> depthwise conv3d -> max and
    average pooling, and the backward from ones: every 3-D window op and its gradient. The
    pooling windows do not overlap and every divisor is a power of two, so the gradients
    round alike on both paths; the averages' window sums add the same values in another
    order (the NumPy path sums an axis at a time)."""
    y, c1 = ops.conv3d(x, w, padding=1)
    z, c2 = ops.conv3d(y, wd, padding=1, groups=8)
    p, c3 = ops.max_pool3d(z, 2, padding=1)
    q, c4 = ops.avg_pool3d(p, 2, ceil_mode=True, count_include_pad=False)
    dz = ops.max_pool3d_backward(ops.avg_pool3d_backward(np.ones_like(q), c4), c3)
    dy, dwd, _ = ops.conv3d_backward(dz, c2)
    dx, dw, _ = ops.conv3d_backward(dy, c1)
    return q, dx, dw, dwd


@pytest.mark.skipif(not _accel.available(), reason="numba is not installed")
def test_3d_window_ops_give_the_numpy_results_with_the_kernels_on():
    """The compiled convolution kernels are written for 1-D and 2-D data: 3-D convolutions
    run the NumPy code instead of reaching a 2-D kernel; the pooling loops take 3-D data.
    Either way, the same numbers: bit for bit, but for the average's window sums (within
    the rounding of 8 terms)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 5, 4, 8))
    w = rng.standard_normal((3, 3, 3, 8, 8))
    wd = rng.standard_normal((2, 3, 2, 1, 8))
    axes = ops.conv_geometry((4, 5, 4), (3, 3, 3), padding=1).axes
    with _accel.use_compiled(True):
        assert not _accel.covers(axes, x) and _accel.covers(axes[:2], x)
        assert _accel.covers(axes, x, most=3)
    results = []
    for flag in (False, True):
        with _accel.use_compiled(flag):
            results.append(_step_3d(x, w, wd))
    (q_numpy, *grads_numpy), (q_compiled, *grads_compiled) = results
    assert_close(q_compiled, q_numpy, dtype=np.float64, terms=8, what="q")
    for name, a, b in zip(("dx", "dw", "dwd"), grads_numpy, grads_compiled):
        np.testing.assert_array_equal(a, b, err_msg=name)
