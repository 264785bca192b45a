"""How the ONNX import holds an ONNX tensor: a handgrad tensor and a permutation, or (a
grouped layout, :mod:`.load_groups`) a permutation and groups of handgrad axes."""

from __future__ import annotations

from dataclasses import dataclass


def channels_last_perm(rank):
    """The ``perm`` of a channels-first ONNX tensor held channels last."""
    return (0, rank - 1, *range(1, rank - 1)) if rank > 2 else tuple(range(rank))


@dataclass(frozen=True)
class Held:
    """An ONNX tensor as the loader holds it: a handgrad symbolic tensor ``sym`` and
    ``perm`` (ONNX tensor = ``sym.transpose(perm)``, batch included); or a lazily
    flattened channels-first map (``flat``: the held map it came from); or, with
    ``groups``, ONNX tensor = ``sym.transpose(perm).reshape(...)`` where ONNX axis i holds
    the next ``groups[i]`` axes of the transposed tensor (the batch may sit in any group:
    see :mod:`.load_groups`)."""

    sym: object
    perm: tuple
    flat: Held | None = None
    groups: tuple | None = None

    @property
    def rank(self):
        return len(self.perm) if self.groups is None else len(self.groups)

    @property
    def onnx_shape(self):
        """The per-example ONNX shape (no batch axis)."""
        shape = (None, *self.sym.shape)
        return tuple(shape[p] for p in self.perm)[1:]
