"""Learning-rate schedules against torch.optim.lr_scheduler, configs and errors."""

import json
import math

import numpy as np
import pytest

from handgrad import optimizers, schedulers
from handgrad.testing import assert_close, tolerance

from tolerances import assert_entries_close

torch = pytest.importorskip("torch")

STEPS = 60
# Rounded operations in the longest schedule formula, the cosine: the progress (2), its
# angle, cos, 1 + cos, lr - min_lr, the product and + min_lr.
ROUNDINGS = 8


def torch_lrs(base_lr, make_scheduler, steps=STEPS):
    """The learning rate torch uses for each of ``steps`` updates."""
    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=base_lr)
    scheduler = make_scheduler(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradient: a no-op that keeps torch's call-order check quiet
        scheduler.step()
    return np.array(lrs)


def ours(schedule, steps=STEPS):
    return np.array([schedule(t) for t in range(steps)])


@pytest.mark.parametrize(("step_size", "gamma"), [(1, 0.9), (7, 0.5), (10, 2.0)])
def test_step_decay_matches_step_lr(step_size, gamma):
    expected = torch_lrs(0.3, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size, gamma))
    # torch multiplies the rate by gamma at each decay, up to STEPS roundings in a row
    assert_entries_close(ours(schedulers.StepDecay(0.3, step_size, gamma)), expected,
                         dtype=np.float64, terms=STEPS, what="lr")


@pytest.mark.parametrize("gamma", [0.95, 0.5, 1.0])
def test_exponential_decay_matches_exponential_lr(gamma):
    expected = torch_lrs(0.2, lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma))
    assert_entries_close(ours(schedulers.ExponentialDecay(0.2, gamma)), expected,
                         dtype=np.float64, terms=STEPS, what="lr")


@pytest.mark.parametrize("min_lr", [0.0, 0.01])
def test_cosine_without_warmup_matches_cosine_annealing(min_lr):
    total = 40
    expected = torch_lrs(
        0.1, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, total, eta_min=min_lr),
        steps=total + 1,
    )
    # torch may update the rate recursively, each step from the last: its rounding errors,
    # of the size of lr, accumulate over the steps
    assert_close(ours(schedulers.CosineWarmup(0.1, total, 0, min_lr), total + 1), expected,
                 dtype=np.float64, terms=(total + 1) * ROUNDINGS, scale=0.1, what="lr")


def hf_cosine_with_warmup(warmup, total, floor):
    """Multiplier of Hugging Face's cosine schedule with warm-up, with a floor ratio that
    is reached at ``total`` (also when there is no cosine phase, ``warmup == total``)."""

    def factor(step):
        if step < warmup:
            return step / max(1, warmup)
        if step >= total:
            return floor
        progress = (step - warmup) / (total - warmup)
        return floor + (1 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


@pytest.mark.parametrize(("warmup", "total", "min_lr"), [(10, 50, 0.0), (5, 30, 0.02),
                                                          (20, 20, 0.01)])
def test_cosine_warmup_matches_lambda_lr(warmup, total, min_lr):
    lr = 0.1
    factor = hf_cosine_with_warmup(warmup, total, min_lr / lr)
    expected = torch_lrs(lr, lambda o: torch.optim.lr_scheduler.LambdaLR(o, factor))
    got = ours(schedulers.CosineWarmup(lr, total, warmup, min_lr))
    # both evaluate the formula once (torch times lr): terms of the size of lr
    bound = dict(dtype=np.float64, terms=ROUNDINGS + 1, scale=lr)
    assert_close(got, expected, **bound, what="lr")
    assert got[0] == 0.0
    assert_close(got[warmup], lr if warmup < total else min_lr, **bound, what="peak")
    assert np.all(got[total:] == min_lr)
    assert np.all(np.diff(got[warmup:]) <= tolerance(**bound))  # non-increasing
    assert np.all(np.diff(got[:warmup]) > 0)


@pytest.mark.parametrize(("d_model", "warmup", "factor"), [(512, 20, 1.0), (64, 7, 2.0)])
def test_noam_matches_lambda_lr(d_model, warmup, factor):
    def rate(step):  # the Annotated Transformer's rate(), step 0 counted as 1
        step = max(step, 1)
        return factor * (d_model ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5)))

    expected = torch_lrs(1.0, lambda o: torch.optim.lr_scheduler.LambdaLR(o, rate))
    got = ours(schedulers.Noam(d_model, warmup, factor))
    assert_entries_close(got, expected, dtype=np.float64, terms=ROUNDINGS, what="lr")
    assert int(np.argmax(got)) == warmup
    assert_entries_close(got[warmup], factor / math.sqrt(d_model * warmup), dtype=np.float64,
                         terms=ROUNDINGS, what="peak")


def test_constant_and_driving_an_optimizer():
    assert ours(schedulers.Constant(0.05), 5).tolist() == [0.05] * 5
    schedule = schedulers.StepDecay(0.1, 2, 0.5)
    opt = optimizers.SGD(lr=1.0)
    params, grads = {"w": np.zeros(2)}, {"w": np.ones(2)}
    seen = []
    for _ in range(5):
        opt.lr = schedule(opt.iterations)
        seen.append(opt.lr)
        opt.step(params, grads)
    assert seen == [schedule(t) for t in range(5)]
    # w - lr * 1 at each step is exactly -(the sum of the rates, added in the same order)
    np.testing.assert_array_equal(params["w"], -sum(seen) * np.ones(2))
    assert isinstance(schedule(np.int64(3)), float)


@pytest.mark.parametrize(
    "schedule",
    [
        schedulers.Constant(0.1),
        schedulers.StepDecay(0.1, 3, gamma=0.5),
        schedulers.ExponentialDecay(0.1, 0.9),
        schedulers.CosineWarmup(0.1, 100, warmup_steps=10, min_lr=1e-3),
        schedulers.Noam(256, 4000, factor=2.0),
    ],
    ids=lambda s: type(s).__name__,
)
def test_config_round_trip_and_get(schedule):
    config = json.loads(json.dumps(schedule.get_config()))
    clone = schedulers.from_config(config)
    assert type(clone) is type(schedule) and clone.get_config() == schedule.get_config()
    assert [clone(t) for t in range(0, 200, 7)] == [schedule(t) for t in range(0, 200, 7)]
    assert schedulers.get(schedule) is schedule
    kwargs = {k: v for k, v in config.items() if k != "name"}
    by_name = schedulers.get(config["name"].upper(), **kwargs)
    assert by_name.get_config() == schedule.get_config()


def test_get_accepts_snake_case_names():
    assert isinstance(schedulers.get("cosine_warmup", lr=0.1, total_steps=5),
                      schedulers.CosineWarmup)
    assert isinstance(schedulers.get("step_decay", lr=0.1, step_size=5), schedulers.StepDecay)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: schedulers.Constant(-1.0), ValueError, "Constant: 'lr' must be .* >= 0"),
        (lambda: schedulers.Constant("0.1"), TypeError, "Constant: 'lr'"),
        (lambda: schedulers.StepDecay(0.1, 0), ValueError, "StepDecay: 'step_size'"),
        (lambda: schedulers.StepDecay(0.1, 2.5), TypeError, "StepDecay: 'step_size'"),
        (lambda: schedulers.StepDecay(0.1, 2, gamma=0.0), ValueError, "'gamma' must be .* > 0"),
        (lambda: schedulers.ExponentialDecay(0.1, -0.5), ValueError, "ExponentialDecay: 'gamma'"),
        (lambda: schedulers.CosineWarmup(0.1, 0), ValueError, "'total_steps'"),
        (lambda: schedulers.CosineWarmup(0.1, 10, warmup_steps=11), ValueError,
         "'warmup_steps' must be <= total_steps=10; received 11"),
        (lambda: schedulers.CosineWarmup(0.1, 10, warmup_steps=-1), ValueError, "'warmup_steps'"),
        (lambda: schedulers.CosineWarmup(0.1, 10, min_lr=0.2), ValueError,
         "'min_lr' must be .* <= 0.1"),
        (lambda: schedulers.Noam(0, 10), ValueError, "Noam: 'd_model'"),
        (lambda: schedulers.Noam(512, 0), ValueError, "Noam: 'warmup_steps'"),
        (lambda: schedulers.Noam(512, 10, factor=0), ValueError, "Noam: 'factor'"),
        (lambda: schedulers.Constant(0.1)(-1), ValueError, "Constant: 'step'"),
        (lambda: schedulers.Constant(0.1)(1.5), TypeError, "Constant: 'step'"),
        (lambda: schedulers.get("linear"), ValueError, r"unknown name 'linear'.*'noam'"),
        (lambda: schedulers.get(None), TypeError, "expected a name"),
        (lambda: schedulers.get(schedulers.Constant(0.1), lr=1.0), TypeError, "cannot be"),
        (lambda: schedulers.from_config({"name": "Noam", "lr": 1.0}), TypeError,
         r"unknown keys \['lr'\] for Noam"),
        (lambda: schedulers.from_config(["Noam"]), TypeError, "'name' key"),
    ],
)
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()
