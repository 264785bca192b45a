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

# isort: split
from .attention import (
    multi_head_attention,
    multi_head_attention_backward,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)

# isort: split
# Normalization and embedding loop twins.
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
# Recurrent loop twins.
from .recurrent import gru, gru_backward, lstm, lstm_backward, rnn, rnn_backward

# isort: split
# Second-order loop twins (the backward of a backward).
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
# Variational loop twins.
from .variational import (
    bernoulli_nll_logits,
    bernoulli_nll_logits_backward,
    gaussian_kl,
    gaussian_kl_backward,
    reparameterize,
    reparameterize_backward,
)
