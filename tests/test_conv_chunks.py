"""The compiled im2col + GEMM convolution runs over chunks of whole images; any chunk
size (one image per chunk, a few, the whole batch) must give the loop reference's
forward and gradients."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference as ref
from handgrad.ops._engine import dispatch as engine
from handgrad.testing import assert_close

pytestmark = pytest.mark.skipif(not engine.available(), reason="numba is not installed")

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
]


@pytest.mark.parametrize("chunk_bytes", [1, 700, 1 << 25])
@pytest.mark.parametrize("op, x_shape, w_shape, kwargs", CASES)
def test_chunked_gemm_conv_matches_the_loops(monkeypatch, chunk_bytes, op, x_shape, w_shape,
                                             kwargs):
    from handgrad.ops._engine import gemm_conv

    monkeypatch.setattr(gemm_conv, "CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    groups = kwargs.get("groups", 1)
    b = rng.standard_normal(w_shape[-2] * groups if "transpose" in op else w_shape[-1])
    with engine.use_compiled(True):
        y, cache = getattr(ops, op)(x, w, b, **kwargs)
        dy = rng.standard_normal(y.shape)
        grads = getattr(ops, op + "_backward")(dy, cache)
    y_ref, cache_ref = getattr(ref, op)(x, w, b, **kwargs)
    grads_ref = getattr(ref, op + "_backward")(dy, cache_ref)
    terms = int(np.prod(w_shape[:-1])) * max(w_shape[-2], w_shape[-1])
    assert_close(y, y_ref, terms=terms, what="y")
    for name, got, want in zip(("dx", "dw", "db"), grads, grads_ref, strict=True):
        assert_close(got, want, terms=terms * int(np.prod(y.shape[:-1])), what=name)


def test_chunks_cover_the_batch_in_order(monkeypatch):
    from handgrad.ops._engine import gemm_conv

    monkeypatch.setattr(gemm_conv, "CHUNK_BYTES", 1000)
    chunks = gemm_conv._chunks(7, 10, 40)  # 400 bytes per image: two images per chunk
    assert chunks == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert gemm_conv._chunks(0, 10, 40) == []
