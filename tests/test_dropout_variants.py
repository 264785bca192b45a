"""Channel dropout and alpha dropout against torch given torch's own mask (torch draws
it: it is read back from torch's outputs on zeros and ones under the same seed), the
mask's shape and rate, the identity in evaluation, and bad input."""

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import ops
from handgrad.testing import assert_close

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (op, torch function, input shape channels-last, whole channels)
CASES = {
    "dropout1d": (ops.feature_dropout, F.dropout1d, (3, 7, 5), True),
    "dropout2d": (ops.feature_dropout, F.dropout2d, (3, 4, 3, 5), True),
    "dropout3d": (ops.feature_dropout, F.dropout3d, (2, 3, 2, 3, 4), True),
    "alpha": (ops.alpha_dropout, F.alpha_dropout, (3, 4, 5), False),
    "feature_alpha": (ops.feature_alpha_dropout, F.feature_alpha_dropout, (3, 4, 2, 5), True),
}


def torch_first(a):
    return torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1)))


def channels_last(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("key", list(CASES))
def test_matches_torch_given_its_mask(key, dtype):
    op, torch_op, shape, whole = CASES[key]
    rate = 0.4
    rng = np.random.default_rng(len(key))
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)

    def run_torch(a, grad=False):
        torch.manual_seed(3)
        t = torch_first(a).requires_grad_(grad)
        return t, torch_op(t, rate, training=True)

    zeros, ones = run_torch(np.zeros(shape, dtype))[1], run_torch(np.ones(shape, dtype))[1]
    keep = full = channels_last(ones - zeros) != 0
    if whole:  # torch's mask is constant over the spatial axes: keep its (N, 1.., C) view
        keep = full[(slice(None), *[slice(0, 1)] * (len(shape) - 2))]
        np.testing.assert_array_equal(np.broadcast_to(keep, full.shape), full)
    tx, ty = run_torch(x, grad=True)
    ty.backward(torch_first(dy))
    y, cache = op(x, rate, keep=keep)
    dx = getattr(ops, op.__name__ + "_backward")(dy, cache)
    assert 0 < keep.mean() < 1  # some dropped, some kept: the case tests both
    assert_close(y, channels_last(ty), dtype=dtype, what="y")
    assert_close(dx, channels_last(tx.grad), dtype=dtype, what="dx")


@pytest.mark.parametrize("op", [ops.feature_dropout, ops.feature_alpha_dropout])
def test_feature_forms_drop_whole_channels_per_example(op):
    x = np.random.default_rng(0).standard_normal((40, 6, 5, 8)) + 10  # no value near 0
    y, _ = op(x, 0.3, 1)
    dropped = y == y.min()  # 0 or SELU's saturation (then affine); kept values are above
    per_channel = dropped.all(axis=(1, 2)) | ~dropped.any(axis=(1, 2))
    assert per_channel.all()  # each (example, channel) is dropped everywhere or nowhere
    assert abs(dropped[:, 0, 0].mean() - 0.3) < 0.1


def test_rows_draw_the_global_batch_mask():
    x = np.random.default_rng(1).standard_normal((6, 4, 3))
    whole, _ = ops.feature_dropout(x, 0.5, 5)
    part, _ = ops.feature_dropout(x[2:5], 0.5, 5, rows=(2, 6))
    np.testing.assert_array_equal(part, whole[2:5])


@pytest.mark.parametrize("cls", [L.Dropout1D, L.Dropout2D, L.Dropout3D, L.AlphaDropout,
                                 L.FeatureAlphaDropout])
def test_layers_are_the_identity_in_evaluation(cls):
    rank = getattr(cls, "rank", None) or 3
    x = np.random.default_rng(2).standard_normal((3, *[4] * rank))
    layer = cls(0.5, seed=1)
    np.testing.assert_array_equal(layer.forward(x, training=False), x)
    assert not np.array_equal(layer.forward(x, training=True), x)


@pytest.mark.parametrize("call, error, match", [
    (lambda: ops.feature_dropout(np.ones((3,)), 0.5, 1), ValueError, "at least 2 axes"),
    (lambda: ops.feature_dropout(np.ones((2, 3, 4)), 0.5, keep=np.ones((2, 3, 4), bool)),
     ValueError, r"'keep' must be a boolean array of shape \(2, 1, 4\)"),
    (lambda: ops.alpha_dropout(np.ones((2, 3)), 1.0, 1), ValueError, "'rate'"),
    (lambda: ops.alpha_dropout(np.ones((2, 3)), 0.5, None), TypeError, "'rng'"),
    (lambda: L.Dropout2D(0.5).forward(np.ones((2, 3, 4))), ValueError,
     r"Dropout2D.*\(N, H, W, C\).*\(3, 4\)"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_stochastic_depth_matches_torchvision_given_its_mask(mode):
    from torchvision_support import torchvision
    tv_ops = torchvision().ops
    rate, shape = 0.5, (8, 3, 2, 4)
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    keeps = []
    for seed in range(20):  # a seed whose batch mask is kept (mode "batch": one draw)
        torch.manual_seed(seed)
        ones = tv_ops.stochastic_depth(torch.ones(shape, dtype=torch.float64), rate, mode, True)
        keeps.append(ones.numpy()[(slice(None), *[slice(0, 1)] * 3)] != 0)
        if 0 < keeps[-1].mean() <= 1 and (mode == "batch" or keeps[-1].mean() < 1):
            break
    assert keeps[-1].any()  # the loop found a seed that keeps something
    keep = keeps[-1] if mode == "row" else keeps[-1][:1]
    torch.manual_seed(seed)
    tx = torch.tensor(x, requires_grad=True)
    ty = tv_ops.stochastic_depth(tx, rate, mode, True)
    ty.backward(torch.tensor(dy))
    y, cache = ops.stochastic_depth(x, rate, mode=mode, keep=keep)
    assert_close(y, ty.detach().numpy(), dtype=np.float64, what="y")
    assert_close(ops.stochastic_depth_backward(dy, cache), tx.grad.numpy(), dtype=np.float64,
                 what="dx")


@pytest.mark.parametrize("mode, per_example", [("row", True), ("batch", False)])
def test_stochastic_depth_drops_whole_examples_or_the_whole_batch(mode, per_example):
    x = np.random.default_rng(0).standard_normal((200, 3, 2)) + 10  # no zeros
    layer = L.StochasticDepth(0.3, mode, seed=2)
    y = layer.forward(x, training=True)
    dropped = (y == 0).all(axis=(1, 2))
    assert ((y == 0).any(axis=(1, 2)) == dropped).all()  # whole examples
    kept = ~dropped
    np.testing.assert_allclose(y[kept], x[kept] / 0.7, rtol=1e-15)
    if per_example:
        assert abs(dropped.mean() - 0.3) < 0.1
    else:
        assert dropped.all() or kept.all()
    np.testing.assert_array_equal(layer.forward(x, training=False), x)


def test_stochastic_depth_rows_draw_the_global_batch_mask():
    x = np.random.default_rng(1).standard_normal((6, 4, 3))
    for mode in ("row", "batch"):
        whole, _ = ops.stochastic_depth(x, 0.5, 5, mode=mode)
        part, _ = ops.stochastic_depth(x[2:5], 0.5, 5, mode=mode, rows=(2, 6))
        np.testing.assert_array_equal(part, whole[2:5])


@pytest.mark.parametrize("call, match", [
    (lambda: L.StochasticDepth(0.5, "column"), r"'mode' must be one of \('row', 'batch'\)"),
    (lambda: ops.stochastic_depth(np.ones((2, 3)), 0.5, 1, mode="col"), "'mode'"),
    (lambda: L.StochasticDepth(1.0), "'rate'"),
])
def test_stochastic_depth_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
