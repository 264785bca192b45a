"""FractionalMaxPool2D/3D against torch.nn.FractionalMaxPool2d/3d with the same
``_random_samples`` (values, indices, input gradient), seeded reproducibility, the
regions' formula and the argument errors."""

import numpy as np
import pytest

import handgrad as hg
from handgrad import io, ops
from handgrad import layers as L
from handgrad.testing import assert_close

from tolerances import selection_bounds

CASES = {
    "2d-size": (L.FractionalMaxPool2D, dict(kernel_size=2, output_size=(4, 5)), (2, 10, 11, 3)),
    "2d-ratio-overlap": (L.FractionalMaxPool2D, dict(kernel_size=(3, 2), output_ratio=0.6),
                         (2, 9, 8, 2)),
    "3d-size": (L.FractionalMaxPool3D, dict(kernel_size=2, output_size=(3, 4, 3)),
                (2, 6, 7, 6, 2)),
    "3d-ratio": (L.FractionalMaxPool3D, dict(kernel_size=(2, 3, 2), output_ratio=(0.5, 0.5, 0.6)),
                 (1, 7, 8, 6, 3)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", CASES)
def test_matches_torch_with_the_same_samples(name, dtype):
    torch = pytest.importorskip("torch")
    cls, kwargs, shape = CASES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    samples = rng.random((shape[0], shape[-1], cls.rank)).astype(dtype)
    layer = cls(**kwargs, return_indices=True)
    y, indices = layer.forward(x, samples=samples)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = layer.backward(dy)
    module = getattr(torch.nn, cls.__name__[:-1] + "d")(
        **kwargs, return_indices=True, _random_samples=torch.tensor(samples))
    tx = torch.tensor(np.moveaxis(x, -1, 1).copy(), requires_grad=True)
    ty, ti = module(tx)
    ty.backward(torch.tensor(np.moveaxis(dy, -1, 1).copy()))
    np.testing.assert_array_equal(y, np.moveaxis(ty.detach().numpy(), 1, -1))
    np.testing.assert_array_equal(indices, np.moveaxis(ti.numpy(), 1, -1))
    op = cls.forward_op.__name__
    terms, scale = selection_bounds(op, [x], dy, {**kwargs, "samples": samples})[1]
    assert_close(dx, np.moveaxis(tx.grad.numpy(), 1, -1), dtype=dtype, terms=terms,
                 scale=scale, what="dx")


def test_the_regions_follow_atens_formula():
    """Window starts int((i + u) * alpha) - int(u * alpha), the last at L - k: on an
    increasing input each window's maximum is its last tap, so the indices show them."""
    x = np.arange(10 * 10, dtype=np.float64).reshape(1, 10, 10, 1)
    samples = np.array([[[0.9, 0.1]]])  # torch's order: [0] the width's, [1] the height's
    _, indices, _ = ops.fractional_max_pool2d(x, 2, 4, return_indices=True, samples=samples)
    alpha = 8 / 3

    def starts(u):
        return [int((i + u) * alpha) - int(u * alpha) for i in range(3)] + [8]

    np.testing.assert_array_equal(indices[0, :, 0, 0] // 10, np.add(starts(0.1), 1))
    np.testing.assert_array_equal(indices[0, 0, :, 0] % 10, np.add(starts(0.9), 1))
    assert starts(0.1) != starts(0.9)  # the samples' order matters here


def test_seeded_layers_draw_the_same_regions_and_successive_calls_differ():
    x = np.random.default_rng(0).standard_normal((3, 12, 12, 4))
    a, b = (L.FractionalMaxPool2D(2, output_ratio=0.4, seed=7) for _ in range(2))
    first = a.forward(x)
    np.testing.assert_array_equal(first, b.forward(x))
    draws = [a.forward(x) for _ in range(4)]
    assert any(not np.array_equal(first, d) for d in draws)
    # in a model, the regions follow the model's seed
    models = [hg.Sequential([L.FractionalMaxPool3D(2, (2, 3, 2))], seed=5) for _ in range(2)]
    v = np.random.default_rng(1).standard_normal((2, 5, 6, 5, 3))
    np.testing.assert_array_equal(models[0].forward(v), models[1].forward(v))


def test_save_and_load_keep_config_and_generator(tmp_path):
    layer = L.FractionalMaxPool2D((2, 3), output_size=(3, 4), return_indices=True, seed=2)
    model = hg.Sequential([layer], seed=0)
    x = np.random.default_rng(0).standard_normal((2, 7, 9, 3))
    model.forward(x)
    io.save(model, tmp_path / "m")
    loaded = io.load(tmp_path / "m")
    clone = loaded.layers[0]
    assert clone.kwargs == layer.kwargs and type(clone) is type(layer)
    np.testing.assert_array_equal(layer.forward(x)[0], clone.forward(x)[0])


def test_export_onnx_is_refused_naming_the_layer(tmp_path):
    pytest.importorskip("onnx")
    model = hg.Sequential([L.FractionalMaxPool2D(2, output_size=3, name="frac")], seed=0)
    model.build((6, 6, 2))
    with pytest.raises(ValueError, match=r"FractionalMaxPool2D 'frac'.*no ONNX"):
        io.export_onnx(model, tmp_path / "m.onnx")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(kernel_size=2), ValueError, "exactly one of 'output_size' and 'output_ratio'"),
    (dict(kernel_size=2, output_size=3, output_ratio=0.5), ValueError, "exactly one"),
    (dict(kernel_size=2, output_ratio=1.0), ValueError, r"'output_ratio' must be .* \(0, 1\)"),
    (dict(kernel_size=2, output_ratio=(0.5, 0.0)), ValueError, "'output_ratio'"),
    (dict(kernel_size=0, output_size=3), ValueError, "'kernel_size'"),
    (dict(kernel_size=2, output_size=(3, 3, 3)), TypeError, "'output_size'"),
    (dict(kernel_size=2, output_size=2, return_indices=1), TypeError, "'return_indices'"),
])
def test_bad_config_is_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        L.FractionalMaxPool2D(**kwargs)


def test_bad_inputs_are_refused():
    x = np.zeros((2, 6, 6, 3))
    with pytest.raises(ValueError, match=r"at least 7 .* received input size 6"):
        L.FractionalMaxPool2D(4, output_size=4).forward(x)  # kernel too large
    with pytest.raises(ValueError, match=r"at least 6 \(output \+ kernel, as PyTorch\)"):
        L.FractionalMaxPool3D(2, output_size=4).forward(np.zeros((1, 5, 5, 5, 1)))
    with pytest.raises(ValueError, match="empty output"):
        L.FractionalMaxPool2D(2, output_ratio=0.1).forward(x)
    with pytest.raises(ValueError, match=r"'samples' must have shape \(N, C, 2\)"):
        ops.fractional_max_pool2d(x, 2, 3, samples=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match=r"'samples' must lie in \[0, 1\)"):
        ops.fractional_max_pool2d(x, 2, 3, samples=np.ones((2, 3, 2)))
    with pytest.raises(ValueError, match="not both"):
        ops.fractional_max_pool2d(x, 2, 3, samples=np.zeros((2, 3, 2)), rng=0)
    with pytest.raises(TypeError, match="'rng'"):
        ops.fractional_max_pool2d(x, 2, 3, rng="seed")
