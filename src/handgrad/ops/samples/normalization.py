"""Normalization samples and torch counterparts (channels moved for batch, instance and
group norm; layer norm acts on the last axes in both layouts)."""

from __future__ import annotations

from ..declare import Data, Fixed, Sample
from . import channels_first, channels_last


def torch_batch_norm(F, x, gamma=None, beta=None, running_mean=None, running_var=None, *,
                     training=True, momentum=0.1, eps=1e-5, allreduce=None):
    return channels_last(F.batch_norm(channels_first(x), running_mean, running_var, gamma,
                                      beta, training, momentum, eps))


def torch_instance_norm(F, x, gamma=None, beta=None, running_mean=None, running_var=None,
                        *, use_input_stats=True, momentum=0.1, eps=1e-5):
    return channels_last(F.instance_norm(channels_first(x), running_mean, running_var, gamma,
                                         beta, use_input_stats, momentum, eps))


def torch_layer_norm(F, x, normalized_shape, gamma=None, beta=None, *, eps=1e-5):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return F.layer_norm(x, tuple(shape), gamma, beta, eps)


def torch_group_norm(F, x, num_groups, gamma=None, beta=None, *, eps=1e-5):
    return channels_last(F.group_norm(channels_first(x), num_groups, gamma, beta, eps))


STATS = (Data((3,)), Data((3,), 0.5, 2.0))  # running mean and variance
BATCH_NORM = (
    Sample(((4, 3), (3,), (3,))),
    Sample(((2, 3, 3), None, None), {"eps": 1e-3}),
    Sample(((4, 3), (3,), (3,), *STATS), {"momentum": 0.2}),  # the statistics move
    Sample(((3, 2, 3), (3,), (3,), *STATS), {"training": False}),
)
INSTANCE_NORM = (
    Sample(((2, 5, 3), (3,), (3,))),
    Sample(((2, 3, 2, 2), None, None), {"eps": 1e-3}),
)
LAYER_NORM = (
    Sample(((3, 5), Fixed(5), (5,), (5,))),
    Sample(((2, 3, 4), Fixed((3, 4)), None, None)),
)
GROUP_NORM = (
    Sample(((2, 4, 6), Fixed(3), (6,), (6,))),
    Sample(((2, 3, 2, 4), Fixed(2), None, None)),
)
