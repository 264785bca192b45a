"""PyTorch layouts: which handgrad layers have torch twins, and how their weights map
(used by :mod:`.torch_interop`'s ``from_torch`` and ``to_torch_state_dict`` and by
the ONNX export).

The handgrad layers that hold weights (parameters or running statistics) are walked
in order, entering ``Sequential`` (its children by index, as ``nn.Sequential``),
``Residual`` (``block.`` then ``shortcut.``) and graph ``Model`` s (nodes in
topological order, children by layer name, a shared layer once). Each gives a
:class:`Leaf`: its path, its torch module prefix and one :class:`Rule` per torch
entry. A layout state follows the tensors (along a chain, along each tensor of a
graph) so that a ``Dense`` after a ``Flatten`` of maps reorders its rows.

Layouts (handgrad -> torch; ``.T`` is a transpose, ``g`` the groups)::

    handgrad layer (torch twin)   handgrad                   torch
    Dense (Linear)                W (F_in, F_out), b         weight (F_out, F_in) = W.T, bias
    Conv1D (Conv1d)               W (K, C_in/g, C_out)       weight (C_out, C_in/g, K)
    Conv2D (Conv2d)               W (KH, KW, C_in/g, C_out)  weight (C_out, C_in/g, KH, KW)
    ConvTranspose1D/2D            W (*K, C_out/g, C_in)      weight (C_in, C_out/g, *K)
      (ConvTranspose1d/2d)        every conv weight: the two channel axes swapped and
                                  moved in front of the kernel axes; b = bias
    BatchNorm, InstanceNorm,      gamma, beta (C,)           weight, bias
      GroupNorm, LayerNorm        running_mean, running_var  running_mean, running_var;
                                                             num_batches_tracked: ignored on
                                                             import, 0 on export
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

Flattened channels-last maps: torch flattens a (C, *S) map, handgrad a (*S, C) map,
so after a ``Flatten`` of convolution or pooling output the flattened feature axis
is reordered from (*S, C) to (C, *S): the rows of the next ``Dense`` ``W`` and the
vectors of a batch or layer norm in between (activations and dropout pass the
order on). A ``LayerNorm`` over a whole (*S, C) map has its parameters moved to
(C, *S). A ``GroupNorm`` of flattened maps and a ``LayerNorm`` over some but not
all axes of a map compute something else than any torch twin and raise an error,
as does ``WaveNetBlock``. ``Reshape`` output is taken as it is. Torch inputs are
the channels-first twins of handgrad's: (N, C, L), (N, C, H, W); sequences are
batch-first in both.

``to_torch_state_dict(model)`` returns torch tensors (copies); with ``numpy=True`` it
returns NumPy arrays and needs no torch (``handgrad.io.safetensors.write`` turns them
into a file that ``safetensors.torch.load_file`` reads).
"""


from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layers import (
    BatchNorm,
    ConvND,
    Dense,
    Embedding,
    Flatten,
    GlobalPool,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    MultiHeadAttention,
    Pool,
    Recurrent,
    Reshape,
    Residual,
    TiedDense,
)
from ..layers.symbolic import GraphNetwork

COUNTER = "num_batches_tracked"


def conv_weight_perm(rank):
    """Axes taking a handgrad conv weight (*K, C_a, C_b) to torch's (C_b, C_a, *K)."""
    return (rank + 1, rank, *range(rank))


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
        splits = np.cumsum([shape[-1] for shape in shapes])[:-1]
        return np.split(a, splits, axis=-1) if len(shapes) > 1 else [a]


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


def _norm_rules(layer, flat):
    rules = [Rule(torch, (hg,), flat_shape=flat) for torch, hg in (
        ("weight", "gamma"), ("bias", "beta"), ("running_mean", "running_mean"),
        ("running_var", "running_var")) if hg in layer.parameters or hg in layer.buffers]
    return rules, "running_mean" in layer.buffers


def _mha_rules(layer):
    t = (1, 0)
    if layer.packed:
        rules = [Rule("in_proj_weight", ("W_in",), t)]
        biases = ("b_in",)
    else:
        if layer.key_dim == layer.value_dim == layer.embed_dim:
            rules = [Rule("in_proj_weight", ("W_q", "W_k", "W_v"), t)]
        else:
            rules = [Rule(f"{k}_proj_weight", (f"W_{k}",), t) for k in "qkv"]
        biases = ("b_q", "b_k", "b_v")
    if layer.use_bias:
        rules.append(Rule("in_proj_bias", biases))
    rules.append(Rule("out_proj.weight", ("W_out",), t))
    if layer.use_bias:
        rules.append(Rule("out_proj.bias", ("b_out",)))
    return rules


def _recurrent_rules(layer):
    rules = []
    for k in range(layer.num_layers):
        for d in range(layer.directions):
            s = layer.parameter_suffix(k, d)
            rules += [Rule(f"weight_ih{s}", (f"W_ih{s}",), (1, 0)),
                      Rule(f"weight_hh{s}", (f"W_hh{s}",), (1, 0))]
            if layer.use_bias:
                rules += [Rule(f"bias_ih{s}", (f"b_ih{s}",)), Rule(f"bias_hh{s}", (f"b_hh{s}",))]
    return rules


def layer_rules(layer, state):
    """(rules, has num_batches_tracked) of one layer; updates the layout ``state``."""
    flat, spatial = state.get("flat"), state.get("spatial")
    counter = False
    if isinstance(layer, Dense):
        rules = [Rule("weight", ("W",), (1, 0), flat_shape=flat)]
        state.clear()
    elif isinstance(layer, ConvND):
        rules = [Rule("weight", ("W",), conv_weight_perm(layer.rank))]
        state.clear()
        state["spatial"] = True
    elif isinstance(layer, GroupNorm) and flat:
        raise ValueError(f"{layer.label} normalizes features flattened from channels-last "
                         f"maps, whose groups differ from torch's; it has no torch twin")
    elif isinstance(layer, LayerNorm) and spatial and layer.min_rank > 1:
        rank = len(layer.input_shape) - 1
        if layer.min_rank <= rank:
            raise ValueError(f"{layer.label} normalizes some but not all axes of a "
                             f"channels-last map; it has no torch twin")
        rules, counter = _norm_rules(layer, None)  # (*S, C) -> (C, *S)
        rules = [Rule(r.name, r.keys, (rank, *range(rank))) for r in rules]
    elif isinstance(layer, (BatchNorm, InstanceNorm, GroupNorm, LayerNorm)):
        rules, counter = _norm_rules(layer, flat)
    elif isinstance(layer, Embedding):
        rules = [Rule("weight", ("W",))]
        state.clear()
    elif isinstance(layer, TiedDense):
        if flat:
            raise ValueError(f"{layer.label} projects features flattened from channels-last "
                             f"maps with a tied table, which no torch twin reorders")
        rules = [Rule("weight", ("E",), optional=True)]
        rules += [Rule("bias", ("b",))] if layer.use_bias else []
        state.clear()
    elif isinstance(layer, Recurrent):
        rules = _recurrent_rules(layer)
        state.clear()
    elif isinstance(layer, MultiHeadAttention):
        rules = _mha_rules(layer)
        state.clear()
    elif layer.parameters or layer.buffers:
        raise ValueError(f"{layer.label} has weights but no torch twin (interop covers Dense, "
                         f"convolutions, normalizations, Embedding, RNN/LSTM/GRU and "
                         f"MultiHeadAttention)")
    else:
        if isinstance(layer, Flatten) and spatial:
            state["flat"] = tuple(layer.input_shape)
            state["spatial"] = False
        elif isinstance(layer, GlobalPool | Reshape):
            state.clear()
        elif isinstance(layer, Pool):
            state["spatial"] = True
        return [], False
    if isinstance(layer, (Dense, ConvND)) and layer.use_bias:
        rules.append(Rule("bias", ("b",)))
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


def _walk_graph(model, path, prefix, states, leaves, named):
    """Walk the nodes of a graph ``Model`` in topological order; ``states`` are the
    layout states of its inputs, the states of its outputs are returned. A layer is
    named by its name (its torch twin is the submodule of that name); a shared layer
    is walked at its first call, and a later call must see the same layouts."""
    held = {t.uid: state for t, state in zip(model.inputs, states)}
    first_calls = {}
    for node in model.nodes:
        layer, ins = node.layer, [held[t.uid] for t in node.inputs]
        name = layer.name
        target = [] if id(layer) in first_calls else leaves
        start = len(target)
        child = (f"{path}{name}.", f"{prefix}{name}.")
        if isinstance(layer, GraphNetwork):
            outs = _walk_graph(layer, *child, ins, target, f"{named}{name}.")
        else:
            state = ins[0] if len(ins) == 1 else _merged_state(layer, ins)
            state = dict(state)
            _walk(layer, *child, state, target, f"{named}{name}.")
            outs = [state] * len(node.outputs)
        if id(layer) not in first_calls:
            first_calls[id(layer)] = target[start:]
        elif [(leaf.path, leaf.rules) for leaf in target] != [
                (leaf.path, leaf.rules) for leaf in first_calls[id(layer)]]:
            raise ValueError(f"{layer.label} is shared by calls on tensors of different "
                             f"layouts (flattened from maps in one, not in another), so its "
                             f"weights have no single torch twin")
        held.update((t.uid, dict(state)) for t, state in zip(node.outputs, outs))
    return [held[t.uid] for t in model.outputs]


def _walk(layer, path, prefix, state, leaves, named=None):
    """Append the :class:`Leaf` of every layer with weights under ``layer``. ``state``
    carries the layout along a chain; the branches of a ``Residual`` all start from
    its input's, and the block's goes on after it. ``named`` is the path of names below
    the nearest graph ``Model`` (None outside one)."""
    def inner(name):
        return None if named is None else f"{named}{name}."

    if isinstance(layer, Residual):
        start = dict(state)
        for name, child in layer.children():
            branch = state if child is layer.block else dict(start)
            _walk(child, f"{path}{name}.", f"{prefix}{name}.", branch, leaves, inner(name))
        return
    if isinstance(layer, GraphNetwork):
        if not layer.single_input or not layer.single_output:
            raise ValueError(f"{layer.label} has several inputs or outputs, so it cannot be "
                             f"a step of a chain")
        out = _walk_graph(layer, path, prefix, [state], leaves, named or "")[0]
        state.clear()
        state.update(out)
        return
    if layer.chain:  # as torch's nn.Sequential, which names its modules by index
        for index, (name, child) in enumerate(layer.children()):
            _walk(child, f"{path}{name}.", f"{prefix}{index}.", state, leaves, inner(index))
        return
    if any(True for _ in layer.children()):
        raise ValueError(f"{layer.label} ({type(layer).__name__}) has no torch twin "
                         f"(interop enters Sequential, Residual and graph Models)")
    rules, counter = layer_rules(layer, state)
    if rules:
        leaves.append(Leaf(layer, path, prefix, rules, counter, named))


def weight_leaves(owner, model):
    """The :class:`Leaf` of every layer of ``model`` with weights, in order."""
    if not getattr(model, "built", False):
        raise ValueError(f"{owner}: the model is not built yet (run it once or call "
                         f"model.build(input_shape))")
    leaves = []
    if isinstance(model, GraphNetwork):
        _walk_graph(model, "", "", [{} for _ in model.inputs], leaves, "")
    else:
        _walk(model, "", "", {}, leaves)
    return leaves
