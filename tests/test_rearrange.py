"""Padding and rearranging beyond the op table: one_hot (no gradient, so no table row),
the bad inputs of pad and the shuffles, and the torch-order padding of the layers."""

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close


@pytest.mark.parametrize("num_classes", [5, -1])
def test_one_hot_matches_torch(num_classes):
    torch = pytest.importorskip("torch")
    ids = np.random.default_rng(0).integers(0, 5, (3, 4))
    expected = torch.nn.functional.one_hot(torch.from_numpy(ids), num_classes).numpy()
    y = ops.one_hot(ids, num_classes)
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("ids, num_classes, fragment", [
    (np.array([0, 3]), 3, "'ids' must be in [0, 3)"),
    (np.array([-1, 0]), -1, "'ids' must be in"),
    (np.array([0.5]), 2, "'ids' must have an integer dtype"),
    (np.array([0]), 0, "'num_classes' must be an int >= 1 or -1"),
    (np.zeros(0, np.int64), -1, "cannot be inferred"),
])
def test_one_hot_refuses_bad_input(ids, num_classes, fragment):
    with pytest.raises((ValueError, TypeError)) as info:
        ops.one_hot(ids, num_classes)
    assert str(info.value).startswith("one_hot: ") and fragment in str(info.value)


X2 = np.zeros((1, 3, 4, 2))


@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "loops"])
@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"padding": ((1, 1),)}, TypeError, "tuple of 2 (before, after) pairs"),
    ({"padding": ((1, -1), (0, 0))}, ValueError, "'padding' must be >= 0"),
    ({"padding": ((3, 0), (0, 0)), "mode": "reflect"}, ValueError,
     "needs padding < the axis size"),
    ({"padding": ((0, 0), (0, 5)), "mode": "circular"}, ValueError,
     "needs padding <= the axis size"),
    ({"padding": 1, "mode": "wrap"}, ValueError, "'mode'"),
    ({"padding": 1, "mode": "reflect", "value": 2.0}, ValueError, "for mode 'constant' only"),
])
def test_pad_refuses_bad_input(module, kwargs, error, fragment):
    with pytest.raises(error) as info:
        module.pad(X2, **kwargs)
    assert str(info.value).startswith("pad: ") and fragment in str(info.value), info.value


def test_pad_allows_the_largest_paddings_torch_allows():
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 2))
    assert ops.pad(x, ((2, 2), (3, 3)), "reflect")[0].shape == (1, 7, 10, 2)
    assert ops.pad(x, ((3, 3), (4, 4)), "circular")[0].shape == (1, 9, 12, 2)


def test_layer_padding_is_in_torchs_last_axis_first_order():
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 2))
    y = L.ZeroPad2D((1, 2, 3, 0)).forward(x, training=False)   # left, right, top, bottom
    np.testing.assert_array_equal(y, ops.pad(x, ((3, 0), (1, 2)))[0])


@pytest.mark.parametrize("make, fragment", [
    (lambda: L.ReflectionPad2D((1, 2)), "a tuple of 4 ints (left, right, top, bottom)"),
    (lambda: L.ReplicationPad1D(-1), "'padding' must be >= 0"),
    (lambda: L.PixelShuffle(0), "'upscale_factor'"),
    (lambda: L.ChannelShuffle("2"), "'groups'"),
])
def test_layers_refuse_bad_config(make, fragment):
    with pytest.raises((TypeError, ValueError)) as info:
        make()
    assert fragment in str(info.value), info.value


def test_padding_layer_refuses_the_wrong_rank():
    with pytest.raises(ValueError, match=r"'x' must be a 4-D array \(N, H, W, C\)"):
        L.CircularPad2D(1).forward(np.zeros((2, 5, 3)))


@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "loops"])
@pytest.mark.parametrize("call, fragment", [
    (lambda m: m.pixel_shuffle(np.zeros((1, 2, 2, 6)), 2), "multiple of upscale_factor**2=4"),
    (lambda m: m.pixel_unshuffle(np.zeros((1, 3, 4, 1)), 2), "multiples of downscale_factor=2"),
    (lambda m: m.channel_shuffle(np.zeros((1, 2, 5)), 2), "multiple of groups=2"),
])
def test_shuffles_refuse_sizes_that_do_not_divide(module, call, fragment):
    with pytest.raises(ValueError) as info:
        call(module)
    assert fragment in str(info.value), info.value


@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "loops"])
@pytest.mark.parametrize("call, fragment", [
    (lambda m: m.fold(np.zeros((1, 19, 12)), (5, 6), 2), "'x' must be (N, 20, C*4)"),
    (lambda m: m.fold(np.zeros((1, 20, 6)), (5, 6), 2), "'x' must be (N, 20, C*4)"),
    (lambda m: m.unfold(np.zeros((1, 5, 6, 2)), 2, padding=-1), "'padding'"),
    (lambda m: m.unfold(np.zeros((1, 5, 6)), 2), "'x' must be a 4-D array (N, H, W, C)"),
])
def test_unfold_and_fold_refuse_bad_input(module, call, fragment):
    with pytest.raises((TypeError, ValueError)) as info:
        call(module)
    assert fragment in str(info.value), info.value


def test_fold_is_the_adjoint_of_unfold():
    """<unfold(x), c> == <x, fold(c)> for overlapping, padded, dilated windows."""
    rng = np.random.default_rng(0)
    window = {"kernel_size": (3, 2), "dilation": (1, 2), "padding": 1, "stride": (2, 1)}
    x = rng.standard_normal((2, 7, 6, 3))
    cols, _ = ops.unfold(x, **window)
    c = rng.standard_normal(cols.shape)
    folded, _ = ops.fold(c, (7, 6), **window)
    scale = np.vdot(np.abs(cols), np.abs(c))
    assert_close(np.vdot(cols, c), np.vdot(x, folded), dtype=np.float64, terms=cols.size,
                 scale=scale, what="<unfold(x), c> vs <x, fold(c)>")


@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "reference"])
def test_unfold_and_fold_take_an_empty_batch(module):
    """N = 0 (torch takes it): empty columns and an empty gradient, not a reshape error."""
    x = np.zeros((0, 5, 6, 2))
    cols, cache = module.unfold(x, 2, padding=1)
    assert cols.shape == (0, 42, 8)
    assert module.unfold_backward(cols, cache).shape == x.shape
    y, cache = module.fold(cols, (5, 6), 2, padding=1)
    assert y.shape == x.shape
    assert module.fold_backward(y, cache).shape == cols.shape
