"""Pooling samples and torch counterparts (torch's pooling takes symmetric int padding
only: other forms raise NotImplementedError)."""

from __future__ import annotations

from ..declare import Sample
from . import channels_first, channels_last
from .conv import native_padding


def torch_pool(kind):
    """The counterpart of ``<kind>_pool{1,2,3}d``: ``F.<kind>_pool{1,2,3}d`` on moved channels
    (an average counts the padding unless told, as PyTorch does for numeric padding)."""

    def counterpart(F, x, kernel_size, stride=None, padding=0, **kwargs):
        if not native_padding(padding):
            raise NotImplementedError(f"torch pooling takes no padding={padding!r}")
        if kwargs.get("count_include_pad", False) is None:
            kwargs["count_include_pad"] = True
        fn = getattr(F, f"{kind}_pool{x.ndim - 2}d")
        return channels_last(fn(channels_first(x), kernel_size, stride, padding, **kwargs))

    counterpart.__name__ = f"torch_{kind}_pool"
    return counterpart


def torch_global_avg_pool(F, x, keepdims=False):
    """The mean over the spatial axes."""
    return x.mean(dim=tuple(range(1, x.ndim - 1)), keepdim=keepdims)


def torch_global_max_pool(F, x, keepdims=False):
    """``F.adaptive_max_pool{1,2,3}d`` to one position (its gradient goes to one maximum)."""
    y = channels_last(getattr(F, f"adaptive_max_pool{x.ndim - 2}d")(channels_first(x), 1))
    return y if keepdims else y.reshape(y.shape[0], y.shape[-1])


MAX_POOL2D = (
    Sample(((2, 6, 6, 3),), {"kernel_size": 2}),
    Sample(((2, 7, 7, 2),), {"kernel_size": 3, "stride": 2, "padding": 1}, negative=True),
    Sample(((2, 6, 7, 2),), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    Sample(((2, 7, 8, 2),), {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1,
                             "dilation": (2, 1), "ceil_mode": True}, negative=True),
    Sample(((2, 6, 6, 3),), {"kernel_size": 2}, ties=True),
    Sample(((2, 7, 7, 3),), {"kernel_size": 3, "stride": 1, "padding": 1}, ties=True),
    Sample(((1, 4, 5, 2),), {"kernel_size": (6, 7), "padding": 1},
           negative=True),  # kernel as large as the padded input
    Sample(((2, 5, 6, 2),), {"kernel_size": 3, "stride": 2, "padding": "same"}, negative=True),
)
MAX_POOL1D = (
    Sample(((2, 9, 3),), {"kernel_size": 2}),
    Sample(((2, 9, 2),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
           negative=True),
    Sample(((2, 10, 2),), {"kernel_size": 3, "dilation": 2, "padding": 1}, ties=True),
)
AVG_POOL2D = (
    Sample(((2, 6, 6, 3),), {"kernel_size": 2}),
    Sample(((2, 7, 7, 2),), {"kernel_size": 3, "stride": 2, "padding": 1}),
    Sample(((2, 7, 6, 2),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                             "count_include_pad": False}),
    Sample(((2, 6, 7, 2),), {"kernel_size": (2, 3), "stride": (2, 1), "padding": (1, 1),
                             "ceil_mode": True}),
    Sample(((1, 5, 5, 2),), {"kernel_size": 3, "stride": 2, "padding": 1,
                             "divisor_override": 4}),
    Sample(((1, 3, 4, 2),), {"kernel_size": (5, 6), "padding": (1, 1)}, negative=True),
)
AVG_POOL1D = (
    Sample(((2, 9, 3),), {"kernel_size": 3}),
    Sample(((2, 9, 2),), {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True,
                          "count_include_pad": False}),
    Sample(((2, 8, 2),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
)
MAX_POOL3D = (
    Sample(((2, 4, 4, 6, 3),), {"kernel_size": 2}),
    Sample(((2, 5, 6, 5, 2),), {"kernel_size": 3, "stride": (2, 1, 2), "padding": 1,
                                "ceil_mode": True}, negative=True),
    Sample(((1, 6, 5, 7, 2),), {"kernel_size": (2, 3, 2), "stride": 2, "padding": (1, 1, 0),
                                "dilation": (2, 1, 3)}, negative=True),
    Sample(((2, 4, 5, 5, 2),), {"kernel_size": 3, "stride": 1, "padding": 1}, ties=True),
)
AVG_POOL3D = (
    Sample(((2, 4, 4, 6, 3),), {"kernel_size": 2}),
    Sample(((2, 5, 6, 5, 2),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                "count_include_pad": False}),
    Sample(((2, 5, 5, 4, 2),), {"kernel_size": (3, 2, 3), "stride": (2, 1, 2),
                                "padding": (1, 1, 0), "ceil_mode": True}),
    Sample(((1, 5, 4, 5, 2),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                "divisor_override": 5}),
)
GLOBAL_AVG_POOL = (Sample(((2, 5, 6, 3),)), Sample(((2, 7, 3),), {"keepdims": True}),
                   Sample(((2, 3, 4, 2, 3),), {"keepdims": True}))
GLOBAL_MAX_POOL = (Sample(((2, 5, 6, 3),)),
                   Sample(((2, 7, 3),), {"keepdims": True}, ties=True),
                   Sample(((2, 3, 4, 2, 3),)))
