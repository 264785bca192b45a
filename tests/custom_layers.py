"""Custom layers shared by the tests of the code that walks the model tree."""

from handgrad import layers as L


class Doubled(L.Layer):
    """A container that is not a chain: y = f(f(x)) with one child, ``inner``. The
    summary, the plots and the exports follow a container step by step only when it
    says it is a chain (``Layer.chain``), so this one is "n/a", not exported, no torch
    twin."""

    def __init__(self, inner):
        self.inner = inner
        super().__init__()

    def children(self):
        yield "inner", self.inner

    def _build(self, input_shape, rng):
        self.inner.build(input_shape, rng, self.dtype)

    def _forward(self, x, training):
        return self.inner.forward(self.inner.forward(x, training), training), None
