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
