"""How the ONNX import holds an ONNX tensor: a handgrad tensor and a permutation."""

from __future__ import annotations

from dataclasses import dataclass


def channels_last_perm(rank):
    """The ``perm`` of a channels-first ONNX tensor held channels last."""
    return (0, rank - 1, *range(1, rank - 1)) if rank > 2 else tuple(range(rank))


@dataclass(frozen=True)
class Held:
    """An ONNX tensor as the loader holds it: a handgrad symbolic tensor ``sym`` and
    ``perm`` (ONNX tensor = ``sym.transpose(perm)``, batch included); or a lazily
    flattened channels-first map (``flat``: the held map it came from)."""

    sym: object
    perm: tuple
    flat: Held | None = None

    @property
    def rank(self):
        return len(self.perm)

    @property
    def onnx_shape(self):
        """The per-example ONNX shape (no batch axis)."""
        shape = (None, *self.sym.shape)
        return tuple(shape[p] for p in self.perm)[1:]
