"""Naive loop twins of the vectorized ops, with identical signatures.

They are the readable specification (the code a student writes on paper) and
the oracle the tests compare against. Never used on a hot path. This namespace is
built from the op declarations: each module's ``__all__`` is the declared kernel names
it defines (the elementwise activations' twins are built from their declared scalar
math, :mod:`.activations`).
"""

from .activations import *  # noqa: F403
from .attention import *  # noqa: F403
from .bilinear import *  # noqa: F403
from .conv import *  # noqa: F403
from .distance import *  # noqa: F403
from .embedding import *  # noqa: F403
from .embedding_bag import *  # noqa: F403
from .fractional_pool import *  # noqa: F403
from .gated_activations import *  # noqa: F403
from .grid_sample import *  # noqa: F403
from .lp_pooling import *  # noqa: F403
from .lrn import *  # noqa: F403
from .lstm_projection import *  # noqa: F403
from .min_pool import *  # noqa: F403
from .normalization import *  # noqa: F403
from .padding import *  # noqa: F403
from .pooling import *  # noqa: F403
from .pooling_extra import *  # noqa: F403
from .rearrange import *  # noqa: F403
from .recurrent import *  # noqa: F403
from .resample import *  # noqa: F403
from .rms_norm import *  # noqa: F403
from .second_order import *  # noqa: F403
from .unfold import *  # noqa: F403
from .variational import *  # noqa: F403
