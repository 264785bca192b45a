"""``convert_torch(module, example_input)``: a torch module's structure and weights as a
handgrad graph ``Model``.

Why torch.fx rather than torch's ONNX exporter: fx records the module's own calls, so
every layer keeps the qualified name of its module (``layer1.0.conv1``) and
``from_torch(state_dict, model)`` loads later checkpoints by those names; BatchNorm
stays a trainable layer with its running statistics (an export folds it in evaluation
mode), and no exporter (onnxscript, its opset conversions) is needed.

How. torch.fx traces ``module`` into a graph of nodes (fx inlines ``nn.Sequential`` and
user modules down to the torch leaf modules; a subclass that keeps a converted module's
forward, as torchvision's ``Conv3DSimple``, is a leaf too); the graph is run once on
``example_input`` to learn every value (shapes, ``x.size(0)``). Each node becomes
handgrad layer calls: ``call_module`` nodes through :data:`MODULES` (named by the
module's qualified name; ``MultiheadAttention`` through
``torch_convert_attention.MODULE_CALLS``); functions and methods through one registry,
:data:`.torch_convert_functions.FUNCTIONS` (by name: reshapes, permutes, ``cat``,
``chunk``, ``getitem``, pooling, ``layer_norm``, ``stochastic_depth``, and the handlers
that :mod:`.torch_convert_resize`, :mod:`.torch_convert_maxvit` and
:mod:`.torch_convert_swin` register), else arithmetic (``Add``, ``Multiply``,
``Rescaling``) and the element-wise tables. Parameters and buffers read by ``get_attr``
are followed by :mod:`.torch_convert_attention` through views and index reads and
become ``Parameter`` layers named after them where they meet a tensor (ViT's class
token, a per-channel ``layer_scale``, a relative position bias table gathered by its
index buffer); ``F.layer_norm`` takes its module's weight and bias. The weights are then
loaded by ``from_torch(module.state_dict(), model)``, so conversion and later loads agree.

Layouts. handgrad's maps are channels-last. Each value carries its layout: ``"cf"``
(torch's (N, C, *S) held as handgrad's (N, *S, C)) or ``"plain"`` (as torch holds it).
Inputs of rank 4 and 5 are maps; an input of rank 3 is a signal (N, L, C) when a
channel-aware module (:data:`CHANNEL_MODULES`) reads it, else a sequence (N, T, F) that
stays. A channel-aware module reads a plain value through a ``Permute`` to
channels-last; a last-axis op (``Linear``) reads a map through a ``Permute`` to torch's
order. ``cat`` and ``mean`` over torch's dim 1 use handgrad's last axis. A flatten of a
map whose features feed only ``Linear`` layers (through element-wise ones) is a plain
``Flatten`` and the ``Linear``'s weight rows are permuted (as ``from_torch`` does); where
the order is the same (one channel, or 1x1 maps) it is a ``Reshape``; elsewhere the map
goes to torch's order first (``Permute``, then ``Reshape``): a transpose only where
torch's memory order matters. Outputs are returned in their layout (maps channels-last).

Anything else (an unknown module, function or method, a computation on a parameter) is
refused with a ValueError naming the node's target and its module path.
"""

from __future__ import annotations

import math

import numpy as np

from .. import layers as L
from ..layers.registry import REGISTRY
from ..layers.symbolic import input_tensor
from . import torch_convert_attention as attention
from . import torch_convert_maxvit, torch_convert_resize, torch_convert_swin  # noqa: F401
from .torch_convert_functions import FUNCTIONS, reshape
from .torch_convert_ops import (
    BINARY,
    CHANNEL_MODULES,
    MODULES,
    POINTWISE_METHODS,
    POINTWISE_MODULES,
    SCALAR,
    Value,
    binary_name,
    module_kind,
    pointwise_function,
)
from .torch_interop import from_torch

__all__ = ["convert_torch"]


def _converted(a):
    """Whether a node argument holds a converted tensor (or a list of them)."""
    if isinstance(a, (list, tuple)):
        return any(map(_converted, a))
    return isinstance(a, Value)


class _Converter:
    def __init__(self, module, example):
        import torch
        import torch.fx as fx

        class _PathTracer(fx.Tracer):  # records the module path of every node
            def create_node(tracer, *args, **kwargs):
                node = super().create_node(*args, **kwargs)
                node.meta["path"] = next(reversed(tracer.module_stack), "") \
                    if tracer.module_stack else ""
                return node

            def call_module(tracer, m, forward, args, kwargs):
                try:
                    tracer.path_of_module(m)
                except NameError:  # a module made inside forward (nn.ReLU()(x)): its calls
                    return forward(*args, **kwargs)
                return super().call_module(m, forward, args, kwargs)

            def is_leaf_module(tracer, m, qualname):  # and subclasses keeping the forward
                return super().is_leaf_module(m, qualname) or module_kind(type(m)) is not None

        self.torch, self.module = torch, module
        try:
            graph = _PathTracer().trace(module)
        except Exception as error:  # fx's own errors: data-dependent control flow, ...
            raise ValueError(f"convert_torch: torch.fx cannot trace {type(module).__name__} "
                             f"({type(error).__name__}: {error}); fx needs a forward without "
                             f"data-dependent control flow that calls only its own "
                             f"submodules") from error
        self.gm = fx.GraphModule(module, graph)
        self.examples = example if isinstance(example, tuple) else (example,)
        self.runtime = {}
        recorder = self

        class _Recorder(fx.Interpreter):
            def run_node(self, node):
                result = super().run_node(node)
                recorder.runtime[node] = result
                return result

        modes = [(m, m.training) for m in module.modules()]
        module.eval()  # a training run would move the running statistics
        try:
            with torch.no_grad():
                _Recorder(self.gm).run(*self.examples)
        finally:
            for m, training in modes:
                m.train(training)
        self.values, self.names, self.inputs, self.called = {}, set(), [], {}
        self.attributes = {}  # torch attribute name -> its Parameter layer
        self.owned = set()  # modules whose parameters a function node took (F.layer_norm)

    # ------------------------------------------------------------------ helpers
    def refuse(self, node, why):
        path = node.meta.get("path") or "(top level)"
        target = node.target if isinstance(node.target, str) else getattr(
            node.target, "__name__", repr(node.target))
        raise ValueError(f"convert_torch: node {node.name!r} ({node.op} {target}) in module "
                         f"{path!r} has no handgrad counterpart: {why}")

    def name(self, wanted):
        name, k = wanted, 1
        while name in self.names:
            name, k = f"{wanted}_{k}", k + 1
        self.names.add(name)
        return name

    def call(self, layer, node, ins, layout, spatial=None):
        """Call ``layer`` on the values ``ins``; the result has ``layout`` and the torch
        shape of ``node``'s recorded output."""
        if layer.name is None:
            layer.name = self.name(node.target if node.op == "call_module" else node.name)
        tensors = [v.tensor for v in ins]
        out = layer(tensors if len(tensors) > 1 else tensors[0])
        twin = layer.torch_twin
        if spatial is None:
            spatial = any(v.spatial for v in ins)
            if twin is not None:
                spatial = {"maps": True, "reset": False, "flatten": False}.get(
                    twin.layout, spatial)
        recorded = self.runtime[node]  # a recurrent module's (sequence, state): the sequence
        recorded = recorded[0] if isinstance(recorded, tuple) else recorded
        return Value(out, layout, tuple(recorded.shape), spatial)

    def as_layout(self, value, layout, node):
        """``value`` in ``layout``: a ``Permute`` between channels-last and torch's order."""
        if value.layout == layout or len(value.shape) < 3:
            return value
        if layout not in value.views:
            k = len(value.shape) - 2
            dims = (k + 1, *range(1, k + 1)) if layout == "plain" else (*range(2, k + 2), 1)
            layer = L.Permute(dims, name=self.name(f"{node.name}_to_{layout}"))
            value.views[layout] = Value(layer(value.tensor), layout, value.shape,
                                         value.spatial)
        return value.views[layout]

    def arg(self, node, a):
        """A node argument: its converted value or recorded constant; others as given."""
        import torch.fx as fx
        if isinstance(a, fx.Node):
            return self.values[a] if a in self.values else self.runtime[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(node, x) for x in a)
        if isinstance(a, dict):  # a dict output (torchvision's segmentation models)
            return {k: self.arg(node, x) for k, x in a.items()}
        return a

    # ------------------------------------------------------------------ nodes
    def placeholder(self, node):
        example = self.examples[len(self.inputs)]
        shape = tuple(example.shape)
        layout = "cf" if len(shape) in (4, 5) or (len(shape) == 3 and any(
            self.reads_channels(user) for user in node.users)) else "plain"
        per_example = shape[1:] if layout == "plain" else (*shape[2:], shape[1])
        ids = not example.is_floating_point()  # an Embedding's ids
        tensor = input_tensor(per_example, node.name, "int64" if ids else None)
        self.inputs.append(tensor)
        self.values[node] = Value(tensor, layout, shape)

    def reads_channels(self, node):
        return node.op == "call_module" and module_kind(type(
            self.gm.get_submodule(node.target))) in CHANNEL_MODULES

    def call_module(self, node):
        module = self.gm.get_submodule(node.target)
        kind = module_kind(type(module)) or type(module).__name__
        if kind in attention.MODULE_CALLS:
            self.values[node] = attention.MODULE_CALLS[kind](self, node, module)
            return
        x = self.values.get(node.args[0]) if node.args else None
        if not isinstance(x, Value) or len(node.args) != 1 or node.kwargs:
            self.refuse(node, f"{kind} is converted for one tensor argument")
        if node.target in self.called:  # a module called again shares its layer
            layer, layout = self.called[node.target]
            self.values[node] = self.call(layer, node, [self.as_layout(x, layout, node)], layout)
            return
        if kind == "Flatten":
            self.values[node] = self.flatten(node, x, module.start_dim, module.end_dim)
            return
        make = POINTWISE_MODULES.get(kind) or MODULES.get(kind)
        if make is None:
            self.refuse(node, f"torch.nn.{kind} has no handgrad twin here (converted: "
                              f"{', '.join(sorted({*MODULES, *POINTWISE_MODULES, 'Flatten'}))})")
        try:
            layer = make(module)
        except (TypeError, ValueError) as error:
            self.refuse(node, f"{kind} with {error}")
        layer.name = self.name(node.target)
        if kind in POINTWISE_MODULES:
            layout = x.layout
        else:
            layout = "cf" if kind in CHANNEL_MODULES and len(x.shape) >= 3 else "plain"
            x = self.as_layout(x, layout, node)
        self.called[node.target] = (layer, layout)
        self.values[node] = self.call(layer, node, [x], layout)

    def call_function(self, node):
        self.function(node, node.target)

    def call_method(self, node):
        self.function(node, node.target)

    def function(self, node, target):
        """A function or method node: its handler in :data:`FUNCTIONS` (by name), a view of
        parameters alone (:func:`attention.view`), arithmetic, an element-wise op, or a
        constant (``x.size(0)``); else refused."""
        args = [self.arg(node, a) for a in node.args]
        kwargs = {k: self.arg(node, a) for k, a in node.kwargs.items()}
        name = target if isinstance(target, str) else getattr(target, "__name__", "")
        handler = FUNCTIONS.get(name)
        if handler is not None and _converted([*args, *kwargs.values()]):
            if not handler.takes_parameters:
                args, kwargs = attention.materialized(self, node, args, kwargs)
            self.values[node] = handler(self, node, args, kwargs)
            return
        if attention.view(self, node, target, args, kwargs):
            return
        result = self.runtime[node]
        if not isinstance(result, self.torch.Tensor):  # x.size(0), x.shape: constants
            if not isinstance(result, (int, float, tuple, list)) and name != "_assert":
                self.refuse(node, f"it returns a {type(result).__name__}")
            return
        arithmetic = binary_name(node)
        if arithmetic:
            self.values[node] = self.arithmetic(node, arithmetic, args, kwargs)
            return
        make = POINTWISE_METHODS.get(target) if isinstance(target, str) else \
            pointwise_function(target)
        args, kwargs = attention.materialized(self, node, args, kwargs)
        tensors = [a for a in args if isinstance(a, Value)]
        if make is None or len(tensors) != 1:
            self.refuse(node, f"this function or method is not converted (converted: the "
                              f"element-wise ones, arithmetic, {', '.join(sorted(FUNCTIONS))})")
        self.values[node] = self.call(make(*args, **kwargs), node, tensors, tensors[0].layout)

    def output(self, node):
        outs = self.arg(node, node.args[0])
        if any(not isinstance(v, Value) for v in (
                outs.values() if isinstance(outs, dict) else
                outs if isinstance(outs, (list, tuple)) else [outs])):
            self.refuse(node, "an output that is not a tensor computed from the inputs")
        if isinstance(outs, dict):
            return {k: v.tensor for k, v in outs.items()}
        if isinstance(outs, (list, tuple)):
            return [v.tensor for v in outs]
        return outs.tensor

    # ------------------------------------------------------------------ ops
    def arithmetic(self, node, op, args, kwargs=None):
        x, y = attention.materialized(self, node, args, kwargs or {})[0][:2]
        if isinstance(x, Value) and isinstance(y, Value):
            if op not in BINARY:
                self.refuse(node, f"{op} of two tensors is not converted")
            layout = x.layout if x.layout == y.layout else "plain"
            ins = [self.as_layout(v, layout, node) for v in (x, y)]
            if len(x.shape) != len(y.shape):
                self.refuse(node, f"broadcasting of ranks {len(x.shape)} and {len(y.shape)}")
            return self.call(BINARY[op](), node, ins, layout)
        swapped = not isinstance(x, Value)
        tensor, number = (y, x) if swapped else (x, y)
        affine = SCALAR[op](float(number), swapped) if isinstance(number, (int, float)) \
            else None
        if affine is None:
            self.refuse(node, f"{op} with {type(number).__name__} {number!r}")
        return self.call(L.Rescaling(*affine), node, [tensor], tensor.layout)

    def flatten(self, node, x, start, end):
        rank = len(x.shape)
        if x.layout != "cf" or rank < 3 or start % rank != 1 or end % rank != rank - 1:
            return reshape(self, node, [x])
        size = math.prod(x.shape[1:])
        if x.shape[1] == 1 or math.prod(x.shape[2:]) == 1:  # the same order either way
            return self.call(L.Reshape((size,)), node, [x], "plain")
        if x.spatial and self.feeds_linear_only(node):
            return self.call(L.Flatten(), node, [x], "plain", spatial=False)
        return self.call(L.Reshape((size,)), node, [self.as_layout(x, "plain", node)],
                         "plain")

    def feeds_linear_only(self, node):
        """Whether every use of ``node`` is a ``Linear``, through element-wise modules."""
        for user in node.users:
            if user.op == "call_module":
                kind = type(self.gm.get_submodule(user.target)).__name__
                if kind == "Linear" or (kind in POINTWISE_MODULES
                                        and self.feeds_linear_only(user)):
                    continue
            if user.op == "call_function" and pointwise_function(user.target) is not None \
                    and self.feeds_linear_only(user):
                continue
            return False
        return True

    # ------------------------------------------------------------------ run
    def convert(self):
        outputs = None
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                self.values[node] = attention.attribute(self, node)
            elif node.op == "output":
                outputs = self.output(node)
            else:
                getattr(self, node.op)(node)
        dtype = next((p.dtype for p in self.module.parameters()), self.examples[0].dtype)
        dtype = np.dtype(str(dtype).replace("torch.", ""))
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"convert_torch: the module's parameters are {dtype}; "
                             f"expected float32 or float64")
        inputs = self.inputs[0] if len(self.inputs) == 1 else self.inputs
        model = REGISTRY["Model"](inputs, outputs, dtype=dtype)  # registered by handgrad.model
        used = tuple(f"{target}." for target in (*self.called, *self.owned))
        state = {k: v for k, v in self.module.state_dict().items()
                 if k.startswith(used) or k in self.attributes}
        return from_torch(state, model)


def convert_torch(module, example_input):
    """A graph ``Model`` of handgrad layers computing ``module`` (a ``torch.nn.Module``)
    with its weights, running statistics and dtype; ``example_input``: a tensor, or a
    tuple of tensors for several inputs, that the module is traced and run on. Maps
    (torch's (N, C, *S)) are channels-last (N, *S, C) in and out; see the module
    docstring for the layouts and for what is refused."""
    import torch
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"convert_torch: 'module' must be a torch.nn.Module; received "
                        f"{type(module).__name__}")
    examples = example_input if isinstance(example_input, tuple) else (example_input,)
    if not examples or not all(isinstance(t, torch.Tensor) for t in examples):
        raise TypeError(f"convert_torch: 'example_input' must be a tensor or a tuple of "
                        f"tensors; received {type(example_input).__name__}")
    return _Converter(module, example_input).convert()
