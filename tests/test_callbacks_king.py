"""KingScheduler: the slope test and the learning-rate decay it drives."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from handgrad import optimizers
from handgrad.training import KingScheduler
from handgrad.training.king import probability_of_decrease


def test_probability_of_decrease_is_the_gaussian_tail_of_the_ols_slope():
    rng = np.random.default_rng(0)
    y = 5.0 - 0.01 * np.arange(50) + rng.normal(0, 0.2, 50)
    x = np.arange(50.0)
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    std = math.sqrt(residual @ residual / 48 / ((x - x.mean()) @ (x - x.mean())))
    expected = 0.5 * math.erfc(slope / std / math.sqrt(2))
    assert abs(probability_of_decrease(y) - expected) < 1e-9
    assert probability_of_decrease(np.arange(5.0)[::-1]) == 1.0
    assert probability_of_decrease(np.ones(5)) == 0.0


def feed(callback, values):
    lrs = []
    for step, value in enumerate(values):
        callback.on_train_batch_end(step, {"loss": value})
        lrs.append(callback.model.optimizer.lr)
    return lrs


def make(**kwargs):
    callback = KingScheduler(**kwargs)
    callback.set_model(SimpleNamespace(optimizer=optimizers.SGD(lr=0.1)))
    callback.on_train_begin()
    return callback


def test_decreasing_loss_keeps_the_rate_and_a_plateau_lowers_it():
    rng = np.random.default_rng(1)
    falling = 2.0 - 0.01 * np.arange(60) + rng.normal(0, 0.01, 60)
    assert feed(make(patience=20, decay=0.5), falling)[-1] == 0.1
    flat = 1.0 + rng.normal(0, 0.01, 60)
    lrs = feed(make(patience=20, decay=0.5), flat)
    assert lrs[18] == 0.1 and lrs[-1] < 0.1  # never before patience values were seen
    # after a decay the history starts over: decays are at least patience steps apart
    changes = np.flatnonzero(np.diff([0.1, *lrs]))
    assert changes[0] >= 19 and np.all(np.diff(changes) >= 20)


def test_a_spike_does_not_hide_a_decrease():
    values = list(2.0 - 0.01 * np.arange(30))
    values[25] = 50.0  # one outlier: the plain fit says "rising", the robust one does not
    assert feed(make(patience=30, decay=0.5), values)[-1] == 0.1
    assert feed(make(patience=30, decay=0.5, discard=0.0), values)[-1] == 0.05


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(patience=2), "'patience' must be >= 3"),
    (dict(decay=1.0), "'decay'"),
    (dict(per="batch"), "'per'"),
    (dict(discard=0.5), "'discard'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KingScheduler(**kwargs)


def test_a_missing_monitor_is_named():
    with pytest.raises(ValueError, match="monitor 'val_loss' is not in the logs"):
        make(monitor="val_loss").on_train_batch_end(0, {"loss": 1.0})
