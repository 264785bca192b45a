"""``NamedArrays``: the dict that ``named_parameters()`` and ``named_gradients()`` return.

A plain ``{name: array}`` dict that also tells which names belong to frozen
(``trainable=False``) layers, so that an optimizer given
``model.named_parameters()`` leaves those parameters alone, as ``torch.optim``
skips a parameter whose gradient is None. ``unique_names`` suffixes repeated names.
"""

from __future__ import annotations


class NamedArrays(dict):
    """``{name: array}``; ``frozen`` is the set of names whose layer is frozen."""

    def __init__(self, items=(), frozen=()):
        super().__init__(items)
        self.frozen = frozenset(frozen)


def unique_names(names, taken=None, first_suffix=1) -> list:
    """``names`` made distinct from each other and from the set ``taken`` (which receives
    them): a repeat gets the first free suffix ``_{first_suffix}``, ``_{first_suffix + 1}``..."""
    taken = set() if taken is None else taken
    out = []
    for name in names:
        candidate, k = name, first_suffix
        while candidate in taken:
            candidate = f"{name}_{k}"
            k += 1
        taken.add(candidate)
        out.append(candidate)
    return out
