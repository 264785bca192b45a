"""Layer cases (see :mod:`.layer_cases`) for Keras's reshaping layers, the wrappers,
``Lambda`` and ``Masking``: layer name -> ``draw(rng) -> (layer, input_shape)``."""

from __future__ import annotations

from .. import layers as L

F64 = "float64"


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _cropping(rank):
    cls = getattr(L, f"Cropping{rank}D")

    def draw(rng):
        pairs = tuple((int(rng.integers(0, 2)), int(rng.integers(0, 3))) for _ in range(rank))
        spelling = _pick(rng, [int(rng.integers(0, 2)), pairs,
                               tuple(int(rng.integers(0, 2)) for _ in range(rank))])
        return cls(spelling), (*(5,) * rank, 2)

    return draw


KERAS_CASES = {
    "Permute": lambda rng: _pick(rng, [(L.Permute((2, 1)), (3, 4)),
                                       (L.Permute((3, 1, 2)), (2, 3, 4))]),
    "RepeatVector": lambda rng: (L.RepeatVector(int(rng.integers(1, 4))), (3,)),
    "Cropping1D": _cropping(1),
    "Cropping2D": _cropping(2),
    "Cropping3D": _cropping(3),
}
