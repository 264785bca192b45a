"""ReduceLROnPlateau against torch.optim.lr_scheduler.ReduceLROnPlateau."""

from types import SimpleNamespace

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import optimizers
from handgrad.model import Sequential
from handgrad.training import ReduceLROnPlateau

torch = pytest.importorskip("torch")

LOSSES = [1.0, 0.9, 0.9, 0.95, 0.91, 0.8999, 0.89, 0.9, 0.9, 0.9, 0.9, 0.7, 0.71, 0.72, 0.73,
          0.74, 0.75, 0.76, 0.3, 0.31, 0.32, 0.33, 0.34, 0.35]
CASES = [
    dict(patience=1),
    dict(patience=2, factor=0.5, cooldown=2),
    dict(patience=0, threshold=0.05, threshold_mode="abs", min_lr=0.02),
    dict(patience=1, threshold=0.01),
    dict(mode="max", patience=1, factor=0.3),
    dict(mode="max", patience=1, threshold=0.05, threshold_mode="abs", cooldown=1),
]


@pytest.mark.parametrize("kwargs", CASES, ids=[str(k) for k in CASES])
def test_matches_torch(kwargs):
    values = [-v if kwargs.get("mode") == "max" else v for v in LOSSES]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
    ours = ReduceLROnPlateau(monitor="loss", **kwargs)
    ours.set_model(SimpleNamespace(optimizer=optimizers.SGD(lr=0.1)))
    ours.on_train_begin()
    got, expected = [], []
    for epoch, value in enumerate(values):
        ours.on_epoch_end(epoch, {"loss": value})
        theirs.step(value)
        got.append(ours.model.optimizer.lr)
        expected.append(opt.param_groups[0]["lr"])
    assert len(set(expected)) > 1  # the case reduces at least once
    assert got == expected


def test_fit_lowers_the_rate_of_every_group():
    rng = np.random.default_rng(0)
    x, y = rng.random((16, 3)), rng.random((16, 1))
    model = Sequential([L.Dense(1)], input_shape=(3,), dtype=np.float64)
    model.compile(optimizers.SGD([{"params": ["dense_0.W"]},
                                  {"params": ["dense_0.b"], "lr": 0.0}], lr=0.01), "mse")
    # a never-improving monitor: threshold 1 (rel) asks for a loss below 0
    history = model.fit(x, y, epochs=4, batch_size=16, verbose=0, callbacks=[
        ReduceLROnPlateau("loss", patience=0, factor=0.5, threshold=1.0)])
    assert history["lr"] == [0.01, 0.005, 0.0025, 0.00125]


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(factor=1.0), "'factor'"),
    (dict(patience=-1), "'patience' must be an int >= 0"),
    (dict(mode="auto"), "'mode'"),
    (dict(threshold_mode="relative"), "'threshold_mode'"),
    (dict(min_lr=-1.0), "'min_lr'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReduceLROnPlateau(**kwargs)


def test_a_missing_monitor_is_named():
    callback = ReduceLROnPlateau("val_acc")
    callback.set_model(SimpleNamespace(optimizer=optimizers.SGD(lr=0.1)))
    with pytest.raises(ValueError, match=r"monitor 'val_acc' is not in the epoch logs"):
        callback.on_epoch_end(0, {"loss": 1.0})
