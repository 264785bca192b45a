"""Naive loop twins of the vectorized ops, with identical signatures.

They are the readable specification (the code a student writes on paper) and
the oracle the tests compare against. Never used on a hot path.
"""

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
