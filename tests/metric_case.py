"""One binary classifier with streaming metrics, run in one process or under MPI by
``tests/test_metrics_mpi.py``: the data are uneven over the processes (101 examples,
batches of 16), so a figure averaged per process or per batch differs from the counts'
figure."""

from __future__ import annotations

import numpy as np

import handgrad as hg
from handgrad import metrics


def data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(101, 4))
    y = (x[:, 0] + 0.8 * rng.normal(size=101) > 0.3).astype(np.float64)[:, None]
    return x, y


def run(distributed):
    """The logs of one epoch of ``fit`` at learning rate 0 and of ``evaluate``."""
    x, y = data()
    net = hg.Sequential([hg.layers.Dense(1)], seed=5, dtype="float64")
    net.build((4,))
    net.compile(hg.optimizers.SGD(lr=0.0), loss="binary_cross_entropy_with_logits",
                metrics=[metrics.Precision(), metrics.Recall(), metrics.AUC()])
    history = net.fit(x, y, epochs=1, batch_size=16, verbose=0, rng=0,
                      distributed=distributed)
    scores = net.evaluate(x, y, batch_size=16, return_dict=True,
                          distributed=distributed)
    return {"fit": {k: v[-1] for k, v in history.history.items()},
            "evaluate": scores}
