"""Stateful layers: validated config, lazily built parameters, gradients, caches.

Each layer registers itself where it is defined (``@register``, :mod:`.registry`);
this package only gathers the public names, the family bases included (``ConvND``,
``Pool``, ``GlobalPool``, ``Recurrent``, ``NormalizationBase``, ``Merge``, ``Activation``)."""

# Activation, and one class per declared activation (ReLU, GELU, ...: ops/declare.py).
from .activations import *  # noqa: F403
from .attention import MultiHeadAttention
from .augmentation import (
    RandomAugmentation,
    RandomContrast,
    RandomFlip,
    RandomRotation,
    RandomTranslation,
    RandomZoom,
)
from .base import Layer
from .conv import (
    Conv1D,
    Conv2D,
    Conv3D,
    ConvND,
    ConvTranspose1D,
    ConvTranspose2D,
    ConvTranspose3D,
    Deconv2D,
)
from .core import Dense, Dropout, Flatten, Reshape
from .dropout import (
    AlphaDropout,
    Dropout1D,
    Dropout2D,
    Dropout3D,
    FeatureAlphaDropout,
    StochasticDepth,
)
from .embedding import Embedding, EmbeddingBag
from .fractional_pool import FractionalMaxPool, FractionalMaxPool2D, FractionalMaxPool3D
from .gated_activations import GLU, PReLU, RReLU
from .keras_layers import *  # noqa: F403  Keras's class names (MaxPooling2D, ...)
from .lambda_layer import Lambda
from .lrn import LocalResponseNorm
from .masking import Masking
from .merges import (
    Average,
    Maximum,
    Minimum,
    Subtract,
    add,
    average,
    concatenate,
    maximum,
    minimum,
    multiply,
    subtract,
)
from .normalization import (
    BatchNorm,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    NormalizationBase,
    RMSNorm,
    RunningNormalization,
)
from .padding import (
    CircularPad1D,
    CircularPad2D,
    CircularPad3D,
    ConstantPad1D,
    ConstantPad2D,
    ConstantPad3D,
    PadND,
    ReflectionPad1D,
    ReflectionPad2D,
    ReflectionPad3D,
    ReplicationPad1D,
    ReplicationPad2D,
    ReplicationPad3D,
    ZeroPad1D,
    ZeroPad2D,
    ZeroPad3D,
)
from .pooling import (
    AvgPool1D,
    AvgPool2D,
    AvgPool3D,
    GlobalAvgPool1D,
    GlobalAvgPool2D,
    GlobalAvgPool3D,
    GlobalMaxPool1D,
    GlobalMaxPool2D,
    GlobalMaxPool3D,
    GlobalPool,
    MaxPool1D,
    MaxPool2D,
    MaxPool3D,
    Pool,
)
from .pooling_extra import (
    AdaptiveAvgPool1D,
    AdaptiveAvgPool2D,
    AdaptiveAvgPool3D,
    AdaptiveMaxPool1D,
    AdaptiveMaxPool2D,
    AdaptiveMaxPool3D,
    AdaptivePool,
    LPPool,
    LPPool1D,
    LPPool2D,
    MinPool,
    MinPool1D,
    MinPool2D,
)
from .preprocessing import CategoryEncoding, Normalization, Rescaling
from .rearrange import (
    ChannelShuffle,
    Columns,
    Fold,
    PixelShuffle,
    PixelUnshuffle,
    Rearrange,
    Unfold,
)
from .recurrent import GRU, LSTM, RNN, BiLSTM, Recurrent
from .recurrent_cells import GRUCell, LSTMCell, RecurrentCell, RNNCell
from .registry import REGISTRY, register
from .resample import Upsample, UpsamplingBilinear2D, UpsamplingNearest2D
from .reshaping import Cropping, Cropping1D, Cropping2D, Cropping3D, Permute, RepeatVector
from .separable import (
    DepthwiseConv,
    DepthwiseConv1D,
    DepthwiseConv2D,
    SeparableConv,
    SeparableConv1D,
    SeparableConv2D,
)
from .similarity import Bilinear, CosineSimilarity, PairMerge, PairwiseDistance
from .sparse import SparseEvolution
from .spatial import AffineGrid, GridSample
from .structure import Add, Concatenate, Merge, Multiply, Residual
from .tensor_ops import MatMul, Parameter, Roll
from .text_vectorization import TextVectorization
from .tied import TiedDense, link_tied
from .transformer import TransformerEncoderLayer
from .transformer_decoder import TransformerDecoder, TransformerDecoderLayer, TransformerEncoder
from .transformer_model import Transformer
from .unpool import MaxUnpool, MaxUnpool1D, MaxUnpool2D, MaxUnpool3D
from .wavenet import WaveNetBlock
from .weighted import WeightedLayer
from .wrappers import Bidirectional, TimeDistributed, Wrapper
