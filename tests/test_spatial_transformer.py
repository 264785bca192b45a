"""affine_grid / grid_sample and their layers against torch's F.affine_grid / F.grid_sample
(values and gradients, float32 and float64, every mode), and a small spatial transformer
network (localization Dense -> theta -> AffineGrid -> GridSample) built as a graph Model
against the same network in torch with copied weights; save/load and ONNX export."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

import handgrad as hg
from handgrad import io, ops
from handgrad import layers as L
from handgrad.ops import reference
from handgrad.testing import assert_close

torch = pytest.importorskip("torch")
F = torch.nn.functional

MODES = list(itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"),
                               (False, True)))
DTYPES = (np.float32, np.float64)


def _torch_sample(x, grid, mode, padding_mode, align_corners, dy):
    """torch's y, dx, dgrid on channels-last x (moved for torch and back)."""
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(grid, requires_grad=True)
    y = F.grid_sample(xt.permute(0, 3, 1, 2), gt, mode=mode, padding_mode=padding_mode,
                      align_corners=align_corners).permute(0, 2, 3, 1)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy(), gt.grad.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,padding_mode,align_corners", MODES)
def test_grid_sample_matches_torch(mode, padding_mode, align_corners, dtype):
    """Grids N(0, 1.2): about 40% of the points outside [-1, 1], so zeros read, borders
    clip and reflections fold."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 6, 3)).astype(dtype)
    grid = (1.2 * rng.standard_normal((2, 4, 7, 2))).astype(dtype)
    dy = rng.standard_normal((2, 4, 7, 3)).astype(dtype)
    y, cache = ops.grid_sample(x, grid, mode, padding_mode, align_corners)
    dx, dgrid = ops.grid_sample_backward(dy, cache)
    ty, tdx, tdgrid = _torch_sample(x, grid, mode, padding_mode, align_corners, dy)
    assert y.dtype == dx.dtype == dgrid.dtype == dtype
    scale_x, scale_dy = np.abs(x).max(), np.abs(dy).max()
    assert_close(y, ty, dtype=dtype, terms=4, scale=scale_x, what="y")
    assert_close(dx, tdx, dtype=dtype, terms=4 * 28, scale=scale_dy, what="dx")
    assert_close(dgrid, tdgrid, dtype=dtype, terms=4 * 3, scale=3 * 3 * scale_x * scale_dy,
                 what="dgrid")
    if mode == "nearest":
        assert not dgrid.any()
    else:
        assert np.abs(dgrid).max() > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size,align_corners", [((2, 4, 5, 3), False), ((2, 1, 6, 2), False),
                                                ((2, 3, 2, 4, 1), True),
                                                ((2, 2, 3, 4, 2), False)])
def test_affine_grid_matches_torch(size, align_corners, dtype):
    """``size`` channels-last (N, *S, C) is torch's (N, C, *S); dtheta by torch's autograd."""
    rank = len(size) - 2
    rng = np.random.default_rng(1)
    theta = rng.standard_normal((2, rank, rank + 1)).astype(dtype)
    grid, cache = ops.affine_grid(theta, size, align_corners)
    assert grid.shape == (*size[:-1], rank)
    dgrid = rng.standard_normal(grid.shape).astype(dtype)
    tt = torch.tensor(theta, requires_grad=True)
    expected = F.affine_grid(tt, (size[0], size[-1], *size[1:-1]), align_corners=align_corners)
    expected.backward(torch.tensor(dgrid))
    assert_close(grid, expected.detach().numpy(), dtype=dtype, terms=rank + 1,
                 scale=np.abs(theta).max(), what="grid")
    positions = int(np.prod(size[1:-1]))
    assert_close(ops.affine_grid_backward(dgrid, cache), tt.grad.numpy(), dtype=dtype,
                 terms=positions, scale=np.abs(dgrid).max(), what="dtheta")


def test_bad_arguments_are_named():
    x, grid = np.zeros((1, 3, 3, 2)), np.zeros((1, 2, 2, 2))
    with pytest.raises(ValueError, match="'mode' must be one of 'bilinear', 'nearest'"):
        ops.grid_sample(x, grid, mode="bicubic")
    with pytest.raises(ValueError, match="'padding_mode'"):
        ops.grid_sample(x, grid, padding_mode="circular")
    with pytest.raises(ValueError, match=r"'grid' must be \(N, Ho, Wo, 2\)"):
        ops.grid_sample(x, np.zeros((1, 2, 2, 3)))
    with pytest.raises(TypeError, match="'grid' has dtype float32"):
        ops.grid_sample(x, grid.astype(np.float32))
    for empty in (np.zeros((1, 0, 3, 2)), np.zeros((1, 3, 0, 2))):
        for sample in (ops.grid_sample, reference.grid_sample):
            with pytest.raises(ValueError, match=r"'x' \(N, H, W, C\) must not have an empty "
                               r"spatial axis; received .*" + re.escape(str(empty.shape))):
                sample(empty, grid)
    with pytest.raises(ValueError, match=r"'theta' must have shape \(N, 2, 3\)"):
        ops.affine_grid(np.zeros((1, 3, 3)), (1, 3, 3, 1))
    with pytest.raises(ValueError, match="N = 2"):
        ops.affine_grid(np.zeros((2, 2, 3)), (1, 3, 3, 1))
    with pytest.raises(TypeError, match="'size' must be a tuple of 4 ints"):
        ops.affine_grid(np.zeros((1, 2, 3)), (1, 3, 3))
    with pytest.raises(TypeError, match="'align_corners' must be a bool"):
        L.GridSample(align_corners=1)
    with pytest.raises(ValueError, match="'output_shape' must be the per-example image"):
        L.AffineGrid((4, 5))
    with pytest.raises(ValueError, match=r"theta must have per-example shape \(2, 3\)"):
        L.AffineGrid((4, 5, 1)).build((3, 4))


def _stn(align_corners, mode, padding_mode, dtype="float64"):
    """image (6, 7, 2) -> Flatten -> Dense(6) -> theta (2, 3) -> AffineGrid((4, 5, 2)) ->
    GridSample([image, grid]) -> (4, 5, 2)."""
    image = hg.Input((6, 7, 2), name="image")
    theta = L.Reshape((2, 3), name="theta")(L.Dense(6, name="loc")(L.Flatten()(image)))
    grid = L.AffineGrid((4, 5, 2), align_corners, name="grid")(theta)
    out = L.GridSample(mode, padding_mode, align_corners, name="sample")([image, grid])
    return hg.Model(image, out, seed=0, dtype=dtype)


class TorchSTN(torch.nn.Module):
    def __init__(self, align_corners, mode, padding_mode):
        super().__init__()
        self.loc = torch.nn.Linear(84, 6).double()
        self.kw = {"align_corners": align_corners, "mode": mode, "padding_mode": padding_mode}

    def forward(self, image):  # image (N, H, W, C), flattened channels-last as Flatten does
        theta = self.loc(image.reshape(image.shape[0], -1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, (image.shape[0], 2, 4, 5),
                             align_corners=self.kw["align_corners"])
        return F.grid_sample(image.permute(0, 3, 1, 2), grid, **self.kw).permute(0, 2, 3, 1)


@pytest.mark.parametrize("align_corners,mode,padding_mode", [
    (False, "bilinear", "zeros"), (True, "bilinear", "reflection"), (False, "nearest", "border")])
def test_spatial_transformer_network_matches_torch(align_corners, mode, padding_mode):
    """Forward, the image's gradient (through both the sampling and the localization
    net) and the Dense gradients against torch with copied weights."""
    model = _stn(align_corners, mode, padding_mode)
    rng = np.random.default_rng(2)
    loc = model.get_layer("loc")
    loc.parameters["W"][...] = 0.05 * rng.standard_normal(loc.parameters["W"].shape)
    loc.parameters["b"][...] = [0.9, 0.2, 0.1, -0.3, 1.1, 0.05]
    twin = TorchSTN(align_corners, mode, padding_mode)
    with torch.no_grad():
        twin.loc.weight.copy_(torch.tensor(loc.parameters["W"].T))
        twin.loc.bias.copy_(torch.tensor(loc.parameters["b"]))
    x = rng.standard_normal((3, 6, 7, 2))
    dy = rng.standard_normal((3, 4, 5, 2))
    y = model.forward(x, training=True)
    dx = model.backward(dy)
    xt = torch.tensor(x, requires_grad=True)
    yt = twin(xt)
    yt.backward(torch.tensor(dy))
    scale = np.abs(x).max() * np.abs(dy).max()
    assert_close(y, yt.detach().numpy(), dtype=np.float64, terms=4, what="y")
    assert_close(dx, xt.grad.numpy(), dtype=np.float64, terms=84 * 20, scale=scale * 100,
                 what="dx")
    assert_close(loc.gradients["W"], twin.loc.weight.grad.numpy().T, dtype=np.float64,
                 terms=3 * 20 * 4, scale=scale * 100, what="dW")
    assert_close(loc.gradients["b"], twin.loc.bias.grad.numpy(), dtype=np.float64,
                 terms=3 * 20 * 4, scale=scale * 100, what="db")
    if mode == "bilinear":  # the localization net gets a gradient through the grid
        assert np.abs(loc.gradients["W"]).max() > 0


def test_grid_sample_layer_gradients_config_and_save_load(tmp_path):
    image, grid = hg.Input((5, 4, 3), name="image"), hg.Input((3, 6, 2), name="grid")
    out = L.GridSample("bilinear", "border", True, name="sample")([image, grid])
    model = hg.Model([image, grid], out, seed=0, dtype="float64")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 5, 4, 3)), 1.3 * rng.standard_normal((2, 3, 6, 2))]
    dy = rng.standard_normal((2, 3, 6, 3))
    model.forward(xs, training=True)
    dxs = model.backward(dy)
    expected = _torch_sample(*xs, "bilinear", "border", True, dy)
    for ours, theirs, what in zip(dxs, expected[1:], ("dx", "dgrid")):
        assert_close(ours, theirs, dtype=np.float64, terms=4 * 18,
                     scale=9 * np.abs(xs[0]).max() * np.abs(dy).max(), what=what)
    layer = model.get_layer("sample")
    clone = L.GridSample.from_config(json.loads(json.dumps(layer.get_config())))
    assert clone.get_config() == layer.get_config()
    io.save(model, tmp_path / "m.hg")
    loaded = io.load(tmp_path / "m.hg")
    np.testing.assert_array_equal(loaded.predict(xs), model.predict(xs))
    assert loaded.get_layer("sample").padding_mode == "border"


def test_spatial_transformer_exports_to_onnx(tmp_path):
    """AffineGrid exports as a MatMul of its base grid (opset 17 has no AffineGrid) and
    GridSample as GridSample-16, whose modes onnx's reference spells as opset 20 does (and
    whose coordinates it computes in float32: the model is float32)."""
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops.op_grid_sample import GridSample as _RefGridSample

    class GridSample(_RefGridSample):
        op_domain = ""

        def _run(self, X, grid, mode=None, padding_mode=None, align_corners=None):
            mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
            return super()._run(X, grid, mode, padding_mode, align_corners)

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 7, 2)).astype(np.float32)
    for mode, padding_mode, align_corners in MODES:
        model = _stn(align_corners, mode, padding_mode, "float32")
        loc = model.get_layer("loc")
        loc.parameters["b"][...] = [1.3, 0.2, 0.1, -0.3, 1.4, 0.05]
        proto = io.export_onnx(model, None)
        onnx.checker.check_model(proto, full_check=True)
        assert [n.op_type for n in proto.graph.node].count("GridSample") == 1
        feeds = {proto.graph.input[0].name: x}
        got = ReferenceEvaluator(proto, new_ops=[GridSample]).run(None, feeds)[0]
        expected = model.predict(x)
        assert np.abs(expected).max() > 0
        # the coordinates (up to ~10 pixels) round in float32, each pixel step moving the
        # output by up to 2 max|x|
        assert_close(got, expected, dtype=np.float32, terms=84 * 4,
                     scale=20 * np.abs(x).max(), what=f"{mode}-{padding_mode}")
