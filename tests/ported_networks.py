"""One training step of a ported network against its torch definition.

A case gives a torch module (float64, seeded weights), a ``build(dtype)`` of the
handgrad twin (channels-last) and a batch. :func:`check_step` imports the torch weights
with ``handgrad.io.from_torch``, runs one training forward, the loss, the backward and
one optimizer step in handgrad, and compares with torch: the output, the loss, the input
gradient, every parameter gradient, every buffer (BatchNorm running statistics) after
the forward and every parameter after the step. Torch's gradients, buffers and weights
are brought into handgrad's names and layouts by ``from_torch`` itself (into a float64
twin), so every torch entry is compared (``from_torch`` refuses unmatched entries).

Tolerance. The networks are too large to measure the condition of each result entry
by entry (``condition_bounds``), so it is measured by rounding: torch runs the same
step in float32 and float64, and ``max|torch32 - torch64|`` is what rounding to float32
(of the weights, the input and each operation) does to that result. A result computed
in ``dtype`` is allowed ``FACTOR`` times that, scaled by ``eps(dtype) / eps(float32)``
(both sides' errors and the spread of the estimate), plus one rounding of the result
(``tolerance(dtype, 1, max|expected|)``). handgrad in float32 is compared with torch in
float64, handgrad in float64 with torch in float64.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from handgrad.io import from_torch
from handgrad.testing import finite_max, max_abs_error, tolerance

torch = pytest.importorskip("torch")
nn = torch.nn
FACTOR = 8.0


def torch_input(x, maps):
    """A handgrad input in torch's layout: channels first where ``maps``."""
    x = np.moveaxis(x, -1, 1) if maps else x
    return torch.tensor(np.ascontiguousarray(x))


def handgrad_output(t, maps):
    y = t.detach().numpy()
    return np.moveaxis(y, 1, -1) if maps else y


def run_torch(net, x, target, loss_fn, optimizer, dtype, maps):
    """One training step of a copy of ``net`` in ``dtype``: {output, loss, dx} and the
    state dicts with the gradients, after the forward and after the step."""
    net = copy.deepcopy(net).to(getattr(torch, np.dtype(dtype).name)).train()
    xt = torch_input(x.astype(dtype) if x.dtype.kind == "f" else x, maps)
    xt.requires_grad_(x.dtype.kind == "f")
    if target.dtype.kind == "f":  # a map target (an image) is moved as the input is
        target = torch_input(target.astype(dtype), maps and target.ndim > 2)
    else:
        target = torch.tensor(target)
    opt = optimizer(net.parameters())
    opt.zero_grad()
    out = net(xt)
    loss = loss_fn(out, target)
    loss.backward()
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    grads = dict(state, **{k: p.grad for k, p in net.named_parameters()})
    opt.step()
    return {"y": handgrad_output(out, maps), "loss": np.asarray(loss.item()),
            "dx": None if xt.grad is None else handgrad_output(xt.grad, maps),
            "grads": grads, "buffers": state, "after step": net.state_dict()}


def as_handgrad(twin, state, prefixes=None):
    """``state`` (torch names and layouts) as {handgrad name: float64 array}, through
    the float64 ``twin`` (overwritten)."""
    twin = from_torch(state, twin, prefixes=prefixes)
    return {k: v.copy() for k, v in {**twin.named_parameters(), **twin.named_buffers()}.items()}


def torch_names(twin, state, prefixes=None):
    """{handgrad name: torch name} of the entries ``from_torch`` maps: each float entry
    of ``state`` imported as a constant, its index."""
    keys = [k for k, v in state.items() if v.dtype.is_floating_point]
    numbered = {k: torch.full_like(v, float(keys.index(k) + 1)) if k in keys else v
                for k, v in state.items()}
    twin = from_torch(numbered, twin, prefixes=prefixes)
    found = {**twin.named_parameters(), **twin.named_buffers()}
    return {name: keys[int(a.flat[0]) - 1] for name, a in found.items() if a.size}


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
    FACTOR times torch's own float32 rounding ``narrow - wide`` (module docstring)."""
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype} != {dtype}"
    assert actual.shape == wide.shape, f"{what}: shape {actual.shape} != {wide.shape}"
    ratio = np.finfo(dtype).eps / np.finfo(np.float32).eps
    spread = max_abs_error(narrow, wide)
    bound = FACTOR * ratio * spread + tolerance(dtype, 1, finite_max(wide))
    error = max_abs_error(actual, wide)
    assert error <= bound, (f"{what}: max |error| {error:.3e} > {bound:.3e} (torch's float32 "
                            f"spread {spread:.3e}, {np.dtype(dtype).name})")


def check_step(case, dtype):
    """Compare one training step of ``case`` (a dict: ``net``, ``build``, ``x``,
    ``target``, ``torch_loss``, ``loss``, ``torch_optimizer``, ``optimizer``, ``maps``,
    optional ``prefixes`` for ``from_torch``) in ``dtype``; returns handgrad's results."""
    prefixes = case.get("prefixes")
    x = case["x"].astype(dtype) if case["x"].dtype.kind == "f" else case["x"]
    target = case["target"]
    target = target.astype(dtype) if target.dtype.kind == "f" else target
    args = (case["torch_loss"], case["torch_optimizer"])
    wide = run_torch(case["net"], case["x"], case["target"], *args, np.float64, case["maps"])
    narrow = run_torch(case["net"], case["x"], case["target"], *args, np.float32, case["maps"])
    model = from_torch(case["net"], case["build"](dtype), prefixes=prefixes)
    ours = run_handgrad(model, x, target, case["loss"], case["optimizer"]())
    for key in ("y", "loss", "dx"):
        if wide[key] is not None:
            assert_matches(ours[key], wide[key], narrow[key], dtype, key)
    twin = case["build"](np.float64)
    names = torch_names(twin, wide["buffers"], prefixes)
    # every torch parameter has its handgrad gradient (and every buffer its handgrad twin)
    assert sorted(names[k] for k in ours["grads"]) == sorted(dict(case["net"].named_parameters()))
    assert sorted(names[k] for k in ours["buffers"]) == sorted(
        k for k, _ in case["net"].named_buffers() if not k.endswith("num_batches_tracked"))
    for key in ("grads", "buffers", "after step"):
        expected, spread = (as_handgrad(twin, r[key], prefixes) for r in (wide, narrow))
        for name, value in ours[key].items():
            assert_matches(value, expected[name], spread[name], dtype,
                           f"{key} {names[name]} (handgrad {name})")
    return ours
