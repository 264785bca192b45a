"""PyTorch layouts: which handgrad layers have torch twins, and how their weights map
(used by :mod:`.torch_interop`'s ``from_torch`` and ``to_torch_state_dict`` and by
the ONNX export).

Each layer declares its torch twin (``torch_twin``, a
:class:`handgrad.layers.declarations.TorchTwin`: module, parameter layout, effect on the
layout after it); nothing here tests a layer's class. The handgrad layers that hold
weights (parameters or running statistics) are walked in order, entering chains
(``Sequential``: children by index, as ``nn.Sequential``) and the containers that declare
a ``torch_walk`` (``Residual``: ``block.`` then ``shortcut.``; graph ``Model`` s: nodes in
topological order, children by layer name, a shared layer once), which receive the
:class:`Walker`. Each gives a :class:`Leaf`: its path, its torch module prefix and one
:class:`Rule` per torch entry. A layout state follows the tensors (along a chain, along
each tensor of a graph) so that a ``Dense`` after a ``Flatten`` of maps reorders its rows.

Layouts (handgrad -> torch; ``.T`` is a transpose, ``g`` the groups)::

    handgrad layer (torch twin)   handgrad                   torch
    Dense (Linear)                W (F_in, F_out), b         weight (F_out, F_in) = W.T, bias
    SparseEvolution (Linear)      W, b; mask kept            weight = (W * mask).T, bias
    Conv1D (Conv1d)               W (K, C_in/g, C_out)       weight (C_out, C_in/g, K)
    Conv2D (Conv2d)               W (KH, KW, C_in/g, C_out)  weight (C_out, C_in/g, KH, KW)
    Conv3D (Conv3d)               W (KD, KH, KW, C_in/g,     weight (C_out, C_in/g, KD, KH,
                                  C_out)                     KW)
    ConvTranspose1D/2D/3D         W (*K, C_out/g, C_in)      weight (C_in, C_out/g, *K)
      (ConvTranspose1d/2d/3d)     every conv weight: the two channel axes swapped and
                                  moved in front of the kernel axes; b = bias
    BatchNorm, InstanceNorm,      gamma, beta (C,)           weight, bias
      GroupNorm, LayerNorm        running_mean, running_var  running_mean, running_var;
                                                             num_batches_tracked: ignored on
                                                             import, 0 on export (BatchNorm
                                                             with momentum=None: its counter,
                                                             both ways)
    RMSNorm (RMSNorm)             gamma                      weight (as LayerNorm's)
    Embedding                     W (V, D)                   weight (V, D)
    TiedDense (Linear whose       the Embedding's W (V, D),  weight (V, D) = W (may be left
      weight is the embedding's)  b                          out), bias
    RNN, LSTM, GRU, BiLSTM        W_ih_l{k}[_reverse]        weight_ih_l{k}[_reverse] = W_ih.T
                                  W_hh_l{k}[_reverse]        weight_hh_l{k}[_reverse] = W_hh.T
                                  b_ih_l{k}, b_hh_l{k}       bias_ih_l{k}, bias_hh_l{k}
                                  (gate order is torch's: LSTM i,f,g,o; GRU r,z,n)
    MultiHeadAttention            W_in (E, 3E), b_in (3E,)   in_proj_weight = W_in.T,
      packed                                                 in_proj_bias
      packed=False, kdim = vdim   W_q, W_k, W_v (E, E)       in_proj_weight = [W_q W_k W_v].T
      = E (torch packs them)
      kdim or vdim != E           W_q, W_k (kdim, E),        q_proj_weight = W_q.T,
                                  W_v (vdim, E)              k_proj_weight, v_proj_weight
      packed=False                b_q, b_k, b_v (E,)         in_proj_bias = [b_q b_k b_v]
                                  W_out (E, E), b_out        out_proj.weight = W_out.T, .bias
    Parameter (a tensor held by   P                          <layer name> (the layer named
      a module: class_token)                                 ``encoder.pos_embedding`` in a
                                                             graph is that torch entry)

Flattened channels-last maps: torch flattens a (C, *S) map, handgrad a (*S, C) map,
so after a ``Flatten`` of convolution or pooling output the flattened feature axis
is reordered from (*S, C) to (C, *S): the rows of the next ``Dense`` ``W`` and the
vectors of a batch or layer norm in between (activations and dropout pass the
order on). A ``LayerNorm`` over a whole (*S, C) map has its parameters moved to
(C, *S). A ``GroupNorm`` of flattened maps and a ``LayerNorm`` over some but not
all axes of a map compute something else than any torch twin and raise an error,
as does ``WaveNetBlock``. ``Reshape`` output is taken as it is. Torch inputs are
the channels-first twins of handgrad's: (N, C, L), (N, C, H, W), (N, C, D, H, W); sequences are
batch-first in both.

``to_torch_state_dict(model)`` returns torch tensors (copies); with ``numpy=True`` it
returns NumPy arrays and needs no torch (``handgrad.io.safetensors.write`` turns them
into a file that ``safetensors.torch.load_file`` reads).
"""


from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..layers import REGISTRY
from ..layers.declarations import COUNTER, FLATTEN, MAPS, RESET, Layout, introduced
from ..layers.symbolic import GraphNetwork

__all__ = ["COUNTER", "Leaf", "Rule", "Walker", "weight_leaves"]


@dataclass(frozen=True)
class Rule:
    """torch entry ``name`` = the handgrad arrays ``keys`` joined on their last axis, with
    the leading (feature) axis reordered from (*S, C) to (C, *S) when ``flat_shape`` (the
    (*S, C) shape) is given, then transposed by ``perm`` (None: as is)."""

    name: str
    keys: tuple
    perm: tuple | None = None
    flat_shape: tuple | None = None
    optional: bool = False  # a tied weight: a torch file may hold it once, elsewhere

    def to_torch(self, arrays):
        a = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=-1)
        if self.flat_shape:
            a = a.reshape(*self.flat_shape, *a.shape[1:])
            a = np.moveaxis(a, len(self.flat_shape) - 1, 0).reshape(-1, *a.shape[len(
                self.flat_shape):])
        return a if self.perm is None else a.transpose(self.perm)

    def from_torch(self, t, shapes):
        """The handgrad arrays (of ``shapes``) from a torch array of the expected shape."""
        a = t if self.perm is None else t.transpose(np.argsort(self.perm))
        if self.flat_shape:
            channels_first = (self.flat_shape[-1], *self.flat_shape[:-1])
            a = a.reshape(*channels_first, *a.shape[1:])
            a = np.moveaxis(a, 0, len(self.flat_shape) - 1).reshape(-1, *a.shape[len(
                self.flat_shape):])
        if len(shapes) == 1:
            return [a]
        return np.split(a, np.cumsum([shape[-1] for shape in shapes])[:-1], axis=-1)


@dataclass
class Leaf:
    """A handgrad layer with weights, its path, its torch module prefix and rules, and
    inside a graph ``Model`` its ``named`` path (the names of the torch submodules that
    lead to its twin from the graph's, e.g. ``"shared."``; None outside a graph)."""

    layer: object
    path: str
    prefix: str | None
    rules: list
    counter: bool
    named: str | None = None

    def arrays(self, keys):
        tied = getattr(self.layer, "tied_parameters", {})
        return [self.layer.parameters.get(k, self.layer.buffers.get(k, tied.get(k)))
                for k in keys]


def _twin_names():
    return ", ".join(name for name, cls in sorted(REGISTRY.items())
                     if cls.torch_twin is not None and cls.torch_twin.has_params)


def layer_rules(layer, state):
    """(rules, has a step counter) of one layer from its declared torch twin; updates the
    layout ``state`` (a dict: ``flat``, ``spatial``) by the twin's layout effect."""
    twin = layer.torch_twin
    if twin is None:
        if layer.parameters or layer.buffers:
            raise ValueError(f"{layer.label} has weights but no torch twin (interop covers "
                             f"{_twin_names()})")
        return [], False
    entries = twin.params(layer, Layout(state.get("flat"), bool(state.get("spatial"))))
    rules = [Rule(p.name, p.keys, p.perm, state.get("flat") if p.features else None,
                  p.optional) for p in entries if p.keys]
    counter = any(not p.keys for p in entries)
    if twin.layout == RESET:
        state.clear()
    elif twin.layout == MAPS:
        state.clear()
        state["spatial"] = True
    elif twin.layout == FLATTEN and state.get("spatial"):
        state["flat"] = tuple(layer.input_shape)
        state["spatial"] = False
    return rules, counter


def _merged_state(layer, states):
    """The layout state of a call of ``layer`` on several tensors (a merge): theirs when
    they agree; features flattened from maps cannot be merged with others."""
    if all(state == states[0] for state in states):
        return dict(states[0])
    if any(state.get("flat") for state in states):
        raise ValueError(f"{layer.label} merges features flattened from channels-last maps "
                         f"with other features; it has no torch twin")
    return {"spatial": True} if any(state.get("spatial") for state in states) else {}


class Walker:
    """Walks a model and appends the :class:`Leaf` of every layer with weights to
    ``leaves``; ``path``, ``prefix`` and ``named`` (the path of names below the nearest
    graph ``Model``, None outside one) locate the layer being walked. A container's
    ``torch_walk(walker, layouts) -> layouts`` receives it (layouts: the layout states
    of its inputs, lists of dicts, updated in place along a chain)."""

    def __init__(self, leaves, path="", prefix="", named=None):
        self.leaves, self.path, self.prefix, self.named = leaves, path, prefix, named

    def _inner(self, name, torch_name=None, leaves=None, graph=False):
        """The walker of the child ``name`` (torch: ``torch_name``, default the same);
        ``graph``: a node of a graph, named from the graph's named path."""
        torch_name = name if torch_name is None else torch_name
        named = self.named if self.named is not None or not graph else ""
        return Walker(self.leaves if leaves is None else leaves, f"{self.path}{name}.",
                      f"{self.prefix}{torch_name}.",
                      None if named is None else f"{named}{torch_name}.")

    def child(self, name, layer, state):
        """Walk the child ``name`` of the current container on the layout ``state``."""
        self._inner(name).visit(layer, state)

    def visit(self, layer, state):
        """Walk ``layer`` as a step of a chain: ``state`` goes on to the next step."""
        if layer.torch_walk is not None:
            outs = layer.torch_walk(self, [state])
            if len(outs) != 1:
                raise self._not_a_step(layer)
            state.clear()
            state.update(outs[0])
        elif layer.chain:  # as torch's nn.Sequential, which names its modules by index
            for index, (name, child) in enumerate(layer.children()):
                self._inner(name, index).visit(child, state)
        elif any(True for _ in layer.children()):
            entered = introduced(REGISTRY, "chain") + introduced(REGISTRY, "torch_walk")
            raise ValueError(f"{layer.label} ({type(layer).__name__}) has no torch twin "
                             f"(interop enters {', '.join(entered)} and graph Models)")
        else:
            rules, counter = layer_rules(layer, state)
            if any(not rule.name for rule in rules):
                self.leaves.append(self._attribute(layer, rules, counter))
            elif rules:
                self.leaves.append(Leaf(layer, self.path, self.prefix, rules, counter,
                                        self.named))

    def _attribute(self, layer, rules, counter):
        """The leaf of a layer whose tensor is an attribute of a torch module (an entry
        with an empty name: a ``Parameter`` named ``encoder.pos_embedding``): the layer's
        own name (its path below the graph) is the entry's name."""
        named = self.named if self.named is not None else self.prefix
        prefix = self.prefix[:len(self.prefix) - len(named)]
        rules = [replace(rule, name=named[:-1]) if not rule.name else rule for rule in rules]
        return Leaf(layer, self.path, prefix, rules, counter,
                    None if self.named is None else "")

    @staticmethod
    def _not_a_step(layer):
        return ValueError(f"{layer.label} has several inputs or outputs, so it cannot be a "
                          f"step of a chain")

    def graph(self, model, states):
        """Walk the nodes of a graph ``model`` in topological order; ``states`` are the
        layout states of its inputs, the states of its outputs are returned. A layer is
        named by its name (its torch twin is the submodule of that name); a shared layer
        is walked at its first call, and a later call must see the same layouts."""
        if len(states) != len(model.inputs):
            raise self._not_a_step(model)
        held = {t.uid: state for t, state in zip(model.inputs, states)}
        first_calls = {}
        for node in model.nodes:
            layer, ins = node.layer, [held[t.uid] for t in node.inputs]
            target = [] if id(layer) in first_calls else self.leaves
            start = len(target)
            inner = self._inner(layer.name, leaves=target, graph=True)
            if layer.torch_walk is not None:
                outs = layer.torch_walk(inner, [dict(state) for state in ins])
            else:
                state = dict(ins[0]) if len(ins) == 1 else _merged_state(layer, ins)
                inner.visit(layer, state)
                outs = [state] * len(node.outputs)
            if id(layer) not in first_calls:
                first_calls[id(layer)] = target[start:]
            elif [(leaf.path, leaf.rules) for leaf in target] != [
                    (leaf.path, leaf.rules) for leaf in first_calls[id(layer)]]:
                raise ValueError(f"{layer.label} is shared by calls on tensors of different "
                                 f"layouts (flattened from maps in one, not in another), so "
                                 f"its weights have no single torch twin")
            held.update((t.uid, dict(state)) for t, state in zip(node.outputs, outs))
        return [held[t.uid] for t in model.outputs]


def weight_leaves(owner, model):
    """The :class:`Leaf` of every layer of ``model`` with weights, in order."""
    if not getattr(model, "built", False):
        raise ValueError(f"{owner}: the model is not built yet (run it once or call "
                         f"model.build(input_shape))")
    leaves = []
    if isinstance(model, GraphNetwork):  # the entry: a graph's own inputs, maybe several
        Walker(leaves, named="").graph(model, [{} for _ in model.inputs])
    else:
        Walker(leaves).visit(model, {})
    return leaves
