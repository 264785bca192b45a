"""Stateless kernels: every differentiable op is a ``(y, cache)`` forward and a
``<op>_backward(dy, cache)`` returning gradients in input order (and, where it has one,
a second-order ``<op>_gradgrad(q, dy, cache)``).

Each op is declared once, beside its math (:mod:`.declare`); this namespace is built
from the declarations: every family module's ``__all__`` is the kernels it declares.
``DECLARED`` maps op names to their declarations and ``ACTIVATIONS`` the activation
names to their ``(forward, backward)`` pairs.

Also public, for the code above the kernels: the geometry and validation helpers of
:mod:`.geometry` (``conv_geometry``, ``pool_geometry``, ``parse_padding``, ...), the
cache-free stable functions of :mod:`.special`, and the switches of the optional
compiled kernels (:mod:`.compiled`). Everything else with a leading underscore is
private to ``ops``.
"""

# The op families, one file each; each file declares its ops at its end.
from .activations import *  # noqa: F403
from .attention import *  # noqa: F403
from .bilinear import *  # noqa: F403
from .clip_activations import *  # noqa: F403
from .conv import *  # noqa: F403
from .curve_activations import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropout import *  # noqa: F403
from .dropout_variants import *  # noqa: F403
from .embedding import *  # noqa: F403
from .embedding_bag import *  # noqa: F403
from .fractional_pool import *  # noqa: F403
from .gated_activations import *  # noqa: F403
from .global_pooling import *  # noqa: F403
from .grid_sample import *  # noqa: F403
from .linear import *  # noqa: F403
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
from .smooth_activations import *  # noqa: F403
from .softmax import *  # noqa: F403
from .unfold import *  # noqa: F403
from .variational import *  # noqa: F403

# isort: split
from .declare import DECLARED, activation_table, declaration

# isort: split
# Public helpers for layers and converters: geometry, validation, compiled kernels.
from . import special
from .compiled import (
    compiled_kernels_available,
    compiled_kernels_enabled,
    use_compiled_kernels,
)
from .geometry import (
    EMBEDDING_BAG_MODES,
    RECURRENT_GATES,
    WindowAxis,
    WindowGeometry,
    adaptive_bins,
    adaptive_output_sizes,
    check_ids,
    check_lengths,
    check_max_norm,
    check_normalized_shape,
    check_padding_idx,
    conv_geometry,
    conv_transpose_geometry,
    embedding_renorm_,
    fractional_output_sizes,
    fractional_pool_config,
    parse_padding,
    pool_geometry,
    resolve_count_include_pad,
    unpool_output_shape,
)

ACTIVATIONS = activation_table()
"""Lower-case activation name -> ``(forward, backward)``; forwards use their defaults."""
