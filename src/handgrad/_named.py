"""``NamedArrays``: the dict that ``named_parameters()`` and ``named_gradients()`` return.

A plain ``{name: array}`` dict that also tells which names belong to frozen
(``trainable=False``) layers, so that an optimizer given
``model.named_parameters()`` leaves those parameters alone, as ``torch.optim``
skips a parameter whose gradient is None.
"""

from __future__ import annotations


class NamedArrays(dict):
    """``{name: array}``; ``frozen`` is the set of names whose layer is frozen."""

    def __init__(self, items=(), frozen=()):
        super().__init__(items)
        self.frozen = frozenset(frozen)
