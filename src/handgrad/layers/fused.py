"""``activation=`` of Dense and the convolutions: Keras's activation names resolved to
handgrad's activation ops, fused into the layer's forward and backward.

With ``z`` the layer's affine output, ``y = f(z)`` and ``dz = f'(z) * dy`` (softmax:
its Jacobian-vector product), both from the op's own kernels (``forward_op``,
``backward_op`` of the :class:`~handgrad.layers.Activation` made for the name).
"""

from __future__ import annotations

import difflib

from .._checks import describe
from .registry import REGISTRY

#: Keras's activation names -> handgrad's activation layer class (same function and
#: default hyper-parameters; Keras 3's "hard_sigmoid" is relu6(x + 3) / 6 as torch's)
KERAS_ACTIVATIONS = {
    "linear": "Identity", "relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "Tanh",
    "softmax": "Softmax", "log_softmax": "LogSoftmax", "gelu": "GELU", "swish": "SiLU",
    "silu": "SiLU", "elu": "ELU", "selu": "SELU", "celu": "CELU", "softplus": "Softplus",
    "softsign": "Softsign", "relu6": "ReLU6", "mish": "Mish", "exponential": "Exponential",
    "hard_sigmoid": "HardSigmoid", "hard_silu": "Hardswish", "hard_swish": "Hardswish",
}


def activation_layer(owner, name):
    """The Activation layer for the name ``name`` (None or "linear": none)."""
    if name is None or name == "linear":
        return None
    if not isinstance(name, str):
        raise TypeError(f"{owner}: 'activation' must be a name (e.g. 'relu') or None; "
                        f"received {describe(name)}")
    if name not in KERAS_ACTIVATIONS:
        close = difflib.get_close_matches(name, list(KERAS_ACTIVATIONS), n=3)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"{owner}: unknown activation {name!r}{hint}; accepted: None, "
                         f"{', '.join(sorted(KERAS_ACTIVATIONS))}")
    return REGISTRY[KERAS_ACTIVATIONS[name]]()


class FusedActivation:
    """The mixin: ``activation`` (a name or None) and the fused forward/backward steps
    that a layer's ``_forward``/``_backward`` wrap around its affine kernel."""

    def _set_activation(self, activation):
        self.activation_layer = activation_layer(type(self).__name__, activation)
        self.activation = None if self.activation_layer is None else activation

    def _activate(self, z, cache):
        """``(f(z), cache)`` of the forward's ``(z, cache)``."""
        act = self.activation_layer
        if act is None:
            return z, cache
        y, act_cache = act.forward_op(z, **act.hyper)
        return y, (cache, act_cache)

    def _deactivate(self, dy, cache):
        """``(dz, the affine kernel's cache)``: dz = f'(z) * dy by the op's backward."""
        act = self.activation_layer
        if act is None:
            return dy, cache
        cache, act_cache = cache
        return act.backward_op(dy, act_cache), cache

    def _affine_cache(self, cache):
        """The affine kernel's cache for the second-order pass (none with an activation)."""
        if self.activation_layer is not None:
            raise TypeError(f"{self.label}: has no second-order (double) backward pass with "
                            f"activation={self.activation!r}; use a separate activation "
                            f"layer after it for a gradient penalty")
        return cache

    @property
    def type_label(self):
        name = type(self).__name__
        return name if self.activation is None else f"{name}, {self.activation}"

    def supports_double_backward(self):
        return self.activation_layer is None and super().supports_double_backward()
