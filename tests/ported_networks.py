"""One training step of a ported network against its torch definition.

A case gives a torch module (float64, seeded weights), a ``build(dtype)`` of the
handgrad twin (channels-last) and a batch. :func:`check_step` imports the torch weights
with ``handgrad.io.from_torch``, runs one training forward, the loss, the backward and
one optimizer step in handgrad, and compares with torch: the output, the loss, the input
gradient, every parameter gradient and every buffer (BatchNorm running statistics)
after the forward, by torch's names. Torch's results are brought into handgrad's names
and layouts by ``from_torch`` itself (into a float64 twin), and every torch parameter
and buffer must be compared. The optimizer step is checked on handgrad's own gradients:
torch's optimizer takes them (put back in torch's layout through the positions
``from_torch`` maps, :func:`positions`) and steps in float64; handgrad's weights after
its step are within ``UPDATE_ROUNDINGS`` roundings of the size of the weights and the
update.

Tolerance. The networks are too large to measure the condition of each result entry
by entry (``condition_bounds``), so it is measured by rounding: torch runs the step in
float64 and three times in float32 (inputs and weights rounded to nearest, then twice
moved by random fractions of an ulp first), and the largest ``|torch32 - torch64|`` is
what rounding to float32 does to that result. A result computed in ``dtype`` is allowed
``FACTOR`` times that, scaled by ``eps(dtype) / eps(float32)`` (both sides' errors and
the spread of the estimate), plus one rounding of the result (``tolerance(dtype, 1,
max|expected|)``). handgrad in either dtype is compared with torch in float64.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from handgrad.io import from_torch
from handgrad.testing import assert_close, finite_max, max_abs_error, tolerance

from tolerances_composite import UPDATE_ROUNDINGS

torch = pytest.importorskip("torch")
nn = torch.nn
FACTOR = 8.0
SAMPLES = 3  # float32 runs: inputs and weights rounded to nearest, then twice jittered


def torch_input(x, maps):
    """A handgrad input in torch's layout: channels first where ``maps``."""
    x = np.moveaxis(x, -1, 1) if maps else x
    return torch.tensor(np.ascontiguousarray(x))


def handgrad_output(t, maps):
    y = t.detach().numpy()
    return np.moveaxis(y, 1, -1) if maps else y


def run_torch(net, x, target, loss_fn, dtype, maps, jitter=None):
    """One training forward and backward of a copy of ``net`` in ``dtype``: {output,
    loss, dx} and the state dicts with the gradients and after the forward. ``jitter``:
    a Generator that moves ``x`` and every weight by a random part of an ulp of float32
    first, for another sample of float32 rounding."""
    net = copy.deepcopy(net).train()
    if jitter is not None:
        eps = np.finfo(np.float32).eps
        x = x * (1 + eps * jitter.uniform(-1, 1, x.shape)) if x.dtype.kind == "f" else x
        with torch.no_grad():
            for p in net.parameters():
                p.mul_(1 + eps * torch.tensor(jitter.uniform(-1, 1, tuple(p.shape))))
    net = net.to(getattr(torch, np.dtype(dtype).name))
    xt = torch_input(x.astype(dtype) if x.dtype.kind == "f" else x, maps)
    xt.requires_grad_(x.dtype.kind == "f")
    if target.dtype.kind == "f":  # a map target (an image) is moved as the input is
        target = torch_input(target.astype(dtype), maps and target.ndim > 2)
    else:
        target = torch.tensor(target)
    out = net(xt)
    loss = loss_fn(out, target)
    loss.backward()
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    return {"y": handgrad_output(out, maps), "loss": np.asarray(loss.item()),
            "dx": None if xt.grad is None else handgrad_output(xt.grad, maps),
            "grads": dict(state, **{k: p.grad for k, p in net.named_parameters()}),
            "buffers": state}


def torch_step(net, grads, optimizer):
    """The state dict of a float64 copy of ``net`` after one step of ``optimizer`` with
    the gradients ``grads`` ({torch name: array})."""
    net = copy.deepcopy(net).double()
    for name, p in net.named_parameters():
        p.grad = torch.tensor(grads[name])
    optimizer(net.parameters()).step()
    return net.state_dict()


def as_handgrad(twin, state, prefixes=None):
    """``state`` (torch names and layouts) as {handgrad name: float64 array}, through
    the float64 ``twin`` (overwritten)."""
    twin = from_torch(state, twin, prefixes=prefixes)
    return {k: v.copy() for k, v in {**twin.named_parameters(), **twin.named_buffers()}.items()}


SLOT = 2 ** 24  # entries per torch tensor that positions() can number


def positions(twin, state, prefixes=None):
    """{handgrad name: (torch name, flat indices)} of the entries ``from_torch`` maps:
    handgrad's array is the torch entry's ``.flatten()[indices]``. Each float entry of
    ``state`` is imported numbered (entry k's position j as ``k * SLOT + j``)."""
    keys = [k for k, v in state.items() if v.dtype.is_floating_point]
    numbered = dict(state, **{k: (torch.arange(state[k].numel(), dtype=torch.float64)
                                  + i * SLOT).reshape(state[k].shape)
                              for i, k in enumerate(keys)})
    found = as_handgrad(twin, numbered, prefixes)
    return {name: (keys[int(a.flat[0]) // SLOT], a.astype(np.int64) % SLOT)
            for name, a in found.items() if a.size}


def to_torch_layout(arrays, where, state):
    """{handgrad name: array} -> {torch name: float64 array} through :func:`positions`,
    each torch entry covered exactly once."""
    out = {}
    for name, array in arrays.items():
        key, index = where[name]
        assert key not in out and np.array_equal(np.sort(index, axis=None),
                                                 np.arange(state[key].numel())), name
        flat = np.empty(state[key].numel())
        flat[index.reshape(-1)] = array.reshape(-1)
        out[key] = flat.reshape(tuple(state[key].shape))
    return out


def run_handgrad(model, x, target, loss, optimizer):
    model.zero_grad()
    y = model.forward(x, training=True)
    value, dy = loss(y, target)
    dx = model.backward(dy)
    grads = {k: g.copy() for k, g in model.named_gradients().items()}
    buffers = {k: b.copy() for k, b in model.named_buffers().items()}
    optimizer.step(model.named_parameters(trainable_only=True), model.named_gradients())
    return {"y": y, "loss": np.asarray(value, y.dtype), "dx": None if x.dtype.kind != "f" else dx,
            "grads": grads, "buffers": buffers,
            "after step": {k: p.copy() for k, p in model.named_parameters().items()}}


def assert_matches(actual, wide, narrow, dtype, what):
    """``actual`` (computed in ``dtype``) against torch's float64 ``wide``, allowed
    FACTOR times torch's own float32 rounding: the largest ``|narrow - wide|`` of the
    samples ``narrow`` (module docstring)."""
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype} != {dtype}"
    assert actual.shape == wide.shape, f"{what}: shape {actual.shape} != {wide.shape}"
    ratio = np.finfo(dtype).eps / np.finfo(np.float32).eps
    spread = max(max_abs_error(sample, wide) for sample in narrow)
    bound = FACTOR * ratio * spread + tolerance(dtype, 1, finite_max(wide))
    error = max_abs_error(actual, wide)
    assert error <= bound, (f"{what}: max |error| {error:.3e} > {bound:.3e} (torch's float32 "
                            f"spread {spread:.3e}, {np.dtype(dtype).name})")


def check_step(case, dtype):
    """Compare one training step of ``case`` (a dict: ``net``, ``build``, ``x``,
    ``target``, ``torch_loss``, ``loss``, ``torch_optimizer``, ``optimizer``, ``maps``,
    optional ``prefixes`` for ``from_torch``) in ``dtype``; returns handgrad's results."""
    prefixes, net = case.get("prefixes"), case["net"]
    x = case["x"].astype(dtype) if case["x"].dtype.kind == "f" else case["x"]
    target = case["target"]
    target = target.astype(dtype) if target.dtype.kind == "f" else target
    args = (case["x"], case["target"], case["torch_loss"])
    wide = run_torch(net, *args, np.float64, case["maps"])
    jitter = np.random.default_rng(0)
    narrow = [run_torch(net, *args, np.float32, case["maps"], jitter if k else None)
              for k in range(SAMPLES)]
    model = from_torch(net, case["build"](dtype), prefixes=prefixes)
    ours = run_handgrad(model, x, target, case["loss"], case["optimizer"]())
    for key in ("y", "loss", "dx"):
        if wide[key] is not None:
            assert_matches(ours[key], wide[key], [r[key] for r in narrow], dtype, key)
    twin = case["build"](np.float64)
    where = positions(twin, wide["buffers"], prefixes)
    names = {k: torch_name for k, (torch_name, _) in where.items()}
    # every torch parameter has its handgrad gradient (and every buffer its handgrad twin)
    assert sorted(names[k] for k in ours["grads"]) == sorted(dict(net.named_parameters()))
    assert sorted(names[k] for k in ours["buffers"]) == sorted(
        k for k, _ in net.named_buffers() if not k.endswith("num_batches_tracked"))
    for key in ("grads", "buffers"):
        expected = as_handgrad(twin, wide[key], prefixes)
        samples = [as_handgrad(twin, r[key], prefixes) for r in narrow]
        for name, value in ours[key].items():
            assert_matches(value, expected[name], [s[name] for s in samples], dtype,
                           f"{key} {names[name]} (handgrad {name})")
    # the step: torch's optimizer, in float64, on handgrad's gradients
    grads = to_torch_layout(ours["grads"], where, wide["buffers"])
    before = as_handgrad(twin, wide["buffers"], prefixes)
    after = as_handgrad(twin, torch_step(net, grads, case["torch_optimizer"]), prefixes)
    for name, value in ours["after step"].items():
        scale = finite_max(before[name]) + max_abs_error(after[name], before[name])
        assert_close(value, after[name], dtype=dtype, terms=UPDATE_ROUNDINGS, scale=scale,
                     what=f"after step {names[name]} (handgrad {name})")
    return ours
