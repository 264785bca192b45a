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
from handgrad.ops._engine import grouped_conv
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


def _step(x, w, wd, pool_cache=None, window=3):
    """conv -> depthwise conv -> max pool (``window``, stride 2: overlapping windows at 3)
    -> average pool, 2-D or 3-D by x, then backward from dq = 1: returns (q, dx, dw, dwd)
    and the max pool's cache. With ``pool_cache``, the backward sends the gradient to that
    cache's winners instead."""
    nd = x.ndim - 2
    conv, conv_backward = getattr(ops, f"conv{nd}d"), getattr(ops, f"conv{nd}d_backward")
    y, c1 = conv(x, w, padding=1)
    z, c2 = conv(y, wd, padding=1, groups=wd.shape[-1])  # depthwise
    p, c3 = getattr(ops, f"max_pool{nd}d")(z, window, stride=2, padding=1)
    q, c4 = getattr(ops, f"avg_pool{nd}d")(p, 2, ceil_mode=True, count_include_pad=False)
    dp = getattr(ops, f"avg_pool{nd}d_backward")(np.ones_like(q), c4)
    max_backward = getattr(ops, f"max_pool{nd}d_backward")
    if pool_cache is None:
        dz = max_backward(dp, c3)
    else:
        dz = max_backward(dp.astype(pool_cache.dtype), pool_cache).astype(dp.dtype)
    dy, dwd, _ = conv_backward(dz, c2)
    dx, dw, _ = conv_backward(dy, c1)
    return (q, dx, dw, dwd), c3


# (x, w, wd) shapes: 2-D, and 3-D (the compiled path's convolution of 8 channels sums in
# registers, its depthwise one runs the NumPy code, the pooling loops take 3-D data)
STEP_SHAPES = {"2d": ((4, 9, 9, 8), (3, 3, 8, 8), (3, 3, 1, 8)),
               "3d": ((2, 4, 5, 4, 8), (3, 3, 3, 8, 8), (2, 3, 2, 1, 8))}
# 3-D with 20 output channels, not a multiple of the register loops' 8 (and too many for
# their dx's group width): both paths' convolutions run the same NumPy code
NUMPY_CONV_3D = ((2, 4, 5, 4, 8), (3, 3, 3, 8, 20), (2, 3, 2, 1, 20))


@pytest.mark.skipif(not _accel.available(), reason="numba is not installed")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rank", STEP_SHAPES)
def test_both_paths_agree_on_a_small_network_step(dtype, rank):
    rng = np.random.default_rng(0)
    x, w, wd = (rng.standard_normal(shape).astype(dtype) for shape in STEP_SHAPES[rank])
    results = []
    for flag in (False, True):
        with _accel.use_compiled(flag):
            results.append(_step(x, w, wd))
    # The size of the terms: the step on absolute values, through the same winners
    # (a window's max of |z| bounds |z| at the winner).
    with _accel.use_compiled(False):
        sizes, _ = _step(*(np.abs(a).astype(np.float64) for a in (x, w, wd)), results[0][1])
    # Terms summed per stage: KxC (conv), K' (depthwise), 1 (max), 2^d + 1 (average and
    # its division); backward: 1 (average), <= 2^d (overlapping 3-wide max windows at
    # stride 2), K' (depthwise dx), then K x C (conv dx) or N x prod(S) (dwd, dw).
    nd = x.ndim - 2
    kernel, depthwise = math.prod(w.shape[:-2]), math.prod(wd.shape[:-2])
    positions = math.prod(x.shape[:-1])
    forward, backward = [kernel * x.shape[-1], depthwise, 1, 2**nd + 1], [1, 2**nd]
    stages = {"q": forward, "dx": [*forward, *backward, depthwise, kernel * x.shape[-1]],
              "dw": [*forward, *backward, depthwise, positions],
              "dwd": [*forward, *backward, positions]}  # the order _step returns
    for name, a, b, size in zip(stages, results[0][0], results[1][0], sizes):
        assert_close(a, b, dtype=dtype, terms=chain_terms(*stages[name]),
                     scale=finite_max(size), what=name)


@pytest.mark.skipif(not _accel.available(), reason="numba is not installed")
def test_which_ranks_the_compiled_loops_take():
    """The depthwise loops and col2im are written for 1-D and 2-D data, so a 3-D
    depthwise convolution runs the NumPy code instead of reaching a 2-D kernel; the
    pooling loops take 1-D to 3-D data, and the register loops of narrow convolutions 3-D
    data of a unit depth stride (a sum of 2-D loops over the depth taps)."""
    x = np.zeros((2, 4, 5, 4, 8))
    axes = ops.conv_geometry((4, 5, 4), (3, 3, 3), padding=1).axes
    strided = ops.conv_geometry((4, 5, 4), (3, 3, 3), padding=1, stride=(2, 1, 1)).axes
    with _accel.use_compiled(True):
        assert not _accel.covers(axes, x) and _accel.covers(axes[:2], x)
        assert _accel.covers(axes, x, most=3)
        assert grouped_conv.covers(axes, x) and not grouped_conv.covers(strided, x)


@pytest.mark.skipif(not _accel.available(), reason="numba is not installed")
def test_3d_step_with_windows_that_do_not_overlap_gives_the_numpy_bits():
    """With convolutions that both paths run as the same NumPy code (3-D, 20 channels)
    and max windows that do not overlap (2, stride 2) and power-of-two divisors, the
    pooling gradients round alike: dx, dw and dwd are the NumPy path's bits; q within the
    rounding of the average's 8 terms (the NumPy path sums an axis at a time)."""
    rng = np.random.default_rng(1)
    x, w, wd = (rng.standard_normal(shape) for shape in NUMPY_CONV_3D)
    results = []
    for flag in (False, True):
        with _accel.use_compiled(flag):
            results.append(_step(x, w, wd, window=2)[0])
    (q_numpy, *grads_numpy), (q_compiled, *grads_compiled) = results
    assert_close(q_compiled, q_numpy, dtype=np.float64, terms=8, what="q")
    for name, a, b in zip(("dx", "dw", "dwd"), grads_numpy, grads_compiled):
        np.testing.assert_array_equal(a, b, err_msg=name)
