"""LinearLR, PolynomialLR, CosineWarmRestarts, Cyclic and OneCycle against torch's
learning-rate sequences."""

import json

import numpy as np
import pytest

from handgrad import schedulers
from handgrad.testing import assert_close

torch = pytest.importorskip("torch")
lr_scheduler = torch.optim.lr_scheduler

LR = 0.1
CASES = [
    (schedulers.LinearLR(LR), lambda o: lr_scheduler.LinearLR(o), 8),
    (schedulers.LinearLR(LR, start_factor=1.0, end_factor=0.1, total_iters=7),
     lambda o: lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=7), 10),
    (schedulers.PolynomialLR(LR, total_iters=6, power=2.0),
     lambda o: lr_scheduler.PolynomialLR(o, total_iters=6, power=2.0), 9),
    (schedulers.CosineWarmRestarts(LR, T_0=4, eta_min=0.01),
     lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=4, eta_min=0.01), 13),
    (schedulers.CosineWarmRestarts(LR, T_0=3, T_mult=2),
     lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2), 30),
    (schedulers.Cyclic(0.01, LR, step_size_up=3),
     lambda o: lr_scheduler.CyclicLR(o, 0.01, LR, step_size_up=3, cycle_momentum=False), 20),
    (schedulers.Cyclic(0.01, LR, step_size_up=2, step_size_down=5, mode="triangular2"),
     lambda o: lr_scheduler.CyclicLR(o, 0.01, LR, step_size_up=2, step_size_down=5,
                                     mode="triangular2", cycle_momentum=False), 25),
    (schedulers.Cyclic(0.01, LR, step_size_up=4, mode="exp_range", gamma=0.9),
     lambda o: lr_scheduler.CyclicLR(o, 0.01, LR, step_size_up=4, mode="exp_range",
                                     gamma=0.9, cycle_momentum=False), 20),
    (schedulers.OneCycle(LR, total_steps=20),
     lambda o: lr_scheduler.OneCycleLR(o, LR, total_steps=20, cycle_momentum=False), 20),
    (schedulers.OneCycle(LR, total_steps=17, pct_start=0.4, anneal_strategy="linear",
                         div_factor=10.0, final_div_factor=100.0),
     lambda o: lr_scheduler.OneCycleLR(o, LR, total_steps=17, pct_start=0.4,
                                       anneal_strategy="linear", div_factor=10.0,
                                       final_div_factor=100.0, cycle_momentum=False), 17),
    (schedulers.OneCycle(LR, total_steps=20, three_phase=True),
     lambda o: lr_scheduler.OneCycleLR(o, LR, total_steps=20, three_phase=True,
                                       cycle_momentum=False), 20),
]
IDS = [repr(case[0]) for case in CASES]


@pytest.mark.parametrize(("ours", "make", "steps"), CASES, ids=IDS)
def test_matches_torch_lr_sequence(ours, make, steps):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
    theirs = make(opt)
    expected = []
    for _ in range(steps):
        expected.append(opt.param_groups[0]["lr"])
        opt.step()
        theirs.step()
    got = np.array([ours(t) for t in range(steps)])
    # torch updates LinearLR/PolynomialLR/CosineWarmRestarts recursively: a few roundings
    assert_close(got, np.array(expected), dtype=np.float64, terms=4 * steps)


@pytest.mark.parametrize(("ours", "make", "steps"), CASES, ids=IDS)
def test_config_round_trip(ours, make, steps):
    twin = schedulers.from_config(json.loads(json.dumps(ours.get_config())))
    assert [twin(t) for t in range(steps)] == [ours(t) for t in range(steps)]


def test_get_by_name():
    built = schedulers.get("one_cycle", max_lr=1.0, total_steps=5)
    assert type(built) is schedulers.OneCycle and built(3) == schedulers.OneCycle(1.0, 5)(3)
    assert type(schedulers.get("cosine_warm_restarts", lr=1.0, T_0=2)) is (
        schedulers.CosineWarmRestarts)


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: schedulers.OneCycle(1.0, 5)(6), ValueError, "step 6 is past total_steps=5"),
    (lambda: schedulers.OneCycle(1.0, 5, anneal_strategy="exp"), ValueError,
     "'anneal_strategy'"),
    (lambda: schedulers.Cyclic(0.1, 1.0, mode="triangle"), ValueError, "'mode'"),
    (lambda: schedulers.CosineWarmRestarts(1.0, T_0=0), ValueError, "'T_0'"),
    (lambda: schedulers.LinearLR(1.0, start_factor=0.0), ValueError, "'start_factor'"),
    (lambda: schedulers.PolynomialLR(1.0, total_iters=0), ValueError, "'total_iters'"),
])
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()
