"""The dropout options of the recurrent layers: torch's ``dropout`` and Keras's
``input_dropout``/``recurrent_dropout`` (variational dropout).

Two libraries use the word ``dropout`` for different things:

- torch (``nn.LSTM(dropout=p)``): dropout on the output sequence of every stacked layer
  but the last, so it does nothing with ``num_layers=1``. handgrad's recurrent layers are
  torch's twins (same weights, same ``num_layers``), so ``dropout`` keeps torch's meaning.
- Keras (``LSTM(units, dropout=p, recurrent_dropout=q)``): variational dropout inside the
  cell, one mask per sequence, the same at every time step, on the inputs x_t (``dropout``)
  and on the state h_{t-1} that feeds the gates (``recurrent_dropout``). handgrad spells
  these ``input_dropout=p`` and ``recurrent_dropout=q``.

One mask serves all the gates, as in Keras 3 (``DropoutRNNCell.get_dropout_mask``) and in
Keras 2's default ``implementation=2`` (Keras 2's ``implementation=1`` drew one per gate).
Every stacked layer and direction draws its own masks, (N, F_l) and (N, H), fresh at each
training call, from the layer's Generator (``draws_random``), for the global batch in
data-parallel training (``rows``, as ``ops.dropout``); evaluation uses no dropout. The
GRU's direct path z h_{t-1} is not masked (Keras's). The kernels take the masks (see
:mod:`handgrad.ops.recurrent`).

A Keras-spelled call (``units=``) with ``dropout`` is refused with a message naming
``input_dropout``; ``dropout`` on a single layer warns (as torch does), naming it too.
"""

from __future__ import annotations

import warnings

from .. import ops
from .._checks import array_module
from .._hyper import number

OPTIONS = ("input_dropout", "recurrent_dropout")


def _keras_hint(value):
    return (f"Keras's dropout (on each step's inputs, one mask per sequence) is "
            f"input_dropout={value} here (and Keras's recurrent_dropout is recurrent_dropout=)")


def check_keras_call(owner, kwargs):
    """Refuse ``dropout`` in a call spelled as Keras's (``units=``): the meanings differ."""
    value = kwargs.get("dropout", 0)
    if value:
        raise ValueError(f"{owner}: 'dropout' is torch's here (between stacked layers, on "
                         f"every layer's output but the last), not Keras's; "
                         f"{_keras_hint(value)}; received dropout={value!r} with Keras's "
                         f"spelling 'units'")


def dropout_rates(owner, dropout, input_dropout, recurrent_dropout, num_layers, proj_size):
    """The three rates, checked in [0, 1); the warning of torch's ``dropout`` on one layer."""
    rates = {name: number(owner, name, value, low=0.0, high=1.0, high_open=True)
             for name, value in (("dropout", dropout), ("input_dropout", input_dropout),
                                 ("recurrent_dropout", recurrent_dropout))}
    if rates["dropout"] > 0 and num_layers == 1:
        warnings.warn(f"{owner}: dropout={rates['dropout']} acts between stacked layers "
                      f"(torch's meaning), so with num_layers=1 it does nothing; "
                      f"{_keras_hint(rates['dropout'])}", UserWarning, stacklevel=4)
    if proj_size and (rates["input_dropout"] or rates["recurrent_dropout"]):
        raise ValueError(f"{owner}: input_dropout/recurrent_dropout are not available with "
                         f"proj_size={proj_size} (the projected LSTM kernel takes no masks); "
                         f"received input_dropout={rates['input_dropout']}, "
                         f"recurrent_dropout={rates['recurrent_dropout']}")
    return rates


def draw_masks(layer, x, hidden, training):
    """The kernel's ``input_mask`` (N, F) and ``recurrent_mask`` (N, hidden) for one
    stacked layer and direction: inverted-dropout masks (0 or 1/(1-p)) drawn from the
    layer's Generator in training; none otherwise."""
    masks = {}
    if not training:
        return masks
    xp = array_module(x)
    rows = None if layer.communicator is None else layer.communicator.rows
    for name, size in zip(OPTIONS, (x.shape[-1], hidden)):
        rate = getattr(layer, name)
        if rate > 0:
            ones = xp.ones((x.shape[0], size), x.dtype)
            masks[name.replace("dropout", "mask")] = ops.dropout(ones, rate, layer.rng,
                                                                 rows=rows)[0]
    return masks
