"""The trainings that the data-parallel tests run with ``mpiexec -n K`` and in one process.

Each case is a small float64 model and data set whose batches do not divide evenly among
2, 3 or 4 processes, with a last partial batch; ``mlp`` ends with a batch of one example, so
some processes get an empty share; ``mlp`` and ``bn_dropout`` weigh their examples
(``sample_weight``). ``bn_dropout`` trains through ``fit`` with validation,
BatchNorm (global statistics) and Dropout (global masks) without a seed of its own (its
stream comes from the model's seed); ``graph`` is a residual graph ``Model`` with both (a
seeded Dropout) and augmented batches. :func:`explicit_loop` is the README's loop
with ``GradientReducer``.
"""

from __future__ import annotations

import numpy as np

import handgrad.distributed as dist
from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.data import batches
from handgrad.data.augment import augmentation
from handgrad.model import Model, Sequential
from handgrad.model.graph import Input

EXAMPLES = {"cnn": 47, "mlp": 21, "bn_dropout": 47, "graph": 17}
BATCH = {"cnn": 10, "mlp": 4, "bn_dropout": 10, "graph": 8}
EPOCHS = 3
CASES = tuple(EXAMPLES)


def data(case):
    rng = np.random.default_rng(11)
    n = EXAMPLES[case]
    shape = (8,) if case == "mlp" else (12, 2)
    x = rng.standard_normal((n, *shape))
    y = rng.integers(0, 3, n)
    return x, y


def _graph():
    """Conv-BatchNorm-ReLU plus a 1x1 shortcut, Dropout, global pooling, Dense."""
    x = Input((12, 2))
    h = L.ReLU()(L.BatchNorm()(L.Conv1D(6, 3, padding=1)(x)))
    z = L.Dropout(0.2, seed=4)(L.Add()([h, L.Conv1D(6, 1)(x)]))
    return Model(x, L.Dense(3)(L.GlobalAvgPool1D()(z)), seed=0, dtype="float64")


def model(case, perturb=0.0):
    """The case's model in float64 (the same weights on every call); ``perturb`` scales
    every initial weight by ``1 + perturb * (+-1)``."""
    if case == "graph":
        net = _graph()
        return _finish(net, perturb)
    if case == "mlp":
        layers = [L.Dense(16), L.Tanh(), L.Dense(8), L.ReLU(), L.Dense(3)]
        shape = (8,)
    elif case == "cnn":
        layers = [L.Conv1D(4, 3, padding=1), L.ReLU(), L.MaxPool1D(2), L.Conv1D(4, 3),
                  L.ReLU(), L.Flatten(), L.Dense(3)]
        shape = (12, 2)
    else:
        layers = [L.Conv1D(6, 3, padding=1), L.BatchNorm(), L.ReLU(), L.Dropout(0.25),
                  L.Flatten(), L.Dense(8), L.BatchNorm(), L.Tanh(), L.Dense(3)]
        shape = (12, 2)
    return _finish(Sequential(layers, seed=0, input_shape=shape, dtype="float64"), perturb)


def _finish(net, perturb):
    if perturb:
        signs = np.random.default_rng(5)
        for array in net.named_parameters().values():
            array *= 1.0 + perturb * signs.choice([-1.0, 1.0], array.shape)
    net.compile(optimizers.SGD(lr=0.05, momentum=0.9), "cross_entropy", ["accuracy"])
    return net


def sample_weights(case):
    """Per-example loss weights of the ``mlp`` (empty shares) and ``bn_dropout``
    (``validation_split`` splits them) cases; None for the others."""
    if case not in ("mlp", "bn_dropout"):
        return None
    return np.random.default_rng(13).uniform(0.0, 3.0, EXAMPLES[case])


def train(case, distributed, perturb=0.0, verbose=0, callbacks=()):
    """``(model, history)`` after ``fit`` on the case's data."""
    x, y = data(case)
    net = model(case, perturb)
    split = 0.2 if case == "bn_dropout" else None
    augment = augmentation(shift=2, noise=0.1) if case == "graph" else None
    history = net.fit(x, y, epochs=EPOCHS, batch_size=BATCH[case], rng=7, verbose=verbose,
                      validation_split=split, callbacks=list(callbacks), augment=augment,
                      distributed=distributed, sample_weight=sample_weights(case))
    return net, history


def state(net) -> dict:
    """Parameters and buffers by name."""
    return {**net.named_parameters(), **{f"buffer:{k}": v for k, v in
                                         net.named_buffers().items()}}


def explicit_loop(distributed, bucket_bytes=64, perturb=0.0):
    """The README's explicit loop on the ``cnn`` case (SGD with momentum, 2 epochs of
    batches of 10, the loss's mean over each global batch logged); returns ``(model,
    losses)``. ``distributed`` shards every batch with a ``GradientReducer``."""
    x, y = data("cnn")
    net, rng = model("cnn", perturb), np.random.default_rng(0)
    optimizer = optimizers.SGD(lr=0.05, momentum=0.9)
    logged = []
    if distributed:
        dist.broadcast_parameters(net)
    with dist.GradientReducer(net, bucket_bytes=bucket_bytes) as reducer:
        for _ in range(2):
            for xb, yb in batches(x, y, 10, rng=rng):
                part = reducer.batch(len(xb)) if distributed else slice(None)
                net.zero_grad()
                logits = net.forward(xb[part], training=True)
                loss, dlogits = losses.softmax_cross_entropy(logits, yb[part])
                net.backward(dlogits * reducer.weight if distributed else dlogits)
                reducer.reduce()
                optimizer.step(net.named_parameters(), net.named_gradients())
                logged.append(reducer.mean(loss) if distributed else loss)
    return net, logged
