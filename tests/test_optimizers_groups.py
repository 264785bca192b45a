"""Parameter groups, clipvalue and Adamax/NAdam/RAdam/Adadelta against torch.optim."""

import json

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import optimizers
from handgrad.model import Sequential
from handgrad.testing import assert_close

from tolerances_composite import Trajectory

torch = pytest.importorskip("torch")

SHAPES = {"0.W": (3, 4), "0.b": (4,), "1.W": (4, 2), "1.b": (2,)}


def make_params(dtype=np.float64):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}


def compare(ours, make_theirs, steps=5, lrs=None, clipvalue=None, dtype=np.float64):
    """Step ours and torch's side by side on the same gradients; compare every step."""
    params = make_params(dtype)
    tensors = {k: torch.tensor(p, requires_grad=True) for k, p in params.items()}
    theirs = make_theirs(tensors)
    rng = np.random.default_rng(1)
    trajectory = Trajectory(params.values())
    with torch.autograd.set_grad_enabled(False):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # torch's scalar state (NAdam's mu) in float64
        try:
            for step in range(steps):
                scale = rng.uniform(0.2, 3.0)
                grads = {k: scale * rng.standard_normal(p.shape).astype(dtype)
                         for k, p in params.items()}
                for k, t in tensors.items():
                    t.grad = torch.tensor(grads[k])
                if clipvalue is not None:
                    torch.nn.utils.clip_grad_value_(list(tensors.values()), clipvalue)
                if lrs is not None:
                    ours.lr = lrs[step]
                    lrs_scheduler = theirs.lr_scheduler_step
                    lrs_scheduler()
                ours.step(params, grads)
                theirs.step()
                terms, scale_ = trajectory.step([t.numpy() for t in tensors.values()])
                for k, t in tensors.items():
                    assert_close(params[k], t.numpy(), dtype=dtype, terms=terms, scale=scale_,
                                 what=f"{k} at step {step + 1}")
        finally:
            torch.set_default_dtype(previous)
    return params


def continues_identically(reference, resumed, params, all_grads):
    """Both optimizers step copies of ``params`` through ``all_grads``: the same bits."""
    copy = {k: p.copy() for k, p in params.items()}
    for grads in all_grads:
        reference.step(params, grads)
        resumed.step(copy, grads)
    for k in params:
        np.testing.assert_array_equal(params[k], copy[k])


def test_two_groups_of_adamw_match_torch():
    groups = [{"params": ["0.W", "1.W"]}, {"params": ["0.b", "1.b"], "weight_decay": 0.0,
                                          "lr": 3e-2}]
    ours = optimizers.AdamW(groups, lr=1e-2, weight_decay=0.1)
    compare(ours, lambda t: torch.optim.AdamW(
        [{"params": [t["0.W"], t["1.W"]]},
         {"params": [t["0.b"], t["1.b"]], "weight_decay": 0.0, "lr": 3e-2}],
        lr=1e-2, weight_decay=0.1))


def test_group_lrs_scale_with_a_schedule_as_torch_schedulers_do():
    groups = [{"params": ["0.W", "0.b"]}, {"params": ["1.W", "1.b"], "lr": 0.05}]
    ours = optimizers.SGD(params=groups, lr=0.1, momentum=0.9)
    factors = [1.0, 0.5, 0.25, 0.125, 0.0625]

    def make(t):
        opt = torch.optim.SGD([{"params": [t["0.W"], t["0.b"]]},
                               {"params": [t["1.W"], t["1.b"]], "lr": 0.05}],
                              lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: factors[epoch])
        calls = iter(range(5))
        opt.lr_scheduler_step = lambda: next(calls) and sched.step()
        return opt
    compare(ours, make, lrs=[0.1 * f for f in factors])


def test_param_groups_helper_skips_decay_on_biases_and_norms():
    model = Sequential([L.Dense(3), L.LayerNorm(), L.Dense(2)], input_shape=(4,))
    decay, quiet = optimizers.param_groups(model, lr=1e-4)
    assert decay == {"params": ["dense_0.W", "dense_2.W"]}
    assert quiet == {"params": ["dense_0.b", "layer_norm_1.gamma", "layer_norm_1.beta",
                                "dense_2.b"], "weight_decay": 0.0, "lr": 1e-4}
    optimizer = optimizers.AdamW(optimizers.param_groups(model), lr=1e-3)
    gamma = model.named_parameters()["layer_norm_1.gamma"].copy()
    w = model.named_parameters()["dense_0.W"].copy()
    grads = {k: np.zeros_like(p) for k, p in model.named_parameters().items()}
    optimizer.step(model.named_parameters(), grads)  # zero gradients: only decay moves
    np.testing.assert_array_equal(model.named_parameters()["layer_norm_1.gamma"], gamma)
    assert not np.array_equal(model.named_parameters()["dense_0.W"], w)


def test_fit_trains_with_groups():
    rng = np.random.default_rng(0)
    x, y = rng.random((32, 4)), rng.random((32, 2))
    model = Sequential([L.Dense(2)], input_shape=(4,), dtype=np.float64)
    b = model.named_parameters()["dense_0.b"].copy()
    model.compile(optimizers.SGD([{"params": ["dense_0.W"]}, {"params": ["dense_0.b"],
                                                                "lr": 0.0}], lr=0.1), "mse")
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    np.testing.assert_array_equal(model.named_parameters()["dense_0.b"], b)


def test_group_state_and_config_round_trip():
    groups = [{"params": ["0.W", "1.W"], "betas": (0.8, 0.9)},
              {"params": ["0.b", "1.b"], "lr": 0.5, "amsgrad": True}]
    params = make_params()
    reference = optimizers.Adam(groups, lr=0.1)
    rng = np.random.default_rng(2)
    all_grads = [{k: rng.standard_normal(p.shape) for k, p in params.items()} for _ in range(4)]
    for grads in all_grads[:2]:
        reference.step(params, grads)
    reference.lr = 0.05  # a schedule moved it: the groups' lr scale from the built 0.1
    resumed = optimizers.from_config(json.loads(json.dumps(reference.get_config())))
    resumed.load_state_dict(reference.state_dict())
    assert resumed.param_groups == [{**g, "params": tuple(g["params"])} for g in
                                    json.loads(json.dumps(reference.param_groups))]
    continues_identically(reference, resumed, params, all_grads[2:])


@pytest.mark.parametrize(("groups", "error", "match"), [
    ([{"params": ["a"]}, {"params": ["a", "b"]}], ValueError, r"\['a'\] appear in more than"),
    ([{"params": ["a"], "momentun": 0.9}], ValueError, r"unknown options \['momentun'\]"),
    ([{"params": ["a"], "momentum": -1.0}], ValueError, r"param_groups\[0\]: .*'momentum'"),
    ([{"params": "a"}], TypeError, r"must be a list of parameter names"),
])
def test_bad_groups(groups, error, match):
    with pytest.raises(error, match=match):
        optimizers.SGD(groups, lr=0.1)


def test_a_parameter_in_no_group_is_refused():
    opt = optimizers.SGD([{"params": ["a"]}], lr=0.1)
    with pytest.raises(ValueError, match=r"parameters \['b'\] are in no parameter group"):
        opt.step({"a": np.zeros(2), "b": np.zeros(2)}, {"a": np.ones(2), "b": np.ones(2)})


def test_state_with_other_groups_is_refused():
    opt = optimizers.SGD([{"params": ["a"]}, {"params": ["b"]}], lr=0.1)
    state = optimizers.SGD(lr=0.1).state_dict()
    with pytest.raises(ValueError, match="do not match this optimizer's 2 groups"):
        opt.load_state_dict(state)


NEW = [
    ("Adamax", "Adamax", dict(lr=0.01)),
    ("Adamax", "Adamax", dict(lr=0.01, betas=(0.5, 0.8), eps=1e-3, weight_decay=0.1)),
    ("NAdam", "NAdam", dict(lr=0.01)),
    ("NAdam", "NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", "NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", "RAdam", dict(lr=0.01)),
    ("RAdam", "RAdam", dict(lr=0.01, betas=(0.5, 0.8), weight_decay=0.1)),
    ("RAdam", "RAdam", dict(lr=0.01, betas=(0.5, 0.8), weight_decay=0.1,
                            decoupled_weight_decay=True)),
    ("Adadelta", "Adadelta", dict()),
    ("Adadelta", "Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)),
]


@pytest.mark.parametrize(("name", "torch_name", "kwargs"), NEW,
                         ids=[f"{n}-{k}" for n, _, k in NEW])
def test_new_optimizers_match_torch(name, torch_name, kwargs):
    ours = getattr(optimizers, name)(**kwargs)
    compare(ours, lambda t: getattr(torch.optim, torch_name)(list(t.values()), **kwargs),
            steps=8)


@pytest.mark.parametrize(("name", "torch_name", "kwargs"), NEW,
                         ids=[f"{n}-{k}" for n, _, k in NEW])
def test_new_optimizers_state_round_trip(name, torch_name, kwargs):
    params = make_params()
    rng = np.random.default_rng(5)
    all_grads = [{k: rng.standard_normal(p.shape) for k, p in params.items()} for _ in range(6)]
    reference = getattr(optimizers, name)(**kwargs)
    for grads in all_grads[:3]:
        reference.step(params, grads)
    resumed = optimizers.get(name.lower(), **kwargs)
    resumed.load_state_dict(reference.state_dict(), params)
    continues_identically(reference, resumed, params, all_grads[3:])


def test_clipvalue_matches_torch_clip_grad_value():
    ours = optimizers.SGD(lr=0.1, momentum=0.9, clipvalue=0.5)
    compare(ours, lambda t: torch.optim.SGD(list(t.values()), lr=0.1, momentum=0.9),
            clipvalue=0.5)


def test_clipvalue_and_clipnorm_together_are_refused():
    with pytest.raises(ValueError, match="give 'clipnorm' or 'clipvalue', not both"):
        optimizers.Adam(clipnorm=1.0, clipvalue=1.0)


def test_a_saved_model_resumes_with_its_groups(tmp_path):
    from handgrad.io import load, save
    rng = np.random.default_rng(0)
    x, y = rng.random((16, 4)), rng.random((16, 2))
    model = Sequential([L.Dense(2)], input_shape=(4,), dtype=np.float64)
    model.compile(optimizers.Adam(optimizers.param_groups(model, lr=0.5), lr=0.01), "mse")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    save(model, tmp_path / "m.safetensors")
    twin = load(tmp_path / "m.safetensors")
    assert twin.optimizer.param_groups == model.optimizer.param_groups
    for each in (model, twin):
        each.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
    for a, b in zip(model.named_parameters().values(), twin.named_parameters().values()):
        np.testing.assert_array_equal(a, b)
