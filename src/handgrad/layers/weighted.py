"""``WeightedLayer``: the base of the layers with a weight ``W`` and an optional bias
``b`` (Dense, the convolutions), with torch's default initialization unless told, and
Keras's ``kernel_regularizer``, ``bias_regularizer`` and ``activity_regularizer``
(:mod:`handgrad.regularizers`)."""

from __future__ import annotations

from .. import initializers, regularizers
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
    """A layer with a weight ``W``, an optional bias ``b``, an optional fused
    ``activation`` (Keras's names, see :mod:`.fused`) and Keras's regularizers (the
    activity regularizer sees the output after the activation, as Keras's)."""

    def __init__(self, *, bias=True, kernel_initializer="torch_default",
                 bias_initializer="torch_default", activation=None, kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        self._set_activation(activation)
        owner = type(self).__name__
        self.kernel_regularizer = regularizers.get(owner, "kernel_regularizer",
                                                   kernel_regularizer)
        self.bias_regularizer = regularizers.get(owner, "bias_regularizer", bias_regularizer)
        self.activity_regularizer = regularizers.get(owner, "activity_regularizer",
                                                     activity_regularizer)
        self.activity_penalty = 0.0  # of the forwards since the step began (see reset)
        self._activity_outputs = []  # the outputs y of the cached forwards, latest last
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
        for key in ("kernel_regularizer", "bias_regularizer", "activity_regularizer"):
            value = regularizers.serialize(getattr(self, key))
            if value is not None:
                config[key] = value
        return config

    @property
    def parameter_regularizers(self) -> dict:
        """``{parameter key: regularizer}`` of the penalized parameters."""
        pairs = (("W", self.kernel_regularizer), ("b", self.bias_regularizer))
        return {key: reg for key, reg in pairs if reg is not None and key in self.parameters}

    def forward(self, x, training=True, grad=None):
        """The layer's forward; with an ``activity_regularizer``, its penalty of the
        output y / batch size is added to ``activity_penalty`` (and y kept for backward
        when the cache is)."""
        cached = len(self._caches)
        y = super().forward(x, training, grad)
        if self.activity_regularizer is not None:
            self.activity_penalty += self.activity_regularizer(y) / max(y.shape[0], 1)
            del self._activity_outputs[cached:]  # outputs whose caches were dropped
            if len(self._caches) > cached:
                self._activity_outputs.append(y)
        return y

    def backward(self, dy, *, input_grad=True):
        """dL/dx; an ``activity_regularizer`` adds gradient(y) / batch size to ``dy``."""
        if self.activity_regularizer is not None and self._caches:
            del self._activity_outputs[len(self._caches):]
            y = self._activity_outputs.pop()
            dy = dy + self.activity_regularizer.gradient(y) / y.dtype.type(max(y.shape[0], 1))
        return super().backward(dy, input_grad=input_grad)

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
