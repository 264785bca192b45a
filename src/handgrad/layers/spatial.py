"""Spatial transformer layers (no parameters): ``AffineGrid`` turns per-example affine
matrices into sampling grids (:func:`handgrad.ops.affine_grid`) and ``GridSample`` reads an
image at a grid (:func:`handgrad.ops.grid_sample`), so that a spatial transformer is
``GridSample()([image, AffineGrid(image_shape)(theta)])`` in a graph ``Model``, theta
coming from a localization network. torch has no modules for them (only functions), so
they have no torch twin."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import describe, is_int
from .._hyper import flag
from .base import Layer
from .registry import register
from .structure import Merge, _name


def _affine_grid_form(layer, g, v):
    """grid = base (H*W, r+1) MatMul theta^T per example, reshaped to (N, *S, r): the
    opset-17 form of ONNX AffineGrid (opset 20), with the kernel's own base grid."""
    rank = len(layer.image_shape) - 1
    picks = np.zeros((rank + 1, rank, rank + 1))
    picks[np.arange(rank + 1), 0, np.arange(rank + 1)] = 1.0  # grid[k, ..., 0] = base[..., k]
    grid_k, _ = ops.affine_grid(picks, (rank + 1, *layer.image_shape), layer.align_corners)
    base = np.moveaxis(grid_k[..., 0], 0, -1)
    theta_t = g.op("Transpose", [v.name], "theta_t", perm=[0, 2, 1])
    flat = g.op("MatMul", [g.const(base.reshape(-1, rank + 1), "base_grid"), theta_t], "grid")
    shape = layer.output_shape(v.shape)
    grid = g.op("Reshape", [flat, g.ints([-1, *shape])], "grid")
    return g.value(grid, shape, False)


@register
class AffineGrid(Layer):
    """grid (N, *S, r) of theta (N, r, r + 1) (r = 2: S = (H, W); r = 3: S = (D, H, W)),
    as ``F.affine_grid``. ``output_shape``: the per-example shape of the image the grid
    samples, channels-last like handgrad's inputs, (H, W, C) or (D, H, W, C) (torch's
    ``size`` without the batch and with the channels moved last; C does not change the
    grid)."""

    receptive_field = "n/a"
    onnx_form = _affine_grid_form

    def __init__(self, output_shape, align_corners=False, *, name=None, **common):
        super().__init__(name=name, **common)
        if not (isinstance(output_shape, (tuple, list)) and len(output_shape) in (3, 4)
                and all(is_int(s) and s >= 1 for s in output_shape)):
            raise ValueError(f"{self.label}: 'output_shape' must be the per-example image "
                             f"shape (H, W, C) or (D, H, W, C), ints >= 1; received "
                             f"{describe(output_shape)}")
        self.image_shape = tuple(int(s) for s in output_shape)
        self.align_corners = flag(self.label, "align_corners", align_corners)

    def get_config(self):
        return {**super().get_config(), "output_shape": list(self.image_shape),
                "align_corners": self.align_corners}

    def output_shape(self, input_shape):
        rank = len(self.image_shape) - 1
        if tuple(input_shape) != (rank, rank + 1):
            raise ValueError(f"{self.label}: theta must have per-example shape "
                             f"{(rank, rank + 1)} for output_shape {self.image_shape}; "
                             f"received {tuple(input_shape)}")
        return (*self.image_shape[:-1], rank)

    def _build(self, input_shape, rng):
        self.output_shape(input_shape)

    def _forward(self, x, training):
        return ops.affine_grid(x, (x.shape[0], *self.image_shape), self.align_corners)

    def _backward(self, dy, cache):
        return ops.affine_grid_backward(dy, cache), {}


def _grid_sample_form(layer, g, values, out_shapes):
    """ONNX GridSample (opset 16) on the channels-first image and the grid as it is."""
    x, grid = g.channels_first(values[0]), g.channels_last(values[1])
    y = g.op("GridSample", [x.name, grid.name], "grid_sample", mode=layer.mode,
             padding_mode=layer.padding_mode, align_corners=int(layer.align_corners))
    return [g.value(y, out_shapes[0], True)]


@register
class GridSample(Merge):
    """y (N, Ho, Wo, C) of ``[x (N, H, W, C), grid (N, Ho, Wo, 2)]``, as ``F.grid_sample``
    (grid[..., 0] indexes the width); ``mode`` bilinear or nearest, ``padding_mode`` zeros,
    border or reflection. Backward: ``[dx, dgrid]`` (dgrid is 0 for nearest, as torch's)."""

    receptive_field = "n/a"
    onnx_graph_form = _grid_sample_form

    def __init__(self, mode="bilinear", padding_mode="zeros", align_corners=False, *,
                 name=None):
        super().__init__(name=name)
        self.mode, self.padding_mode, self.align_corners = mode, padding_mode, align_corners
        ops.grid_sample(np.zeros((1, 1, 1, 1)), np.zeros((1, 1, 1, 2)), mode, padding_mode,
                        align_corners)  # validates the configuration

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "padding_mode": self.padding_mode,
                "align_corners": self.align_corners}

    def _merged_shape(self, shapes, per_example):
        lead = 0 if per_example else 1
        if len(shapes) != 2:
            raise ValueError(f"{self.label}: takes exactly 2 inputs [x, grid]; received "
                             f"{len(shapes)}")
        x, grid = shapes
        if len(x) != 3 + lead or len(grid) != 3 + lead or grid[-1] != 2 \
                or (lead and x[0] != grid[0]):
            raise ValueError(f"{self.label}: the inputs must be x (N, H, W, C) and grid "
                             f"(N, Ho, Wo, 2); {_name(0, per_example)} has shape {x} and "
                             f"{_name(1, per_example)} has shape {grid}")
        return (*grid[:-1], x[-1])

    def _merge(self, xp, arrays):
        return ops.grid_sample(*arrays, mode=self.mode, padding_mode=self.padding_mode,
                               align_corners=self.align_corners)

    def _split(self, xp, dy, cache):
        return list(ops.grid_sample_backward(dy, cache))
