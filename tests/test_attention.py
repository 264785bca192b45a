"""Scaled dot-product attention: against torch (forward and every gradient, random
upstream gradients, bool/float masks, is_causal), the loop twin, finite differences,
fully masked rows, zero gradients at masked keys, dropout and bad inputs. Multi-head
attention is in test_attention_mha.py."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close
from handgrad.testing import numeric_gradient as numeric_grad

from tolerances import proportion_bound
from tolerances_composite import attention_bounds

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]


def randn(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def tt(a, grad=True):
    return torch.tensor(np.ascontiguousarray(a), requires_grad=grad)


def assert_attention_close(results, expected, q, k, v, dout, cache, kwargs, dtype, names):
    """``results`` (some of out, dq, dk, dv, named by ``names``) against ``expected``
    within attention's rounding tolerance (tolerances_composite.attention_bounds)."""
    terms, scales = attention_bounds(q, k, v, dout, cache.p, kwargs.get("scale"),
                                     kwargs.get("mask"), cache.drop)
    for name, actual, wanted in zip(names, results, expected):
        assert_close(actual, wanted, dtype=dtype, terms=terms, scale=scales[name], what=name)


# ------------------------------------------------------- scaled dot-product attention
def sdpa_inputs(dtype, lead=(2, 3), tq=4, tk=5, e=6, ev=3, seed=0):
    rng = np.random.default_rng(seed)
    return (randn(rng, *lead, tq, e, dtype=dtype), randn(rng, *lead, tk, e, dtype=dtype),
            randn(rng, *lead, tk, ev, dtype=dtype))


def bool_mask(shape, seed=1, empty_row=True):
    mask = np.random.default_rng(seed).random(shape) > 0.4
    if empty_row:
        mask[..., 1, :] = False  # a query that sees no key
    return mask


def float_mask(shape, dtype, seed=2):
    rng = np.random.default_rng(seed)
    return np.where(bool_mask(shape, seed), rng.standard_normal(shape), -np.inf).astype(dtype)


MASKS = ["none", "bool", "bool-4d", "float", "causal", "scale"]


def make_mask(kind, dtype, lead, tq, tk):
    if kind == "bool":
        return {"mask": bool_mask((tq, tk))}
    if kind == "bool-4d":  # per batch entry, broadcast over the other leading axes
        return {"mask": bool_mask((lead[0], *[1] * (len(lead) - 1), tq, tk))}
    if kind == "float":
        return {"mask": float_mask((tq, tk), dtype)}
    if kind == "causal":
        return {"causal": True}
    if kind == "scale":
        return {"scale": 0.7}
    return {}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("kind", MASKS)
def test_sdpa_matches_torch(kind, dtype):
    q, k, v = sdpa_inputs(dtype)
    kwargs = make_mask(kind, dtype, (2, 3), 4, 5)
    out, cache = ops.scaled_dot_product_attention(q, k, v, **kwargs)
    dout = randn(np.random.default_rng(9), *out.shape, dtype=dtype)
    grads = ops.scaled_dot_product_attention_backward(dout, cache)
    tq, tk, tv = tt(q), tt(k), tt(v)
    torch_kwargs = {"is_causal": kwargs.get("causal", False), "scale": kwargs.get("scale")}
    if "mask" in kwargs:
        torch_kwargs["attn_mask"] = torch.tensor(kwargs["mask"])
    expected = F.scaled_dot_product_attention(tq, tk, tv, **torch_kwargs)
    expected.backward(torch.tensor(dout))
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    assert_attention_close([out, *grads], [expected.detach().numpy()] + [
        t.grad.numpy() for t in (tq, tk, tv)], q, k, v, dout, cache, kwargs, dtype,
        ["out", "dq", "dk", "dv"])


@pytest.mark.parametrize("kind", [*MASKS, "dropout"])
def test_sdpa_loop_twin_and_finite_differences(kind):
    q, k, v = sdpa_inputs(np.float64, lead=(2,), tq=3, tk=4, e=3, ev=2)
    kwargs = make_mask(kind, np.float64, (2,), 3, 4)
    if kind == "dropout":
        kwargs = {"mask": bool_mask((3, 4), empty_row=False), "dropout": 0.4}
    run = {"rng": 5} if kind == "dropout" else {}
    out, cache = ops.scaled_dot_product_attention(q, k, v, **kwargs, **run)
    dout = randn(np.random.default_rng(3), *out.shape)
    grads = ops.scaled_dot_product_attention_backward(dout, cache)
    ref_out, ref_cache = reference.scaled_dot_product_attention(q, k, v, **kwargs, **run)
    ref_grads = reference.scaled_dot_product_attention_backward(dout, ref_cache)
    assert_attention_close([out, *grads], [ref_out, *ref_grads], q, k, v, dout, cache, kwargs,
                           np.float64, ["out", "dq", "dk", "dv"])

    def loss():
        again = {"rng": 5} if kind == "dropout" else {}  # the same dropout mask
        y, _ = ops.scaled_dot_product_attention(q, k, v, **kwargs, **again)
        return float(np.sum(y * dout))

    for name, arrays, grad in zip("qkv", (q, k, v), grads):
        numeric, error = numeric_grad(loss, arrays, with_error=True)
        assert_gradient_close(grad, numeric, error, what=f"d{name} vs finite differences")


def test_sdpa_fully_masked_rows_give_zeros_like_torch():
    q, k, v = sdpa_inputs(np.float64)
    mask = np.ones((4, 5), dtype=bool)
    mask[2] = False
    for m in (mask, np.where(mask, 0.0, -np.inf)):
        out, cache = ops.scaled_dot_product_attention(q, k, v, m)
        dout = randn(np.random.default_rng(4), *out.shape)
        dq, _, _ = ops.scaled_dot_product_attention_backward(dout, cache)
        assert np.all(out[..., 2, :] == 0) and np.all(dq[..., 2, :] == 0)
        assert np.all(np.isfinite(out)) and np.all(np.isfinite(dq))
        expected = F.scaled_dot_product_attention(tt(q), tt(k), tt(v), attn_mask=torch.tensor(m))
        assert_attention_close([out], [expected.detach().numpy()], q, k, v, dout, cache,
                               {"mask": m}, np.float64, ["out"])


def test_masked_keys_get_exactly_zero_gradient():
    q, k, v = sdpa_inputs(np.float64)
    mask = np.ones((4, 5), dtype=bool)
    mask[:, [1, 3]] = False  # keys 1 and 3 are hidden from every query
    out, cache = ops.scaled_dot_product_attention(q, k, v, mask)
    _, dk, dv = ops.scaled_dot_product_attention_backward(
        randn(np.random.default_rng(2), *out.shape), cache)
    assert np.all(dk[..., [1, 3], :] == 0) and np.all(dv[..., [1, 3], :] == 0)
    assert np.all(dk[..., [0, 2, 4], :] != 0)
    assert np.all(cache.p[..., [1, 3]] == 0)
    # causal: the last key is seen only by the last query, the first query sees one key
    out, cache = ops.scaled_dot_product_attention(q[..., :4, :], k[..., :4, :], v[..., :4, :],
                                                  causal=True)
    assert np.all(np.triu(np.ones((4, 4)), 1)[None, None] * cache.p == 0)


def test_sdpa_dropout_is_reproducible_and_scales_kept_weights():
    q, k, v = sdpa_inputs(np.float64, lead=(8, 4), tq=16, tk=16, ev=16)
    eye_v = np.broadcast_to(np.eye(16), (8, 4, 16, 16)).copy()  # out = dropped weights
    out, cache = ops.scaled_dot_product_attention(q, k, eye_v, dropout=0.25, rng=3)
    again, _ = ops.scaled_dot_product_attention(q, k, eye_v, dropout=0.25, rng=3)
    np.testing.assert_array_equal(out, again)
    kept = out != 0
    assert abs((1 - kept.mean()) - 0.25) <= proportion_bound(0.25, kept.size)
    # out = (p * m) @ I: p * m rounds once, and so does p / 0.75
    assert_close(out[kept], cache.p[kept] / 0.75, dtype=np.float64, terms=2, what="kept weights")
    plain, _ = ops.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(ops.scaled_dot_product_attention(q, k, v, dropout=0.0)[0],
                                  plain)


def test_sdpa_non_contiguous_inputs():
    q, k, v = sdpa_inputs(np.float64, lead=(3, 2))
    qt, kt, vt = (np.swapaxes(a, 0, 1).copy().swapaxes(0, 1) for a in (q, k, v))
    assert not qt.flags.c_contiguous
    mask = bool_mask((4, 5))
    out, cache = ops.scaled_dot_product_attention(q, k, v, mask)
    out_t, cache_t = ops.scaled_dot_product_attention(qt, kt, vt, mask[::1, ::1].T.copy().T)
    np.testing.assert_array_equal(out, out_t)
    dout = randn(np.random.default_rng(0), *out.shape)
    for a, b in zip(ops.scaled_dot_product_attention_backward(dout, cache),
                    ops.scaled_dot_product_attention_backward(dout.swapaxes(0, 1).copy()
                                                              .swapaxes(0, 1), cache_t)):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------- bad inputs
def test_sdpa_bad_inputs():
    q, k, v = sdpa_inputs(np.float64)
    sdpa = ops.scaled_dot_product_attention
    with pytest.raises(ValueError, match=r"'mask' must be broadcastable .*\(2, 3, 4, 5\).*"
                                         r"\(4, 4\)"):
        sdpa(q, k, v, np.ones((4, 4), dtype=bool))
    with pytest.raises(ValueError, match="'mask' must be broadcastable"):
        sdpa(q, k, v, np.ones((7, 2, 3, 4, 5), dtype=bool))
    with pytest.raises(TypeError, match=r"'mask' must have dtype bool or float; .*int64"):
        sdpa(q, k, v, np.ones((4, 5), dtype=np.int64))
    with pytest.raises(TypeError, match="'mask' must be a bool or float array"):
        sdpa(q, k, v, [[True] * 5] * 4)
    with pytest.raises(ValueError, match="same feature size E"):
        sdpa(q, k[..., :4], v)
    with pytest.raises(ValueError, match="same number of keys Tk"):
        sdpa(q, k, v[..., :3, :])
    with pytest.raises(ValueError, match="share the leading axes"):
        sdpa(q, k[:1], v[:1])
    with pytest.raises(ValueError, match=r"'q' must have at least 3 dimensions .*\(4, 6\)"):
        sdpa(q[0, 0], k[0, 0], v[0, 0])
    with pytest.raises(TypeError, match="'k' has dtype float32 but 'q' has dtype float64"):
        sdpa(q, k.astype(np.float32), v)
    with pytest.raises(TypeError, match=r"'rng' must be a numpy\.random\.Generator or an int"):
        sdpa(q, k, v, dropout=0.1)
    with pytest.raises(ValueError, match="'dropout' must be a finite real number"):
        sdpa(q, k, v, dropout=1.0, rng=0)
    with pytest.raises(TypeError, match="'causal' must be a bool"):
        sdpa(q, k, v, causal=1)
    out, cache = sdpa(q, k, v)
    with pytest.raises(ValueError, match=r"'dy' must have the forward output's shape"):
        ops.scaled_dot_product_attention_backward(out[:1], cache)
    with pytest.raises(TypeError, match="'cache' must be the cache returned by scaled_dot"):
        ops.scaled_dot_product_attention_backward(out, None)
