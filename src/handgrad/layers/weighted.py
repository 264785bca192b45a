"""``WeightedLayer``: the base of the layers with a weight ``W`` and an optional bias
``b`` (Dense, the convolutions), with torch's default initialization unless told."""

from __future__ import annotations

from .. import initializers
from .base import Layer
from .fused import FusedActivation


def _check_initializer(owner, name, value):
    if isinstance(value, str):
        if value != "torch_default":
            try:
                initializers.get(value)
            except ValueError as error:
                raise ValueError(f"{owner}: '{name}' {value!r} is not an initializer "
                                 f"({error})") from None
    elif not callable(value):
        raise TypeError(f"{owner}: '{name}' must be a name or a callable; received {value!r}")
    return value


class WeightedLayer(FusedActivation, Layer):
    """A layer with a weight ``W``, an optional bias ``b`` and an optional fused
    ``activation`` (Keras's names, see :mod:`.fused`)."""

    def __init__(self, *, bias=True, kernel_initializer="torch_default",
                 bias_initializer="torch_default", activation=None, **kwargs):
        super().__init__(**kwargs)
        self._set_activation(activation)
        owner = type(self).__name__
        if not isinstance(bias, bool):
            raise TypeError(f"{owner}: 'bias' must be a bool; received {bias!r}")
        self.use_bias = bias
        self.kernel_initializer = _check_initializer(owner, "kernel_initializer",
                                                     kernel_initializer)
        self.bias_initializer = _check_initializer(owner, "bias_initializer", bias_initializer)

    def get_config(self):
        config = super().get_config()
        config.update(bias=self.use_bias)
        if self.activation is not None:
            config["activation"] = self.activation
        for key in ("kernel_initializer", "bias_initializer"):
            value = getattr(self, key)
            config[key] = initializers.serialize(value, f"the {key} of {self.label}")
        return config

    def build_weights(self, w_shape, out_features, rng):
        self.add_parameter("W", w_shape, self.kernel_initializer, rng)
        if self.use_bias:
            init = self.bias_initializer
            if init == "torch_default":
                init = initializers.torch_default_bias(initializers.fans(w_shape)[0])
            self.add_parameter("b", (out_features,), init, rng)

    @property
    def bias_array(self):
        return self.parameters.get("b")

    def weight_grads(self, dw, db):
        grads = {"W": dw}
        if db is not None:
            grads["b"] = db
        return grads
