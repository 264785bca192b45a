"""Keras's class names as aliases of handgrad's layers, with Keras's defaults.

Each alias is a registered subclass: a saved config names the class it was made under
(``"MaxPooling2D"``) and loads back as that class. The aliases take Keras's argument
names and handgrad's (:mod:`.keras_args`), and use Keras's defaults where they differ:

- ``MaxPooling1D/2D/3D``, ``AveragePooling1D/2D/3D``: ``pool_size=2``;
- ``BatchNormalization``: Keras's ``momentum=0.99``, the weight of the *old* value
  (``running = momentum * running + (1 - momentum) * batch``), stored as handgrad's
  (torch's) ``1 - momentum``; ``epsilon=1e-3``;
- ``LayerNormalization``: ``epsilon=1e-3`` (over the last axis, as both);
- ``Conv1DTranspose/2D/3D``: Keras's zero bias initializer;
- ``UpSampling1D/2D/3D``: ``size=2`` (an int or one per axis), ``interpolation``
  "nearest" (2-D also "bilinear", Keras's half-pixel form);
- ``ZeroPadding1D/2D/3D``: ``padding=1``, an int, one int per axis (both sides) or
  Keras's pairs ``((top, bottom), (left, right))`` (first spatial axis first);
- ``GlobalAveragePooling*``, ``GlobalMaxPooling*``, ``SpatialDropout1D/2D/3D``: names.
"""

from __future__ import annotations

from .._checks import describe, is_int
from .._hyper import number
from . import pooling
from .conv import ConvTranspose1D, ConvTranspose2D, ConvTranspose3D
from .dropout import Dropout1D, Dropout2D, Dropout3D
from .normalization import BatchNorm, LayerNorm
from .padding import ZeroPad1D, ZeroPad2D, ZeroPad3D
from .registry import register
from .resample import Upsample

_POOL = {"kernel_size": 2}
_BIAS = {"bias_initializer": "zeros"}


def _alias(name, base, defaults=None, doc=None):
    """Register the subclass ``name`` of ``base`` with Keras's ``defaults``."""
    namespace = {"__module__": __name__, "__qualname__": name, "keras_defaults": defaults or {},
                 "__doc__": doc or f"Keras's name of :class:`{base.__name__}`."}
    return register(type(name, (base,), namespace))


# One line per alias, so that each name is defined (and registered) where it is read.
MaxPooling1D = _alias("MaxPooling1D", pooling.MaxPool1D, _POOL)
MaxPooling2D = _alias("MaxPooling2D", pooling.MaxPool2D, _POOL)
MaxPooling3D = _alias("MaxPooling3D", pooling.MaxPool3D, _POOL)
AveragePooling1D = _alias("AveragePooling1D", pooling.AvgPool1D, _POOL)
AveragePooling2D = _alias("AveragePooling2D", pooling.AvgPool2D, _POOL)
AveragePooling3D = _alias("AveragePooling3D", pooling.AvgPool3D, _POOL)
GlobalAveragePooling1D = _alias("GlobalAveragePooling1D", pooling.GlobalAvgPool1D)
GlobalAveragePooling2D = _alias("GlobalAveragePooling2D", pooling.GlobalAvgPool2D)
GlobalAveragePooling3D = _alias("GlobalAveragePooling3D", pooling.GlobalAvgPool3D)
GlobalMaxPooling1D = _alias("GlobalMaxPooling1D", pooling.GlobalMaxPool1D)
GlobalMaxPooling2D = _alias("GlobalMaxPooling2D", pooling.GlobalMaxPool2D)
GlobalMaxPooling3D = _alias("GlobalMaxPooling3D", pooling.GlobalMaxPool3D)
Conv1DTranspose = _alias("Conv1DTranspose", ConvTranspose1D, _BIAS)
Conv2DTranspose = _alias("Conv2DTranspose", ConvTranspose2D, _BIAS)
Conv3DTranspose = _alias("Conv3DTranspose", ConvTranspose3D, _BIAS)
SpatialDropout1D = _alias("SpatialDropout1D", Dropout1D)
SpatialDropout2D = _alias("SpatialDropout2D", Dropout2D)
SpatialDropout3D = _alias("SpatialDropout3D", Dropout3D)
LayerNormalization = _alias("LayerNormalization", LayerNorm, {"eps": 1e-3})


@register
class BatchNormalization(BatchNorm):
    """Keras's BatchNormalization: ``momentum`` is Keras's (the weight of the running
    value, default 0.99), kept as handgrad's ``1 - momentum``; ``eps`` (``epsilon``)
    defaults to Keras's 1e-3."""

    torch_momentum_warning = False

    def __init__(self, momentum=0.99, eps=1e-3, affine=True, track_running_stats=True,
                 **kwargs):
        momentum = number(type(self).__name__, "momentum", momentum, low=0.0, high=1.0)
        super().__init__(1.0 - momentum, eps, affine, track_running_stats, **kwargs)
        self.keras_momentum = momentum

    def get_config(self):
        return {**super().get_config(), "momentum": self.keras_momentum}


def _per_axis(owner, name, value, rank):
    """An int or ``rank`` values, as a tuple of ``rank``."""
    if is_int(value) or isinstance(value, float):
        return (value,) * rank
    if isinstance(value, (tuple, list)) and len(value) == rank:
        return tuple(value)
    raise TypeError(f"{owner}: '{name}' must be a number or {rank} of them; received "
                    f"{describe(value)}")


class UpSampling(Upsample):
    """Keras's UpSampling: the spatial axes repeated ``size`` times (nearest), or with
    ``interpolation="bilinear"`` (2-D) resized bilinearly with half-pixel centers."""

    rank = 2
    interpolations = ("nearest",)

    def __init__(self, size=2, interpolation="nearest", *, name=None, **common):
        owner = type(self).__name__
        if interpolation not in self.interpolations:
            raise ValueError(f"{owner}: 'interpolation' must be one of "
                             f"{list(self.interpolations)}; received {describe(interpolation)}")
        self.keras_size = _per_axis(owner, "size", size, self.rank)
        super().__init__(scale_factor=self.keras_size, mode=interpolation, name=name, **common)

    def get_config(self):
        config = {k: v for k, v in super().get_config().items() if k not in self.kwargs}
        return {**config, "size": list(self.keras_size), "interpolation": self.kwargs["mode"]}


@register
class UpSampling1D(UpSampling):
    """Keras's UpSampling1D: ``size`` repeats of each step."""

    rank = 1


@register
class UpSampling2D(UpSampling):
    """Keras's UpSampling2D: nearest or bilinear (half-pixel centers)."""

    rank = 2
    interpolations = ("nearest", "bilinear")


@register
class UpSampling3D(UpSampling):
    """Keras's UpSampling3D: ``size`` repeats along each spatial axis."""

    rank = 3


def torch_padding(owner, padding, rank):
    """Keras's padding (an int, one int per axis, or one (before, after) pair per axis,
    first spatial axis first) as torch's flat tuple (last axis first)."""
    if is_int(padding):
        return int(padding)
    if rank == 1 and isinstance(padding, (tuple, list)) and len(padding) == 2:
        padding = [padding]  # Keras's ZeroPadding1D((left, right))
    if isinstance(padding, (tuple, list)) and len(padding) == rank:
        pairs = [(p, p) if is_int(p) else tuple(p) if isinstance(p, (tuple, list)) else None
                 for p in padding]
        if all(p is not None and len(p) == 2 and all(is_int(v) for v in p) for p in pairs):
            return tuple(int(v) for pair in reversed(pairs) for v in pair)
    raise TypeError(f"{owner}: 'padding' must be an int, {rank} ints or {rank} "
                    f"(before, after) pairs (Keras's order, first spatial axis first); "
                    f"received {describe(padding)}")


class ZeroPadding:
    """Keras's ZeroPadding (see the module docstring for ``padding``)."""

    def __init__(self, padding=1, *, name=None, **common):
        self.keras_padding = padding
        super().__init__(torch_padding(type(self).__name__, padding, self.rank), name=name,
                         **common)

    def get_config(self):
        return {**super().get_config(), "padding": _lists(self.keras_padding)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


@register
class ZeroPadding1D(ZeroPadding, ZeroPad1D):
    """Keras's ZeroPadding1D (``padding`` as Keras spells it)."""


@register
class ZeroPadding2D(ZeroPadding, ZeroPad2D):
    """Keras's ZeroPadding2D (``padding`` as Keras spells it)."""


@register
class ZeroPadding3D(ZeroPadding, ZeroPad3D):
    """Keras's ZeroPadding3D (``padding`` as Keras spells it)."""


__all__ = ["AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "BatchNormalization",
           "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose", "GlobalAveragePooling1D",
           "GlobalAveragePooling2D", "GlobalAveragePooling3D", "GlobalMaxPooling1D",
           "GlobalMaxPooling2D", "GlobalMaxPooling3D", "LayerNormalization", "MaxPooling1D",
           "MaxPooling2D", "MaxPooling3D", "SpatialDropout1D", "SpatialDropout2D",
           "SpatialDropout3D", "UpSampling1D", "UpSampling2D", "UpSampling3D", "ZeroPadding1D",
           "ZeroPadding2D", "ZeroPadding3D"]
