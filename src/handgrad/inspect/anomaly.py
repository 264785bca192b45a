"""Debugging aids: :func:`detect_anomaly` finds the first layer that produces a NaN or
an infinity, in the forward or the backward pass.

How it works: ``handgrad.layers.base.anomaly_hook`` is ``None`` in normal runs (one
global lookup per ``forward``/``backward``, nothing else). Inside the context manager
it is a checker called by ``Layer.forward`` with the layer's input and output, by the
containers (``Sequential``, a graph ``Model``) for each child whose own ``forward``
does not (:func:`reports_itself`: layers that override ``forward``, such as recurrent
and attention layers), and by ``Layer.backward`` with ``dy`` and ``(dx, parameter
gradients)`` before the gradients are accumulated. A container's output is its
children's, so it is not checked again: each activation is checked once. Layers are
checked as they run, so the first error names the first offending layer: in the
forward pass the one nearest the input, in the backward pass the one nearest the loss.
In a graph ``Model`` the error also names the node (the layer call, with
:func:`handgrad.layers.symbolic.call_labels`: ``name[k]`` for call ``k`` of a shared
layer) and the tensors it was called on (:func:`at_node`).
"""

from __future__ import annotations

import contextlib

from .._checks import array_module
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
    """Mark a container's ``forward`` whose output is one of its children's outputs,
    which the children report: a container holding it need not report it again."""
    forward.reports_anomalies = True
    return forward


def reports_itself(layer) -> bool:
    """Whether ``layer.forward`` gives its output to ``anomaly_hook`` itself, so that
    the container running it need not: ``Layer.forward`` does, and so do the forwards
    marked with :func:`reports_anomalies` (``Sequential``, ``Model``). Layers that
    override ``forward`` otherwise (recurrent, attention, embedding, user layers) do
    not."""
    forward = type(layer).forward
    return forward is base.Layer.forward or getattr(forward, "reports_anomalies", False)


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
    """The hook installed by :func:`detect_anomaly`."""

    def __init__(self, paths):
        self.paths = paths

    def __call__(self, layer, pass_name, upstream, produced):
        if pass_name == "forward":
            bad = _first_bad(produced, "output")
            upstream_name, source = "its input", "the data or an unchecked earlier step"
        else:
            dx, grads = produced
            bad = _first_bad(dx, "dx") or _first_bad(
                grads if layer.trainable else {}, "gradient")
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
def detect_anomaly(model=None, enabled=True):
    """Check every layer's forward output and backward gradients (dx and parameter
    gradients) for NaN/inf inside the ``with`` block; the first non-finite value raises
    :class:`AnomalyError` naming the layer (name and class) and the pass.

    ``model`` (optional) lets the message give the layer's path in a nested model.
    ``enabled=False`` switches checking off inside an outer block. Blocks nest; leaving
    one restores the previous state, also on error. Checking costs one extra pass over
    every activation and gradient; outside the block nothing is checked.
    """
    paths = {}
    if model is not None:
        paths = {id(layer): path for path, layer in model.walk() if path}
    previous = base.anomaly_hook
    base.anomaly_hook = _Checker(paths) if enabled else None
    try:
        yield
    finally:
        base.anomaly_hook = previous
