"""The WGAN-GP gradient penalty and its parameter gradient, by hand (no autograd).

For a critic ``C`` with one output per example and ``g_i = dC(x_i)/dx_i``::

    P = weight * mean_i (||g_i||_2 - 1)^2
    q_0 = dP/dg_i = weight * 2 (||g_i|| - 1) / N * g_i / ||g_i||      (0 where g_i = 0)

``dP/d theta`` is reverse-over-reverse through the chain ``h_l = f_l(h_{l-1})``, ``h_0 = x``,
``C = h_L``, whose first backward is ``g_{l-1} = B_l(g_l)`` with ``g_L = 1``:

1. forward, keeping the caches;
2. down: ``g_{l-1} = layer_l.input_gradient(g_l)`` (caches kept);
3. up: ``q_l, s_{l-1} = layer_l.double_backward(q_{l-1}, g_l)``; ``q_l = dP/dg_l``,
   ``s_{l-1}`` = dP/dh_{l-1} through ``B_l``, and dP/d theta_l through ``B_l`` is added;
4. down: ``r_L = 0``, ``r_{l-1} = layer_l.backward(r_l) + s_{l-1}`` (the ordinary backward
   adds dP/d theta_l through the forward, and consumes the caches).
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, float_array
from .._hyper import number
from ..layers import Layer
from ..layers.second_order import double_backward_layers
from ..model import Model

_OP = "gradient_penalty"


def _graph_chain(model):
    """The nodes of a graph Model that is a chain (one input, one output, each node fed
    by the one before), in order; else a TypeError."""
    tensor = model.inputs[0]
    is_chain = len(model.inputs) == 1 and len(model.outputs) == 1
    for node in model.nodes:
        is_chain = (is_chain and len(node.inputs) == 1 and len(node.outputs) == 1
                    and node.inputs[0].uid == tensor.uid)
        tensor = node.outputs[0]
    if not (is_chain and model.outputs[0].uid == tensor.uid):
        raise TypeError(f"{_OP}: a graph Model critic must be a chain (one input, one output, "
                        f"each layer fed by the one before); {model.label} is not")
    return model.nodes


def _chain(critic):
    """The leaf layers that ``critic``'s forward runs, in order."""
    if critic.chain:  # Sequential
        return [leaf for _, child in critic.children() for leaf in _chain(child)]
    if isinstance(critic, Model):
        return [leaf for node in _graph_chain(critic) for leaf in _chain(node.layer)]
    if not critic.supports_double_backward():
        raise TypeError(f"{_OP}: {critic.label} has no second-order (double) backward pass; "
                        f"supported: {', '.join(double_backward_layers())}")
    return [critic]


def _checked_layers(critic):
    layers = _chain(critic)
    seen = set()
    for layer in layers:
        if id(layer) in seen:
            raise TypeError(f"{_OP}: the critic calls {layer.label} more than once (shared "
                            f"weights), which the second-order pass does not support")
        seen.add(id(layer))
    return layers


def _penalty_and_seed(g, weight):
    """(P, q_0 = dP/dg) for input gradients ``g`` (N, ...)."""
    n = g.shape[0]
    norms = np.sqrt(np.sum(np.square(g.reshape(n, -1)), axis=1))
    gaps = norms - 1.0
    penalty = weight * float(np.mean(np.square(gaps, dtype=np.float64)))
    scale = np.divide((2.0 * weight / n) * gaps, norms, out=np.zeros_like(norms),
                      where=norms > 0)
    return penalty, g * scale.reshape(n, *([1] * (g.ndim - 1)))


def _second_order_pass(layers, x, weight, live):
    """Steps 1-4 of the module docstring; ``live`` lists the layers whose cache is kept."""
    h = x
    for layer in layers:
        h = layer.forward(h, training=True)
        live.append(layer)
    if h.shape not in ((x.shape[0],), (x.shape[0], 1)):
        raise ValueError(f"{_OP}: the critic must give one output per example, shape "
                         f"({x.shape[0]}, 1) or ({x.shape[0]},); it gave {tuple(h.shape)}")
    upstream, g = [], np.ones_like(h)
    for layer in reversed(layers):
        upstream.append(g)
        g = layer.input_gradient(g)
    penalty, q = _penalty_and_seed(g, weight)
    extras = []
    for layer, dy in zip(layers, reversed(upstream)):
        q, extra = layer.double_backward(q, dy)
        extras.append(extra)
    r = np.zeros_like(h)
    for layer, extra in zip(reversed(layers), reversed(extras)):
        r = layer.backward(r)
        live.pop()
        if extra is not None:
            r = r + extra
    return penalty


def gradient_penalty(critic, x, weight=10.0):
    """WGAN-GP's ``P = weight * mean_i (||dC(x_i)/dx_i||_2 - 1)^2`` and ``dP/d theta``.

    ``critic``: a chain of layers with a second-order pass (a ``Sequential``, possibly
    nested, a chain-shaped graph ``Model``, or one layer) giving one output per example,
    (N, 1) or (N,). ``x``: (N, ...) of the critic's dtype. ``weight``: finite, >= 0.
    Returns ``(penalty, grads)``: a float and ``{name: dP/d parameter}`` with the keys of
    ``critic.named_parameters()`` (zeros for frozen layers). The critic is left as found:
    its gradients are restored and the caches this call pushed are consumed or dropped.
    Forward runs in training mode (the supported layers behave the same in both).
    """
    if not isinstance(critic, Layer):
        raise TypeError(f"{_OP}: 'critic' must be a handgrad Layer or model; received "
                        f"{describe(critic)}")
    weight = number(_OP, "weight", weight, low=0.0)
    x = float_array(_OP, "x", x)
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{_OP}: 'x' must be (N, ...) with N >= 1 examples; received an "
                         f"array of shape {tuple(x.shape)}")
    critic.ensure_built(x.shape[1:])
    if x.dtype != critic.dtype:
        raise TypeError(f"{_OP}: 'x' must have the critic's dtype {critic.dtype}; received "
                        f"{x.dtype}")
    layers = _checked_layers(critic)
    saved = {key: grad.copy() for key, grad in critic.named_gradients().items()}
    critic.zero_grad()
    live = []
    try:
        penalty = _second_order_pass(layers, x, weight, live)
        grads = {key: grad.copy() for key, grad in critic.named_gradients().items()}
    finally:
        for layer in reversed(live):
            layer.discard_cache()
        for key, grad in critic.named_gradients().items():
            grad[...] = saved[key]
    return penalty, grads
