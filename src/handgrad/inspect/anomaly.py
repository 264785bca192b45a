"""Debugging aids: :func:`detect_anomaly` finds the first layer of a model that produces a
NaN or an infinity, in the forward or the backward pass.

How it works: inside the context manager every layer of the model has a forward hook
and a backward hook (``Layer.register_forward_hook`` / ``register_backward_hook``, see
:mod:`handgrad.layers.hooks`) that check its output, and its ``dx`` and parameter
gradients; leaving the block removes them, so outside it nothing is checked and other
models (and other threads' models) never are. A container whose outputs are its
children's (``Sequential``, a graph ``Model``: :func:`reports_anomalies`) is not checked
again: each activation is checked once. Layers are checked as they run, so the first
error names the first offending layer: in the forward pass the one nearest the input, in
the backward pass the one nearest the loss (its gradients are already accumulated then).
In a graph ``Model`` the error also names the node (the layer call, with
:func:`handgrad.layers.symbolic.call_labels`: ``name[k]`` for call ``k`` of a shared
layer) and the tensors it was called on (:func:`at_node`).
"""

from __future__ import annotations

import contextlib

from .._checks import array_module, describe
from ..layers import base
from ..layers.symbolic import call_labels, tensor_labels


class AnomalyError(FloatingPointError):
    """A layer produced NaN or inf. ``layer`` is the layer object, ``pass_name``
    ``"forward"`` or ``"backward"``, ``what`` the offending value (``"output"``,
    ``"dx"``, ``"gradient 'W'"``), ``path`` its path in the model (or None). In a graph
    ``Model``, ``node`` is the innermost graph node (layer call) that raised and ``call``
    its call label (``"shared[1]"``: the second call of the shared layer ``shared``);
    both are None outside graphs."""

    def __init__(self, message, layer, pass_name, what, path=None):
        super().__init__(message)
        self.layer, self.pass_name, self.what, self.path = layer, pass_name, what, path
        self.node = self.call = None


def reports_anomalies(forward):
    """Mark a container's ``forward`` whose outputs are its children's outputs (and whose
    backward's input gradients are theirs): :func:`detect_anomaly` checks the children
    and not the container again."""
    forward.reports_anomalies = True
    return forward


def _ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def at_node(error, model, node):
    """Add to ``error`` (an :class:`AnomalyError` raised while the graph ``model`` ran
    ``node``) which node it was: its index, its call label, which call of a shared layer
    and the tensors it was called on. An error from a nested graph keeps its inner node
    and adds each outer one."""
    label = call_labels(model.nodes)[id(node)]
    calls = [other for other in model.nodes if other.layer is node.layer]
    which = (f", the {_ordinal(calls.index(node) + 1)} of {len(calls)} calls of the shared "
             f"{node.layer.label}" if len(calls) > 1 else "")
    sources = tensor_labels(model)
    on = ", ".join(repr(sources[t.uid]) for t in node.inputs)
    error.args = (f"{error.args[0]}; at node {model.nodes.index(node)} {label!r} of "
                  f"{model.label}{which}, called on {on}", *error.args[1:])
    if error.node is None:
        error.node, error.call = node, label
    return error


def _arrays(value, label):
    """(label, array) for every float array in a nested tuple/list/dict value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _arrays(item, f"{label} {key!r}")
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _arrays(item, f"{label}[{i}]" if len(value) > 1 else label)
    elif getattr(getattr(value, "dtype", None), "kind", "") in ("f", "c"):
        yield label, value


def _counts(array):
    """(number of NaN, number of inf) in ``array``."""
    xp = array_module(array)
    return int(xp.isnan(array).sum()), int(xp.isinf(array).sum())


def _first_bad(value, label):
    for name, array in _arrays(value, label):
        if not bool(array_module(array).isfinite(array).all()):
            return name, array
    return None


class _Checker:
    """The hooks that :func:`detect_anomaly` registers on each layer."""

    def __init__(self, paths):
        self.paths = paths

    @staticmethod
    def _checked(layer):
        return not getattr(type(layer).forward, "reports_anomalies", False)

    def forward(self, layer, x, y):
        if self._checked(layer):
            self.check(layer, "forward", x, y)

    def backward(self, layer, dy, dx):
        if self._checked(layer):
            self.check(layer, "backward", dy, (dx, layer.gradients if layer.trainable else {}))

    def check(self, layer, pass_name, upstream, produced):
        if pass_name == "forward":
            bad = _first_bad(produced, "output")
            upstream_name, source = "its input", "the data or an unchecked earlier step"
        else:
            dx, grads = produced
            bad = _first_bad(dx, "dx") or _first_bad(grads, "gradient")
            upstream_name, source = "the upstream gradient dy", "the loss or a later layer"
        if bad is None:
            return
        what, array = bad
        nans, infs = _counts(array)
        path = self.paths.get(id(layer))
        where = f" (at {path!r} in the model)" if path and path != layer.name else ""
        cause = (f"{upstream_name} already held NaN/inf (from {source})"
                 if _first_bad(upstream, "") is not None else f"{upstream_name} was finite")
        raise AnomalyError(
            f"detect_anomaly: the {pass_name} pass of {layer.label}{where} produced "
            f"{nans} NaN and {infs} inf values in its {what} (shape "
            f"{tuple(array.shape)}); {cause}", layer, pass_name, what, path)


@contextlib.contextmanager
def detect_anomaly(model, enabled=True):
    """Check the forward output and backward gradients (dx and parameter gradients) of
    ``model`` (a layer or a model) and of every layer in it for NaN/inf inside the
    ``with`` block; the first non-finite value raises :class:`AnomalyError` naming the
    layer (name, class and path in ``model``) and the pass.

    ``enabled=False`` checks nothing (``detect_anomaly(model, enabled=debug)``). Blocks
    nest, each adding its checks; leaving one removes its hooks, also on error. Checking
    costs one extra pass over every activation and gradient; outside the block nothing
    is checked. Only ``model``'s layers are checked (hooks are per layer).
    """
    if not isinstance(model, base.Layer):
        raise TypeError(f"detect_anomaly: 'model' must be the handgrad layer or model to "
                        f"check; received {describe(model)}")
    handles = []
    try:
        if enabled:
            checker, seen = _Checker({id(layer): path for path, layer in model.walk()
                                      if path}), set()
            for _, layer in model.walk():
                if id(layer) not in seen:
                    seen.add(id(layer))
                    handles += [layer.register_forward_hook(checker.forward),
                                layer.register_backward_hook(checker.backward)]
        yield
    finally:
        for handle in handles:
            handle.remove()
