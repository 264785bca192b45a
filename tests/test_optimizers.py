"""Optimizers against torch.optim, in-place semantics, state round trips and errors."""

import json

import numpy as np
import pytest

from handgrad import optimizers
from handgrad.testing import assert_close, tolerance

from tolerances_composite import Trajectory

torch = pytest.importorskip("torch")

SHAPES = {"0.W": (3, 3, 2, 4), "0.b": (4,), "1.W": (5, 3)}
TORCH_NAMES = {"SGD": "SGD", "Adam": "Adam", "AdamW": "AdamW", "RMSProp": "RMSprop",
               "AdaGrad": "Adagrad"}

# Every hyper-parameter combination that changes the update formula.
CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.1)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.5, 0.8), eps=1e-3)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1, betas=(0.8, 0.9))),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
    ("RMSProp", dict(lr=0.01)),
    ("RMSProp", dict(lr=0.01, alpha=0.9, eps=1e-4, weight_decay=0.1)),
    ("RMSProp", dict(lr=0.01, centered=True)),
    ("RMSProp", dict(lr=0.01, momentum=0.9)),
    ("RMSProp", dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.1)),
    ("AdaGrad", dict(lr=0.1)),
    ("AdaGrad", dict(lr=0.1, lr_decay=0.2)),
    ("AdaGrad", dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-3)),
    ("AdaGrad", dict(lr=0.1, weight_decay=0.1, lr_decay=0.1)),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in CASES]


def make_params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}


def make_grads(params, rng):
    # Magnitudes vary per step so that AMSGrad's running maximum matters.
    scale = rng.uniform(0.2, 3.0)
    return {k: (scale * rng.standard_normal(p.shape)).astype(p.dtype) for k, p in params.items()}


def torch_optimizer(name, kwargs, tensors):
    kwargs = {k: v for k, v in kwargs.items() if k != "clipnorm"}
    return getattr(torch.optim, TORCH_NAMES[name])(tensors, **kwargs)


def run_both(name, kwargs, dtype, steps=6, lrs=None, clipnorm=None):
    """Run ours and torch's side by side; compare parameters after every step."""
    params = make_params(dtype)
    tensors = [torch.tensor(p, requires_grad=True) for p in params.values()]
    ours = getattr(optimizers, name)(**kwargs, clipnorm=clipnorm)
    theirs = torch_optimizer(name, kwargs, tensors)
    rng = np.random.default_rng(1)
    trajectory = Trajectory(params.values())
    for step in range(steps):
        grads = make_grads(params, rng)
        if lrs is not None:
            ours.lr = lrs[step]
            theirs.param_groups[0]["lr"] = lrs[step]
        for t, g in zip(tensors, grads.values()):
            t.grad = torch.tensor(g)
        if clipnorm is not None:
            torch.nn.utils.clip_grad_norm_(tensors, clipnorm)
        ours.step(params, grads)
        theirs.step()
        terms, scale = trajectory.step([t.detach().numpy() for t in tensors])
        for (key, p), t in zip(params.items(), tensors):
            assert_close(p, t.detach().numpy(), dtype=dtype, terms=terms, scale=scale,
                         what=f"{key} at step {step + 1}")
    assert ours.iterations == steps
    return ours, params


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_matches_torch(name, kwargs, dtype):
    run_both(name, kwargs, dtype)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSProp", "AdaGrad"])
def test_matches_torch_with_changing_lr(name):
    kwargs = {"SGD": dict(momentum=0.9, nesterov=True)}.get(name, {})
    run_both(name, kwargs, np.float64, lrs=[0.1, 0.05, 0.0, 0.2, 0.01, 0.07])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_clipnorm_matches_torch_clip_then_step(name, dtype):
    kwargs = {"SGD": dict(lr=0.1, momentum=0.9)}.get(name, dict(lr=0.01))
    run_both(name, kwargs, dtype, clipnorm=1.5)


def test_clipnorm_leaves_callers_grads_untouched():
    params = make_params(np.float64)
    grads = make_grads(params, np.random.default_rng(2))
    before = {k: g.copy() for k, g in grads.items()}
    optimizers.SGD(lr=0.1, clipnorm=0.1).step(params, grads)
    for k in grads:
        np.testing.assert_array_equal(grads[k], before[k])


def test_parameter_added_later_has_its_own_step_count():
    """Like torch, a parameter without a gradient for a while starts its bias correction at 1."""
    a0, b0 = np.linspace(-1, 1, 6), np.linspace(2, 3, 4)
    ours = optimizers.Adam(lr=0.1)
    params = {"a": a0.copy(), "b": b0.copy()}
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    theirs = torch.optim.Adam([ta, tb], lr=0.1)
    rng = np.random.default_rng(3)
    trajectory = Trajectory([ta.detach().numpy(), tb.detach().numpy()])
    for step in range(5):
        ga, gb = rng.standard_normal(6), rng.standard_normal(4)
        ta.grad = torch.tensor(ga)
        if step >= 2:
            tb.grad = torch.tensor(gb)
            ours.step(params, {"a": ga, "b": gb})
        else:
            ours.step({"a": params["a"]}, {"a": ga})
        theirs.step()
        terms, scale = trajectory.step([ta.detach().numpy(), tb.detach().numpy()])
    for key, t in (("a", ta), ("b", tb)):
        assert_close(params[key], t.detach().numpy(), dtype=np.float64, terms=terms, scale=scale,
                     what=key)
    assert ours.state_dict()["step/b"] == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_updates_in_place_keeping_identity_and_dtype(name, kwargs, dtype):
    params = make_params(dtype)
    ids = {k: id(p) for k, p in params.items()}
    before = {k: p.copy() for k, p in params.items()}
    opt = getattr(optimizers, name)(**kwargs)
    grads = make_grads(params, np.random.default_rng(4))
    opt.step(params, grads)
    for k, p in params.items():
        assert id(p) == ids[k] and p.dtype == dtype
        assert not np.array_equal(p, before[k])
    for key, value in opt.state_dict().items():
        assert isinstance(value, np.ndarray)
        expected = np.int64 if key == "iterations" or key.startswith("step/") else dtype
        assert value.dtype == expected, key


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_state_dict_round_trip_continues_bit_identically(name, kwargs):
    rng = np.random.default_rng(5)
    params = make_params(np.float32)
    all_grads = [make_grads(params, rng) for _ in range(6)]
    reference = getattr(optimizers, name)(**kwargs, clipnorm=2.0)
    for grads in all_grads[:3]:
        reference.step(params, grads)
    state = reference.state_dict()
    config = json.loads(json.dumps(reference.get_config()))
    resumed = optimizers.from_config(config)
    resumed.load_state_dict(state)
    assert resumed.get_config() == reference.get_config()
    assert resumed.iterations == 3 and state["iterations"].shape == ()
    for array in state.values():  # the state dict holds copies
        array[...] = 0
    params_resumed = {k: p.copy() for k, p in params.items()}
    for grads in all_grads[3:]:
        reference.step(params, grads)
        resumed.step(params_resumed, grads)
    for k in params:
        np.testing.assert_array_equal(params[k], params_resumed[k])
    assert resumed.state_dict().keys() == reference.state_dict().keys()


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_grad_norm_matches_torch(max_norm, dtype):
    grads = make_grads(make_params(dtype), np.random.default_rng(6))
    ids = {k: id(g) for k, g in grads.items()}
    tensors = [torch.tensor(g, requires_grad=True) for g in grads.values()]
    for t, g in zip(tensors, grads.values()):
        t.grad = torch.tensor(g)
    before = max(float(np.abs(g).max()) for g in grads.values())
    expected = torch.nn.utils.clip_grad_norm_(tensors, max_norm).item()
    total = optimizers.clip_grad_norm(grads, max_norm)
    assert isinstance(total, float)
    # the norm sums the squares of every entry; the clipped entries scale by max_norm / it
    terms = sum(g.size for g in grads.values())
    assert_close(total, expected, dtype=dtype, terms=terms, what="total norm")
    for (k, g), t in zip(grads.items(), tensors):
        assert id(g) == ids[k] and g.dtype == dtype
        assert_close(g, t.grad.numpy(), dtype=dtype, terms=terms, scale=before, what=k)
    norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
    assert norm <= max_norm + tolerance(dtype, terms, max_norm)


def test_lr_is_plain_attribute_and_get_builds_by_name():
    opt = optimizers.get("ADAMW", lr=0.5)
    assert isinstance(opt, optimizers.AdamW) and opt.lr == 0.5
    opt.lr = 0.25
    assert opt.get_config()["lr"] == 0.25
    assert optimizers.get(opt) is opt
    assert isinstance(optimizers.get("rmsprop"), optimizers.RMSProp)
    assert isinstance(optimizers.get({"name": "sgd", "momentum": 0.5}), optimizers.SGD)
    for name in ["sgd", "adam", "adamw", "rmsprop", "adagrad"]:
        opt = optimizers.get(name)
        clone = optimizers.from_config(json.loads(json.dumps(opt.get_config())))
        assert type(clone) is type(opt) and clone.get_config() == opt.get_config()


NAMES = ["sgd", "adam", "adamw", "rmsprop", "adagrad"]


@pytest.mark.parametrize("name", NAMES)
def test_learning_rate_is_the_keras_name_of_lr(name):
    opt = optimizers.get(name, learning_rate=0.5)
    assert opt.lr == opt.learning_rate == 0.5
    opt.learning_rate = 0.0  # what a Keras callback writes: it must reach the update
    assert opt.lr == 0.0 and opt.get_config()["lr"] == 0.0
    p = {"w": np.ones(3)}
    opt.step(p, {"w": np.full(3, 2.0)})
    np.testing.assert_array_equal(p["w"], 1.0)  # lr 0: no change (AdamW: p *= 1 - 0 wd)
    with pytest.raises(TypeError, match=r"received both 'learning_rate' \(Keras's name\) "
                                        r"and 'lr'"):
        optimizers.get(name, lr=0.1, learning_rate=0.2)


def test_a_callback_setting_learning_rate_stops_training():
    from handgrad import layers as L
    from handgrad.model import Sequential
    from handgrad.training.callbacks import Callback

    class Freeze(Callback):
        def on_train_begin(self, logs=None):
            self.model.optimizer.learning_rate = 0.0

    net = Sequential([L.Dense(2)], seed=0, input_shape=(3,), dtype="float64")
    net.compile("adam", "cross_entropy")
    before = {k: v.copy() for k, v in net.named_parameters().items()}
    x, y = np.random.default_rng(0).standard_normal((16, 3)), np.arange(16) % 2
    net.fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=[Freeze()])
    for key, value in net.named_parameters().items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)  # trained at 1e-3 before


@pytest.mark.parametrize("name", NAMES)
def test_setting_an_unknown_attribute_is_refused(name):
    opt = optimizers.get(name)
    with pytest.raises(AttributeError, match=rf"{type(opt).__name__} has no attribute 'lr_rate' "
                                             rf"to set.*known: \[.*'lr'.*'learning_rate'\]"):
        opt.lr_rate = 0.1
    opt.lr = 0.2  # known attributes stay settable
    opt.iterations += 1
    assert opt.lr == 0.2 and opt.iterations == 1 and not hasattr(opt, "lr_rate")


@pytest.mark.parametrize(("call", "match"), [
    (lambda p: optimizers.AdamW([{"params": p}], lr=1e-3),
     r"AdamW: param_groups\[0\]\['params'\] must be a list of parameter names or a dict"),
    (lambda p: optimizers.SGD(p, lr=0.1), r"SGD: received the parameters .* hyper-parameters "
     r"\(SGD\(lr=\.\.\.\)\) .*parameter groups name their parameters"),
    (lambda p: optimizers.Adam(iter(p)), r"Adam: received the parameters .*list_iterator"),
    (lambda p: optimizers.RMSProp(params=p), r"RMSProp: received the parameters"),
    (lambda p: optimizers.AdaGrad({"w": p[0]}), r"AdaGrad: received the parameters .*dict"),
])
def test_torch_style_parameters_first_say_how_to_give_them(call, match):
    with pytest.raises(TypeError, match=match):
        call([np.zeros(2)])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: optimizers.SGD(lr=-0.1), ValueError, "SGD: 'lr' must be .* >= 0; received -0.1"),
        (lambda: optimizers.SGD(lr="0.1"), TypeError, "'lr'"),
        (lambda: optimizers.SGD(lr=float("nan")), ValueError, "'lr'"),
        (lambda: optimizers.SGD(momentum=-1), ValueError, "'momentum'"),
        (lambda: optimizers.SGD(nesterov=True), ValueError, "nesterov=True needs momentum > 0"),
        (lambda: optimizers.SGD(momentum=0.9, nesterov=True, dampening=0.1), ValueError,
         "dampening == 0"),
        (lambda: optimizers.SGD(nesterov=1), TypeError, "'nesterov' must be a bool"),
        (lambda: optimizers.SGD(dampening=1.5), ValueError, "'dampening'"),
        (lambda: optimizers.SGD(weight_decay=-1e-4), ValueError, "'weight_decay'"),
        (lambda: optimizers.SGD(clipnorm=0), ValueError, "'clipnorm' must be .* > 0"),
        (lambda: optimizers.Adam(betas=(0.9, 1.0)), ValueError, r"'betas\[1\]' .* < 1"),
        (lambda: optimizers.Adam(betas=(-0.1, 0.9)), ValueError, r"'betas\[0\]'"),
        (lambda: optimizers.Adam(betas=0.9), TypeError, "'betas' must be a pair"),
        (lambda: optimizers.Adam(eps=0.0), ValueError, "'eps' must be .* > 0"),
        (lambda: optimizers.AdamW(weight_decay=-0.01), ValueError, "AdamW: 'weight_decay'"),
        (lambda: optimizers.Adam(amsgrad="yes"), TypeError, "'amsgrad'"),
        (lambda: optimizers.RMSProp(alpha=1.5), ValueError, "'alpha'"),
        (lambda: optimizers.RMSProp(momentum=-0.5), ValueError, "'momentum'"),
        (lambda: optimizers.RMSProp(centered=None), TypeError, "'centered'"),
        (lambda: optimizers.RMSProp(eps=-1.0), ValueError, "'eps'"),
        (lambda: optimizers.AdaGrad(lr_decay=-1), ValueError, "'lr_decay'"),
        (lambda: optimizers.AdaGrad(initial_accumulator_value=-1), ValueError,
         "'initial_accumulator_value'"),
        (lambda: optimizers.AdaGrad(eps=0), ValueError, "'eps'"),
        (lambda: optimizers.get("adamw2"), ValueError, r"unknown name 'adamw2'; .*'adagrad'"),
        (lambda: optimizers.get(3), TypeError, "expected a name"),
        (lambda: optimizers.get(optimizers.SGD(), lr=1.0), TypeError, "cannot be applied"),
        (lambda: optimizers.from_config({"lr": 0.1}), TypeError, "'name' key"),
        (lambda: optimizers.from_config({"name": "SGD", "betas": [0.9, 0.9]}), TypeError,
         r"unknown keys \['betas'\] for SGD"),
    ],
)
def test_bad_hyper_parameters(make, error, match):
    with pytest.raises(error, match=match):
        make()


def _step_errors():
    p = {"a": np.zeros((2, 3)), "b": np.zeros(3)}
    g = {"a": np.ones((2, 3)), "b": np.ones(3)}
    return [
        ((p, {"a": g["a"]}), ValueError, r"missing \['b'\], unexpected \[\]"),
        ((p, {**g, "c": np.ones(2)}), ValueError, r"missing \[\], unexpected \['c'\]"),
        ((p, {"a": np.ones((3, 2)), "b": g["b"]}), ValueError, r"shapes differ.*a: \(2, 3\) vs"),
        ((p, {"a": g["a"].astype(np.float32), "b": g["b"]}), TypeError, "has dtype float32"),
        ((p, {"a": g["a"], "b": np.ones(3, dtype=np.int64)}), TypeError, "float32 or float64"),
        (({"a": [0.0, 1.0]}, {"a": np.ones(2)}), TypeError, r"'params\['a'\]' must be an array"),
        (([np.zeros(2)], [np.ones(2)]), TypeError, "'params' must be a dict"),
        ((p, None), TypeError, "'grads' must be a dict"),
    ]


@pytest.mark.parametrize(("args", "error", "match"), _step_errors())
def test_bad_step_inputs(args, error, match):
    with pytest.raises(error, match=match):
        optimizers.Adam().step(*args)


def test_bad_lr_set_later_and_bad_state():
    params, grads = {"a": np.zeros(3)}, {"a": np.ones(3)}
    opt = optimizers.SGD(momentum=0.9)
    opt.lr = -1.0
    with pytest.raises(ValueError, match=r"SGD.step: 'lr'"):
        opt.step(params, grads)
    opt.lr = 0.1
    opt.step(params, grads)
    with pytest.raises(ValueError, match="state 'momentum_buffer' of 'a' has shape"):
        opt.step({"a": np.zeros(4)}, {"a": np.ones(4)})
    with pytest.raises(ValueError, match="unexpected key 'exp_avg/a'"):
        opt.load_state_dict({"iterations": np.array(1), "exp_avg/a": np.zeros(3)})
    with pytest.raises(TypeError, match="'iterations' entry"):
        opt.load_state_dict({"momentum_buffer/a": np.zeros(3)})
    with pytest.raises(ValueError, match=r"parameters \['a'\] lack some of the slots"):
        optimizers.Adam().load_state_dict({"iterations": np.array(1), "exp_avg/a": np.zeros(3)})


@pytest.mark.parametrize(
    ("grads", "max_norm", "error", "match"),
    [
        ({"a": np.ones(2)}, 0.0, ValueError, "'max_norm' must be .* > 0"),
        ({"a": np.ones(2)}, None, TypeError, "'max_norm'"),
        ({"a": [1.0, 2.0]}, 1.0, TypeError, r"'grads\['a'\]' must be an array"),
        ({"a": np.ones(2, dtype=np.int32)}, 1.0, TypeError, "float32 or float64"),
        ([np.ones(2)], 1.0, TypeError, "'grads' must be a dict"),
    ],
)
def test_bad_clip_grad_norm_inputs(grads, max_norm, error, match):
    with pytest.raises(error, match=f"clip_grad_norm: .*{match}"):
        optimizers.clip_grad_norm(grads, max_norm)
