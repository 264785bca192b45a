"""Keras's wrappers: ``Bidirectional`` over a recurrent layer and ``TimeDistributed``.

``Bidirectional(layer, merge_mode="concat")``: ``forward_layer`` (the given RNN, GRU or
LSTM) reads the sequence in order, ``backward_layer`` (a copy of its config with its own
weights) reads it reversed, its output sequence reversed back; the two are merged::

    concat: y = [y_f, y_b] (last axis)     dy_f, dy_b = the two halves of dy
    sum:    y = y_f + y_b                  dy_f = dy_b = dy
    ave:    y = (y_f + y_b) / 2            dy_f = dy_b = dy / 2
    mul:    y = y_f * y_b                  dy_f = dy * y_b, dy_b = dy * y_f
    None:   [y_f, y_b] (two outputs)

    dx = forward_layer.backward(dy_f) + reverse(backward_layer.backward(reverse(dy_b)))

With ``lengths`` (or a mask, :mod:`.masking`) each sequence is reversed within its
length, so the backward direction starts at its last valid step (torch's
``bidirectional=True`` on packed sequences). With ``return_sequences=False`` y_f is the
output at each sequence's last step and y_b the backward direction's at t = 0.

``TimeDistributed(layer)``: (N, T, *S) -> (N, T, *S'), ``layer`` applied to every step by
folding T into the batch, (N*T, *S); backward unfolds dy the same way.
"""

from __future__ import annotations

from .._checks import array_module, describe, float_array, upstream_grad
from ..ops import check_lengths
from .base import Layer
from .caching import forward_scope, keeps_cache
from .masking import mask_lengths
from .recurrent import Recurrent
from .registry import register
from .structure import layer_entry, layer_from_entry

MERGE_MODES = ("concat", "sum", "mul", "ave", None)


def _reverse_index(xp, lengths, batch, steps):
    """(N, T, 1) time indices reversing each sequence within its length (the padded
    steps stay in place); a permutation that is its own inverse."""
    t = xp.arange(steps)[None, :]
    ends = xp.full((batch, 1), steps) if lengths is None else xp.asarray(lengths)[:, None]
    return xp.where(t < ends, ends - 1 - t, t)[..., None]


class Wrapper(Layer):
    """A layer around a child layer (a container): config ``{"layer": entry}``; the
    wrapper computes in its child's dtype."""

    def __init__(self, layer, *, name=None, trainable=True, dtype=None, seed=None):
        if not isinstance(layer, Layer):
            raise TypeError(f"{type(self).__name__}: 'layer' must be a handgrad Layer; "
                            f"received {describe(layer)}")
        self._child = layer
        self._wrap(layer)  # the children are set before Layer.__init__ (see children())
        super().__init__(name=name, trainable=trainable, dtype=dtype or layer.dtype,
                         seed=seed)

    def _wrap(self, layer):
        """Check ``layer`` and set the children."""

    def get_config(self):
        return {**super().get_config(), "layer": layer_entry(self._child)}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "layer": layer_from_entry(cls.__name__, "layer",
                                                          config.get("layer"))})


@register
class Bidirectional(Wrapper):
    """Keras's ``Bidirectional(layer, merge_mode="concat")`` over an RNN, GRU or LSTM. See
    the module docstring."""

    receptive_field = "whole"

    def __init__(self, layer, merge_mode="concat", **common):
        if merge_mode not in MERGE_MODES or not isinstance(merge_mode, (str, type(None))):
            raise ValueError(f"Bidirectional: 'merge_mode' must be one of 'concat', 'sum', "
                             f"'mul', 'ave' or None; received {describe(merge_mode)}")
        self.merge_mode = merge_mode
        super().__init__(layer, **common)

    def _wrap(self, layer):
        if not isinstance(layer, Recurrent):
            raise TypeError(f"Bidirectional: 'layer' must be a handgrad RNN, GRU or LSTM; "
                            f"received {describe(layer)}")
        if layer.bidirectional or layer.return_state:
            raise ValueError(f"Bidirectional: 'layer' must read one direction and return no "
                             f"state (the wrapper makes the reversed copy); received "
                             f"{layer.label} with bidirectional={layer.bidirectional}, "
                             f"return_state={layer.return_state}")
        config = {k: v for k, v in layer.get_config().items() if k != "seed"}
        config["name"] = None if layer.name is None else f"{layer.name}_backward"
        self.forward_layer = layer
        self.backward_layer = type(layer).from_config(config)

    def children(self):
        yield "forward_layer", self.forward_layer
        yield "backward_layer", self.backward_layer

    def get_config(self):
        return {**super().get_config(), "merge_mode": self.merge_mode}

    def _build(self, input_shape, rng):
        for _, child in self.children():
            if not child.built:
                child.build(input_shape, rng=rng, dtype=self.dtype)

    def output_shape(self, input_shape):
        if self.merge_mode is None:
            raise ValueError(f"{self.label}: with merge_mode=None it has two outputs [y_f, "
                             f"y_b], so it cannot be a step of a chain (Sequential); call it "
                             f"in a graph handgrad.Model")
        shape = self.forward_layer.output_shape(input_shape)
        return (*shape[:-1], 2 * shape[-1]) if self.merge_mode == "concat" else shape

    def forward(self, x, training=True, lengths=None, grad=None):
        """(N, T, F) -> the merged outputs (see the module docstring); ``lengths``: (N,)
        ints in [1, T] or None."""
        grad = keeps_cache(self.label, training, grad)
        x = float_array(self.label, "x", x, 3, "(N, T, F)")
        self.ensure_built(x.shape[1:])
        with forward_scope(self, grad):
            y, cache = self._run(x, training, lengths)
        if grad:
            self._caches.append(cache)
        return y

    def _forward(self, x, training):
        return self._run(x, training, None)

    def forward_masked(self, x, mask, training):
        """The forward with ``lengths`` read from a mask (N, T) (see :mod:`.masking`)."""
        return self.forward(x, training, lengths=mask_lengths(self.label, mask, *x.shape[:2]))

    def _run(self, x, training, lengths):
        xp = array_module(x)
        lengths = check_lengths(self.label, lengths, x.shape[0], x.shape[1])
        index = _reverse_index(xp, lengths, *x.shape[:2])
        y_f = self.forward_layer.forward(x, training=training, lengths=lengths)
        y_b = self.backward_layer.forward(xp.take_along_axis(x, index, axis=1),
                                          training=training, lengths=lengths)
        sequences = self.forward_layer.return_sequences
        if sequences:
            y_b = xp.take_along_axis(y_b, index, axis=1)
        mode = self.merge_mode
        if mode is None:
            y = (y_f, y_b)
        elif mode == "concat":
            y = xp.concatenate([y_f, y_b], axis=-1)
        elif mode == "mul":
            y = y_f * y_b
        else:
            y = y_f + y_b if mode == "sum" else (y_f + y_b) / 2
        return y, (index, sequences, y_f, y_b)

    def graph_forward(self, inputs, training):
        if len(inputs) != 1:
            raise TypeError(f"{self.label}: takes one input tensor; received {len(inputs)}")
        y = self.forward(inputs[0], training=training)
        return list(y) if self.merge_mode is None else y

    def graph_backward(self, dy, input_grad=True):
        return [self.backward(dy, input_grad=input_grad)]

    def _backward(self, dy, cache):
        index, sequences, y_f, y_b = cache
        mode = self.merge_mode
        if mode is None:
            if not isinstance(dy, (tuple, list)) or len(dy) != 2:
                raise TypeError(f"{self.label}: with merge_mode=None 'dy' must be the pair "
                                f"(dy_f, dy_b); received {describe(dy)}")
            d_f = upstream_grad(self.label, dy[0], y_f.shape, y_f.dtype, "dy[0]")
            d_b = upstream_grad(self.label, dy[1], y_b.shape, y_b.dtype, "dy[1]")
        else:
            merged = (*y_f.shape[:-1], 2 * y_f.shape[-1]) if mode == "concat" else y_f.shape
            dy = upstream_grad(self.label, dy, merged, y_f.dtype)
            if mode == "concat":
                d_f, d_b = dy[..., :y_f.shape[-1]], dy[..., y_f.shape[-1]:]
            elif mode == "mul":
                d_f, d_b = dy * y_b, dy * y_f
            else:
                d_f = d_b = dy if mode == "sum" else dy / 2
        xp = array_module(y_f)
        if sequences:
            d_b = xp.take_along_axis(d_b, index, axis=1)
        dx_b = self.backward_layer.backward(xp.ascontiguousarray(d_b))
        dx = self.forward_layer.backward(xp.ascontiguousarray(d_f))
        # the reversed input's gradient back in time order (the permutation is an involution)
        return dx + xp.take_along_axis(dx_b, index, axis=1), {}


@register
class TimeDistributed(Wrapper):
    """Keras's ``TimeDistributed(layer)``: ``layer`` on every step of (N, T, *S). See the
    module docstring."""

    receptive_field = "n/a"

    def _wrap(self, layer):
        self.layer = layer

    def children(self):
        yield "layer", self.layer

    def _build(self, input_shape, rng):
        if len(input_shape) < 2:
            raise ValueError(f"{self.label}: expects (N, T, ...) inputs with a time axis and "
                             f"the wrapped layer's per-step axes; received per-example shape "
                             f"{tuple(input_shape)}")
        if not self.layer.built:
            self.layer.build(input_shape[1:], rng=rng, dtype=self.dtype)

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return (input_shape[0], *self.layer.output_shape(input_shape[1:]))

    def _forward(self, x, training):
        if x.ndim < 3:
            raise ValueError(f"{self.label}: 'x' must be (N, T, ...) with a time axis; "
                             f"received shape {tuple(x.shape)}")
        batch, steps = x.shape[:2]
        y = self.layer.forward(x.reshape(batch * steps, *x.shape[2:]), training=training)
        y = y.reshape(batch, steps, *y.shape[1:])
        return y, (x.shape, y.shape, y.dtype)

    def _backward(self, dy, cache):
        x_shape, y_shape, dtype = cache
        dy = upstream_grad(self.label, dy, y_shape, dtype)
        dx = self.layer.backward(dy.reshape(-1, *y_shape[2:]))
        return dx.reshape(x_shape), {}
