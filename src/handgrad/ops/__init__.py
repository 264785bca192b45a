"""Stateless kernels: every differentiable op is a ``(y, cache)`` forward and a
``<op>_backward(dy, cache)`` returning gradients in input order."""

from .conv import (
    conv1d,
    conv1d_backward,
    conv2d,
    conv2d_backward,
    conv_transpose1d,
    conv_transpose1d_backward,
    conv_transpose2d,
    conv_transpose2d_backward,
)
from .pooling import (
    avg_pool1d,
    avg_pool1d_backward,
    avg_pool2d,
    avg_pool2d_backward,
    global_avg_pool,
    global_avg_pool_backward,
    global_max_pool,
    global_max_pool_backward,
    max_pool1d,
    max_pool1d_backward,
    max_pool2d,
    max_pool2d_backward,
)
