"""Merge layers (several inputs) and the residual connection.

Merge layers take a list of arrays and return one; ``backward(dy)`` returns a list
of gradients, one per input, in input order::

    Add:          y = x_1 + ... + x_K            dx_i = dy
    Multiply:     y = x_1 * ... * x_K            dx_i = dy * prod_{j != i} x_j

(Add and Multiply broadcast per-example shapes of one rank, sizes equal or 1: dx_i is
then summed over the axes x_i was broadcast along.)
    Concatenate:  y = [x_1, ..., x_K] on axis    dx_i = the slice of dy that x_i filled

Multiply's products without x_i come from prefix and suffix products (no
division, so zeros are fine). ``Residual(block, shortcut)`` is ``y = block(x) +
shortcut(x)`` (identity shortcut when None): dx = dblock(dy) + dshortcut(dy).
"""

from __future__ import annotations

from .._checks import array_module, describe, float_array, is_int, upstream_grad
from . import onnx_forms
from .base import Layer
from .caching import keeps_cache
from .registry import REGISTRY, register


def _name(index, per_example):
    return f"inputs[{index}]" + (" (per example)" if per_example else "")


class Merge(Layer):
    """Base of the merge layers: checks the list of inputs, keeps (shape, dtype) caches."""

    receptive_field = "merge"  # the largest of the inputs' windows

    def __init__(self, *, name=None):
        super().__init__(name=name)

    def get_config(self):
        return {"name": self.name}

    def build(self, input_shape, rng=None, dtype=None):
        """``input_shape`` is the list of per-example input shapes."""
        if not all(isinstance(shape, (tuple, list)) for shape in input_shape):
            raise self._not_sequential()
        shapes = [tuple(int(d) for d in shape) for shape in input_shape]
        self._merged_shape(shapes, per_example=True)
        self.input_shape, self.built = shapes, True
        return self

    def output_shape(self, input_shape):
        return self._merged_shape([tuple(shape) for shape in input_shape], per_example=True)

    def _merged_shape(self, shapes, per_example):
        """Shapes must agree (Concatenate relaxes this); the merged shape."""
        if len(shapes) < 2:
            raise ValueError(f"{self.label}: needs at least 2 inputs; received {len(shapes)}")
        for i, shape in enumerate(shapes[1:], 1):
            if shape != shapes[0]:
                raise ValueError(f"{self.label}: every input must have the shape of "
                                 f"{_name(0, per_example)} {shapes[0]}; "
                                 f"{_name(i, per_example)} has shape {shape}")
        return shapes[0]

    def _arrays(self, inputs):
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"{self.label}: 'inputs' must be a list of arrays; received "
                            f"{describe(inputs)}")
        arrays = [float_array(self.label, f"inputs[{i}]", x) for i, x in enumerate(inputs)]
        for i, x in enumerate(arrays):
            if x.ndim == 0:
                raise ValueError(f"{self.label}: 'inputs[{i}]' must have a batch axis; "
                                 f"received a scalar")
            if x.dtype != arrays[0].dtype:
                raise TypeError(f"{self.label}: 'inputs[{i}]' has dtype {x.dtype} but "
                                f"'inputs[0]' has dtype {arrays[0].dtype}; cast one of them "
                                f"explicitly (no silent casts)")
        self._merged_shape([tuple(x.shape) for x in arrays], per_example=False)
        return arrays

    def forward(self, inputs, training=True, grad=None):
        """y = merge(inputs); ``inputs`` is a list of at least two arrays (N, ...);
        ``grad`` (default: ``training``) keeps the cache for :meth:`backward`."""
        grad = keeps_cache(self.label, training, grad)
        arrays = self._arrays(inputs)
        self.ensure_built([x.shape[1:] for x in arrays])
        y, saved = self._merge(array_module(*arrays), arrays)
        if grad:
            self._caches.append((y.shape, y.dtype, saved))
        return y

    def graph_build(self, input_shapes, rng, dtype):
        self.build(input_shapes, rng=rng, dtype=dtype)

    def graph_forward(self, inputs, training):
        return self.forward(list(inputs), training=training)

    def graph_backward(self, dy, input_grad=True):
        return list(self.backward(dy))

    def _not_sequential(self):
        return TypeError(f"{self.label}: a merge layer takes a list of arrays (and builds "
                         f"from a list of shapes), so it cannot be a step of Sequential")

    def _forward(self, x, training):
        raise self._not_sequential()

    def _backward(self, dy, cache):
        shape, dtype, saved = cache
        dy = upstream_grad(self.label, dy, shape, dtype)
        return self._split(array_module(dy), dy, saved), {}


def _fold(xp, combine, arrays):
    """A new array of the inputs' broadcast shape: the first input combined in place with
    each next one (``combine(y, x, out=y)``: xp.add, xp.multiply)."""
    shape = xp.broadcast_shapes(*(x.shape for x in arrays))
    y = xp.array(xp.broadcast_to(arrays[0], shape))
    for x in arrays[1:]:
        combine(y, x, out=y)
    return y


def _reduced(xp, grad, shape):
    """``grad`` summed over the axes that ``shape`` broadcast along (size 1 there), a new
    array of ``shape``."""
    axes = tuple(a for a, (n, d) in enumerate(zip(shape, grad.shape)) if n == 1 and d != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad.copy()


class BroadcastMerge(Merge):
    """Add and Multiply: per-example shapes of one rank that broadcast (a (1, 1, C) gate
    times an (H, W, C) map); the gradient of a broadcast input is summed over the axes it
    was broadcast along."""

    def _merged_shape(self, shapes, per_example):
        if len(shapes) < 2:
            raise ValueError(f"{self.label}: needs at least 2 inputs; received {len(shapes)}")
        lead = 0 if per_example else 1  # the batch axis must agree, not broadcast
        merged = shapes[0]
        for i, shape in enumerate(shapes[1:], 1):
            if len(shape) != len(merged) or shape[:lead] != merged[:lead] or any(
                    a != b and 1 not in (a, b) for a, b in zip(shape[lead:], merged[lead:])):
                raise ValueError(
                    f"{self.label}: the inputs' shapes must broadcast (one rank, sizes equal "
                    f"or 1{'' if per_example else ', the same batch size'}): "
                    f"{_name(i, per_example)} has shape {shape}, the inputs before it "
                    f"merge to {merged}")
            merged = tuple(b if a == 1 else a for a, b in zip(merged, shape))
        return merged


@register
class Add(BroadcastMerge):
    """y = sum of the inputs (shapes that broadcast); backward: dy (a copy) for each input,
    summed over its broadcast axes."""

    onnx_graph_form = onnx_forms.add

    def _merge(self, xp, arrays):
        return _fold(xp, xp.add, arrays), [x.shape for x in arrays]

    def _split(self, xp, dy, shapes):
        return [_reduced(xp, dy, shape) for shape in shapes]


@register
class Multiply(BroadcastMerge):
    """y = elementwise product of the inputs (shapes that broadcast); dx_i = dy *
    prod_{j != i} x_j, summed over x_i's broadcast axes."""

    onnx_graph_form = onnx_forms.multiply

    def _merge(self, xp, arrays):
        return _fold(xp, xp.multiply, arrays), arrays

    def _split(self, xp, dy, arrays):
        grads = self._products(dy, arrays)
        return [_reduced(xp, g, x.shape) if g.shape != x.shape else g
                for g, x in zip(grads, arrays)]

    def _products(self, dy, arrays):
        # before[i] = x_0 * ... * x_{i-1} (times dy); multiplied by x_{i+1} * ... * x_{K-1}
        grads = [dy]
        for x in arrays[:-1]:
            grads.append(grads[-1] * x)
        after = None
        for i in range(len(arrays) - 1, -1, -1):
            if after is not None:
                grads[i] = grads[i] * after
            after = arrays[i] if after is None else after * arrays[i]
        return [g.copy() if g is dy else g for g in grads]


@register
class Concatenate(Merge):
    """y = the inputs joined along ``axis`` (not the batch axis); dx_i = dy's slice."""

    onnx_graph_form = onnx_forms.concatenate

    @property
    def receptive_field(self):
        """Along the channel axis the inputs' windows merge; along another axis no
        single window."""
        rank = len(self.input_shape[0]) + 1 if self.built else 0  # with the batch axis
        return "merge" if rank and self.axis % rank == rank - 1 else "n/a"

    def __init__(self, axis=-1, *, name=None):
        super().__init__(name=name)
        if not is_int(axis):
            raise TypeError(f"Concatenate: 'axis' must be an int; received {describe(axis)}")
        if axis == 0:
            raise ValueError("Concatenate: 'axis' must not be 0, the batch axis; received 0")
        self.axis = int(axis)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}

    def _merged_shape(self, shapes, per_example):
        if len(shapes) < 2:
            raise ValueError(f"{self.label}: needs at least 2 inputs; received {len(shapes)}")
        rank = len(shapes[0]) + (1 if per_example else 0)  # counting the batch axis
        if not -rank <= self.axis < rank or self.axis % rank == 0:
            raise ValueError(f"{self.label}: 'axis' {self.axis} is not a non-batch axis of "
                             f"{rank}-D inputs")
        axis = self.axis % rank - (1 if per_example else 0)
        for i, shape in enumerate(shapes):
            if len(shape) != len(shapes[0]) or any(
                    a != b for j, (a, b) in enumerate(zip(shape, shapes[0])) if j != axis):
                raise ValueError(f"{self.label}: inputs must match except along axis "
                                 f"{self.axis}; {_name(0, per_example)} has shape {shapes[0]} "
                                 f"and {_name(i, per_example)} has shape {shape}")
        return (*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1:])

    def _merge(self, xp, arrays):
        return xp.concatenate(arrays, axis=self.axis), [x.shape[self.axis] for x in arrays]

    def _split(self, xp, dy, sizes):
        axis = self.axis % dy.ndim
        grads, start = [], 0
        for size in sizes:
            index = (slice(None),) * axis + (slice(start, start + size),)
            grads.append(dy[index].copy())
            start += size
        return grads


def layer_entry(layer):
    """A nested layer's saved form: ``{"class": <registered name>, "config": ...}``."""
    return {"class": type(layer).__name__, "config": layer.get_config()}


def layer_from_entry(owner, role, entry):
    """The layer a :func:`layer_entry` describes (``role``: the config key, for errors)."""
    if not isinstance(entry, dict) or entry.get("class") not in REGISTRY:
        raise ValueError(f"{owner}.from_config: '{role}' must be {{'class': <a registered "
                         f"layer>, 'config': ...}}; received {entry!r}")
    return REGISTRY[entry["class"]].from_config(entry["config"])


@register
class Residual(Layer):
    """y = block(x) + shortcut(x); the shortcut is the identity when None.

    ``block`` and ``shortcut`` are layers (a ``Sequential`` for several steps) and are
    the residual's :meth:`children`: ``named_parameters``, ``named_gradients`` and
    ``named_buffers`` give their arrays as ``"block.<key>"`` and ``"shortcut.<key>"``
    (the same arrays, so optimizers update the children).
    backward: dx = block.backward(dy) + shortcut.backward(dy) (or + dy).
    """

    def __init__(self, block, shortcut=None, *, name=None, trainable=True, dtype=None,
                 seed=None):
        for role, child in (("block", block), ("shortcut", shortcut)):
            if not (isinstance(child, Layer) or (role == "shortcut" and child is None)):
                expected = "a handgrad Layer" + (" or None" if role == "shortcut" else "")
                raise TypeError(f"Residual: '{role}' must be {expected}; received "
                                f"{describe(child)}")
        if shortcut is block:
            raise ValueError("Residual: 'block' and 'shortcut' must be different layers")
        self.block, self.shortcut = block, shortcut
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)

    def children(self):
        yield "block", self.block
        if self.shortcut is not None:
            yield "shortcut", self.shortcut

    # ------------------------------------------------- declarations: branches that add
    def torch_walk(self, walker, layouts):
        """Torch interop: each branch starts from the input's layout; the block's goes on."""
        states = [dict(layouts[0]) for _ in self.children()]
        for (name, child), state in zip(self.children(), states):
            walker.child(name, child, state)
        return states[:1]

    def onnx_form(self, g, v):
        """Both branches, then Add (in the block's layout)."""
        block = g.convert(self.block, v)
        short = v if self.shortcut is None else g.convert(self.shortcut, v)
        short = g.channels_first(short) if block.first else g.channels_last(short)
        return g.value(g.op("Add", [block.name, short.name], "residual"), block.shape,
                       block.first, block.ids)

    def field_walk(self, fields, given):
        """The largest window of the branches (the identity shortcut keeps the input's)."""
        branches = [fields.after(child, given[0]) for _, child in self.children()]
        return [fields.merge(branches + ([given[0]] if self.shortcut is None else []))]

    # ----------------------------------------------------------------- config
    def get_config(self):
        config = super().get_config()
        for role, child in (("block", self.block), ("shortcut", self.shortcut)):
            config[role] = None if child is None else layer_entry(child)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for role in ("block", "shortcut"):
            if config.get(role) is not None:
                config[role] = layer_from_entry(cls.__name__, role, config[role])
        return cls(**config)

    # ------------------------------------------------------------------ build
    def _build(self, input_shape, rng):
        for _, child in self.children():
            if not child.built:
                child.build(input_shape, rng=rng, dtype=self.dtype)
        self._merged_shape(input_shape)

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return self._merged_shape(input_shape)

    def _merged_shape(self, input_shape):
        """The block's per-example output shape, checked against the shortcut's."""
        block = tuple(self.block.output_shape(input_shape))
        short = tuple(input_shape) if self.shortcut is None else tuple(
            self.shortcut.output_shape(input_shape))
        if block != short:
            raise ValueError(f"{self.label}: the block maps per-example shape "
                             f"{tuple(input_shape)} to {block} but the shortcut gives {short}; "
                             f"the two must match (use a shortcut such as a 1x1 convolution)")
        return block

    # ------------------------------------------------------- forward/backward
    def _forward(self, x, training):
        y = self.block.forward(x, training=training)
        short = x if self.shortcut is None else self.shortcut.forward(x, training=training)
        if y.shape != short.shape:
            raise ValueError(f"{self.label}: the block gives shape {tuple(y.shape)} but the "
                             f"shortcut gives {tuple(short.shape)}; they must match")
        return y + short, (y.shape, y.dtype)

    def _backward(self, dy, cache):
        shape, dtype = cache
        dy = upstream_grad(self.label, dy, shape, dtype)
        dx = self.block.backward(dy)
        return dx + (dy if self.shortcut is None else self.shortcut.backward(dy)), {}
