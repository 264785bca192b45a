"""The CPU im2col + GEMM convolution runs over chunks of whole images; any chunk size (one
image per chunk, a few, the whole batch) must give the loop reference's forward and
gradients, with the compiled scatter (col2im) and with NumPy's."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference as ref
from handgrad.ops._engine import dispatch as engine
from handgrad.testing import assert_close

PATHS = [False] + ([True] if engine.available() else [])

# (op, x shape, w shape, kwargs): dense, grouped (dense and batched GEMMs), strided,
# dilated, uneven padding, 1-D, and the transposed convolution (col2im forward).
CASES = [
    ("conv2d", (5, 6, 5, 3), (3, 2, 3, 4),
     {"stride": (2, 1), "dilation": (1, 2), "padding": ((1, 0), (2, 1))}),
    ("conv2d", (3, 5, 5, 4), (3, 3, 2, 6), {"groups": 2, "padding": 1}),
    ("conv2d", (3, 5, 4, 6), (2, 2, 1, 12), {"groups": 6, "stride": 2}),
    ("conv1d", (4, 9, 2), (4, 2, 3), {"padding": 3, "dilation": 2}),
    ("conv_transpose2d", (3, 4, 3, 4), (3, 3, 5, 4),
     {"stride": 2, "padding": 1, "output_padding": 1}),
    # one input channel at a stride: col2im by strided slices (NumPy path, and 3-D)
    ("conv2d", (4, 9, 8, 1), (5, 3, 1, 4), {"stride": 2, "padding": (2, 1)}),
    ("conv3d", (2, 5, 6, 4, 1), (3, 3, 2, 1, 3), {"stride": (2, 1, 2), "padding": 1}),
]


def _outputs(module, op, inputs, kwargs, dy):
    """[y, dx, dw, db] of ``op`` from ``module`` (handgrad.ops or the loop reference)."""
    y, cache = getattr(module, op)(*inputs, **kwargs)
    return [y, *getattr(module, op + "_backward")(dy, cache)]


@pytest.fixture(params=[(size, compiled) for size in (1, 700, 1 << 25) for compiled in PATHS],
                ids=lambda p: f"{['image', 'images', 'batch'][(p[0] > 1) + (p[0] > 700)]}-"
                              f"{'compiled' if p[1] else 'numpy'}")
def chunked(request, monkeypatch):
    """Chunks of one image, a few, or the whole batch, scattered compiled or by NumPy."""
    from handgrad.ops import _gemm_chunks
    from handgrad.ops._engine import gemm_conv

    size, compiled = request.param
    monkeypatch.setattr(_gemm_chunks, "CHUNK_BYTES", size)
    monkeypatch.setattr(gemm_conv, "MIN_ROW_CHANNELS", 1)  # the small cases take this path
    with engine.use_compiled(compiled):
        yield


@pytest.mark.parametrize("op, x_shape, w_shape, kwargs", CASES)
def test_chunked_gemm_conv_matches_the_loops(chunked, op, x_shape, w_shape, kwargs):
    rng = np.random.default_rng(3)
    out_channels = w_shape[-2] * kwargs.get("groups", 1) if "transpose" in op else w_shape[-1]
    inputs = [rng.standard_normal(s) for s in (x_shape, w_shape, (out_channels,))]
    dy = rng.standard_normal(ref.__dict__[op](*inputs, **kwargs)[0].shape)
    want, got = _outputs(ref, op, inputs, kwargs, dy), _outputs(ops, op, inputs, kwargs, dy)
    terms = int(np.prod(w_shape[:-1])) * max(w_shape[-2], w_shape[-1])
    for name, a, b, n in zip(("y", "dx", "dw", "db"), got, want,
                             (terms, *[terms * dy[..., 0].size] * 3), strict=True):
        assert_close(a, b, terms=n, what=name)


def test_chunks_cover_the_batch_in_order(monkeypatch):
    from handgrad.ops import _gemm_chunks

    monkeypatch.setattr(_gemm_chunks, "CHUNK_BYTES", 1000)
    chunks = _gemm_chunks._chunks(7, 10, 40)  # 400 bytes per image: two images per chunk
    assert chunks == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert _gemm_chunks._chunks(0, 10, 40) == []


def test_one_channel_at_a_stride_scatters_by_slices():
    from handgrad.ops._gather import SlicedWindows, TakeWindows
    from handgrad.ops.conv import _cpu_windows

    strided = ops.conv_geometry((9, 8), (5, 3), stride=2).axes
    dense = ops.conv_geometry((9, 8), (5, 3)).axes
    x = np.zeros((2, 9, 8, 1))
    with engine.use_compiled(False):
        assert type(_cpu_windows(np, strided, 1, (5, 3, 1, 4), x)) is SlicedWindows
        assert type(_cpu_windows(np, dense, 1, (5, 3, 1, 4), x)) is TakeWindows
        assert type(_cpu_windows(np, strided, 1, (5, 3, 2, 4), x)) is TakeWindows
