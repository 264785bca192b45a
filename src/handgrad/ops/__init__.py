"""Stateless kernels: every differentiable op is a ``(y, cache)`` forward and a
``<op>_backward(dy, cache)`` returning gradients in input order.

Also public, for the code above the kernels: the geometry and validation helpers of
:mod:`.geometry` (``conv_geometry``, ``pool_geometry``, ``parse_padding``, ...), the
cache-free stable functions of :mod:`.special`, and the switches of the optional
compiled kernels (:mod:`.compiled`). Everything else with a leading underscore is
private to ``ops``.
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

# isort: split
# Activations, softmax, linear and dropout kernels.
from .activations import (
    ACTIVATIONS,
    elu,
    elu_backward,
    gelu,
    gelu_backward,
    hard_sigmoid,
    hard_sigmoid_backward,
    identity,
    identity_backward,
    leaky_relu,
    leaky_relu_backward,
    relu,
    relu_backward,
    selu,
    selu_backward,
    sigmoid,
    sigmoid_backward,
    softplus,
    softplus_backward,
    tanh,
    tanh_backward,
)
from .dropout import dropout, dropout_backward
from .linear import linear, linear_backward
from .softmax import log_softmax, log_softmax_backward, softmax, softmax_backward

# isort: split
# Attention kernels.
from .attention import (
    multi_head_attention,
    multi_head_attention_backward,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)

# isort: split
# Recurrent kernels (one layer, one direction per call).
from .recurrent import gru, gru_backward, lstm, lstm_backward, rnn, rnn_backward

# isort: split
# Normalization and embedding kernels.
from .embedding import embedding, embedding_backward
from .normalization import (
    batch_norm,
    batch_norm_backward,
    group_norm,
    group_norm_backward,
    instance_norm,
    instance_norm_backward,
    layer_norm,
    layer_norm_backward,
)

# isort: split
# Variational kernels (a VAE's sampling step and its two loss terms).
from .variational import (
    bernoulli_nll_logits,
    bernoulli_nll_logits_backward,
    gaussian_kl,
    gaussian_kl_backward,
    reparameterize,
    reparameterize_backward,
)

# isort: split
# Second-order kernels: the backward of a backward, for gradient penalties.
from .second_order import (
    conv1d_gradgrad,
    conv2d_gradgrad,
    conv_transpose1d_gradgrad,
    conv_transpose2d_gradgrad,
    elu_gradgrad,
    gelu_gradgrad,
    hard_sigmoid_gradgrad,
    identity_gradgrad,
    leaky_relu_gradgrad,
    linear_gradgrad,
    relu_gradgrad,
    selu_gradgrad,
    sigmoid_gradgrad,
    softplus_gradgrad,
    tanh_gradgrad,
)

# isort: split
# Public helpers for layers and converters: geometry, validation, compiled kernels.
from . import special
from .compiled import (
    compiled_kernels_available,
    compiled_kernels_enabled,
    use_compiled_kernels,
)
from .geometry import (
    RECURRENT_GATES,
    WindowAxis,
    WindowGeometry,
    check_ids,
    check_lengths,
    check_normalized_shape,
    check_padding_idx,
    conv_geometry,
    conv_transpose_geometry,
    parse_padding,
    pool_geometry,
)
