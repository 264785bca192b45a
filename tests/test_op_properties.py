"""Property tests: random stride/padding/dilation/groups/ceil_mode combinations,
each checked against the loop twin and torch (and torch must reject what we reject)."""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from handgrad import ops
from handgrad.testing import assert_close

from optable import OpCase, assert_results_close, loops, vectorized

twins = pytest.importorskip("torch_twins")
torch = twins.torch

pytestmark = pytest.mark.usefixtures("kernel_path")

sizes = st.integers(1, 7)
small = st.integers(1, 3)


@st.composite
def padding_forms(draw, nd, strings):
    kind = draw(st.sampled_from(["int", "tuple", "pairs", *strings]))
    if kind == "int":
        return draw(st.integers(0, 2))
    if kind == "tuple":
        return tuple(draw(st.integers(0, 2)) for _ in range(nd))
    if kind == "pairs":
        return tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(nd))
    return kind


def _per_axis(draw, strategy, nd):
    values = tuple(draw(strategy) for _ in range(nd))
    return values[0] if nd == 1 else values


@st.composite
def conv_cases(draw):
    nd = draw(st.sampled_from([1, 2]))
    transposed = draw(st.booleans())
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = tuple(draw(small) for _ in range(nd))
    stride, dilation = _per_axis(draw, small, nd), _per_axis(draw, st.integers(1, 2), nd)
    spatial = tuple(draw(sizes) for _ in range(nd))
    n = draw(st.integers(1, 2))
    kwargs = {"stride": stride, "dilation": dilation, "groups": groups}
    if transposed:
        kwargs["padding"] = draw(padding_forms(nd, ["valid"]))
        limits = [max(s, d) for s, d in zip(np.broadcast_to(stride, nd),
                                             np.broadcast_to(dilation, nd))]
        kwargs["output_padding"] = tuple(draw(st.integers(0, lim - 1)) for lim in limits)
        shapes = ((n, *spatial, cin), (*kernel, cout // groups, cin), (cout,))
    else:
        strings = ["valid", "same", "causal"] if nd == 1 else ["valid", "same"]
        kwargs["padding"] = draw(padding_forms(nd, strings))
        shapes = ((n, *spatial, cin), (*kernel, cin // groups, cout), (cout,))
    op = f"conv_transpose{nd}d" if transposed else f"conv{nd}d"
    return OpCase(op, shapes, kwargs)


@st.composite
def pool_cases(draw):
    nd = draw(st.sampled_from([1, 2]))
    kind = draw(st.sampled_from(["max", "avg"]))
    kernel = tuple(draw(small) for _ in range(nd))
    kwargs = {
        "kernel_size": kernel if nd == 2 else kernel[0],
        "stride": draw(st.one_of(st.none(), st.just(_per_axis(draw, small, nd)))),
        "padding": tuple(draw(st.integers(0, k // 2)) for k in kernel),
        "ceil_mode": draw(st.booleans()),
    }
    if kind == "max":
        kwargs["dilation"] = _per_axis(draw, st.integers(1, 2), nd)
    else:
        kwargs["count_include_pad"] = draw(st.booleans())
    shapes = ((draw(st.integers(1, 2)), *(draw(sizes) for _ in range(nd)), draw(small)),)
    ties, negative = draw(st.booleans()), draw(st.booleans())
    return OpCase(f"{kind}_pool{nd}d", shapes, kwargs, ties=ties, negative=negative)


def _some_window_is_all_padding(case):
    """torch's max pooling writes out of bounds in backward for such windows."""
    from handgrad.ops._args.pool import prepare_pool

    kw = case.kwargs
    nd = len(case.shapes[0]) - 2
    try:
        call = prepare_pool("", nd, np.zeros(case.shapes[0]), kw["kernel_size"], kw["stride"],
                            kw["padding"], kw.get("dilation", 1), kw["ceil_mode"])
    except ValueError:
        return False
    return any(
        not any(0 <= o * a.stride + k * a.dilation - a.pad_before < a.size_in
                for k in range(a.kernel))
        for a in call.axes for o in range(a.size_out)
    )


def _torch_rejects(case, arrays):
    """torch raises, or (cropping emulated padding) yields an empty output."""
    try:
        twins.torch_run(case, arrays, np.zeros((0,)))
    except RuntimeError:
        return True
    except (ValueError, IndexError, np.exceptions.AxisError):
        return False
    return False


def _check(case):
    arrays = case.inputs()
    try:
        y, dy, grads = vectorized(case, arrays)
    except ValueError as error:
        assert "output size" in str(error)
        assert _torch_rejects(case, arrays), f"torch accepts what handgrad rejects: {error}"
        assume(False)
    y_ref, _, grads_ref = loops(case, arrays)
    y_torch, grads_torch = twins.torch_run(case, arrays, dy)
    ours = (y, grads)
    assert_results_close(case, arrays, dy, ours, (y_ref, grads_ref), np.float64, "vs loops")
    assert_results_close(case, arrays, dy, ours, (y_torch, grads_torch), np.float64,
                         "vs torch")


@given(conv_cases())
def test_random_convolutions_match_loops_and_torch(case):
    _check(case)


@given(pool_cases())
def test_random_poolings_match_loops_and_torch(case):
    assume(not _some_window_is_all_padding(case))
    _check(case)


@given(conv_cases(), st.integers(0, 2**31))
def test_conv_transpose_is_the_adjoint_of_conv(case, seed):
    """<conv(x, w), y> == <x, conv_transpose(y, w)> with the same w."""
    assume(not case.op.startswith("conv_transpose"))
    rng = np.random.default_rng(seed)
    nd = len(case.shapes[0]) - 2
    conv, conv_t = getattr(ops, f"conv{nd}d"), getattr(ops, f"conv_transpose{nd}d")
    x, w, _ = case.inputs()
    stride = np.broadcast_to(case.kwargs["stride"], nd)
    dilation = np.broadcast_to(case.kwargs["dilation"], nd)
    pairs = twins.padding_pairs(case.kwargs["padding"], nd, x.shape[1:-1], w.shape[:nd],
                                stride, dilation)
    kwargs = {**case.kwargs, "padding": tuple(tuple(p) for p in pairs)}
    try:
        conv_xw = conv(x, w, **kwargs)[0]
    except ValueError:
        assume(False)
    y = rng.standard_normal(conv_xw.shape)
    # Output padding restores the trailing inputs that no window of the conv reads.
    out_padding = tuple(
        int(size_x - ((size_y - 1) * s - before - after + (k - 1) * d + 1))
        for size_x, size_y, s, d, k, (before, after)
        in zip(x.shape[1:-1], y.shape[1:-1], stride, dilation, w.shape[:nd], pairs)
    )
    assume(all(p < max(s, d) for p, s, d in zip(out_padding, stride, dilation)))
    back = conv_t(y, w, output_padding=out_padding, **kwargs)[0]
    assert back.shape == x.shape
    lhs, rhs = np.sum(conv_xw * y), np.sum(x * back)
    # Both sides sum every product x w y once: as many terms as conv(1, 1) * 1 adds up,
    # of total size conv(|x|, |w|) * |y|.
    terms = np.sum(conv(np.ones_like(x), np.ones_like(w), **kwargs)[0])
    scale = np.sum(conv(np.abs(x), np.abs(w), **kwargs)[0] * np.abs(y))
    assert_close(lhs, rhs, dtype=np.float64, terms=terms, scale=scale, what="<x, conv_t(y)>")
