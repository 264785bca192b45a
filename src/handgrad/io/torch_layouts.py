"""PyTorch interop: load a torch model's weights into a handgrad model, and back.

``from_torch(source, model)`` copies the weights of ``source`` (an ``nn.Module``, a
state dict of tensors or arrays, or the path of a ``.safetensors`` file written by
``safetensors.torch.save_file(module.state_dict(), path)``, which is read without
torch) into the matching, built handgrad ``model``. ``to_torch_state_dict(model)``
goes back: a dict that ``nn.Module.load_state_dict`` accepts for the twin torch
model. Both are exact (only transposes and reorderings, no arithmetic), so
handgrad -> torch -> handgrad round trips reproduce every bit.

Matching. The handgrad layers that hold weights (parameters or running
statistics) are taken in order, entering ``Sequential`` and ``Residual`` (block
first, then shortcut). Each one claims the torch entries of one torch module: the
first unclaimed torch key that ends with one of the layer's torch names fixes the
module prefix (``"features.3."``), and the layer takes ``prefix + name`` for each of
its names. Keys from a file are first put in natural order (``"10.weight"`` after
``"9.weight"``), which restores ``nn.Sequential`` order but not the order of named
children; for those pass ``prefixes={handgrad layer path: torch module prefix}``
(paths as in ``model.named_parameters()``, e.g. ``"block.conv_0"``; prefixes without
the trailing dot, ``""`` for a top-level module). Missing, unexpected and
mismatched entries raise one ValueError that lists all three.
``to_torch_state_dict`` names the modules as ``nn.Sequential`` does: the index of
the layer in its ``Sequential`` (``"3.weight"``, ``"1.0.weight"``), and ``block.`` /
``shortcut.`` inside a ``Residual``.

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

import os
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
)
from . import safetensors as _safetensors

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
    """A handgrad layer with weights, its path, its torch module prefix and rules."""

    layer: object
    path: str
    prefix: str | None
    rules: list
    counter: bool

    def arrays(self, keys):
        return [self.layer.parameters.get(k, self.layer.buffers.get(k)) for k in keys]


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


def _rules(layer, state):
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


def _walk(layer, path, prefix, state, leaves):
    """Append the :class:`Leaf` of every layer with weights under ``layer``. ``state``
    carries the layout along a chain; the branches of a ``Residual`` all start from
    its input's, and the block's goes on after it."""
    if isinstance(layer, Residual):
        start = dict(state)
        for name, child in layer.children():
            branch = state if child is layer.block else dict(start)
            _walk(child, f"{path}{name}.", f"{prefix}{name}.", branch, leaves)
        return
    if layer.chain:  # as torch's nn.Sequential, which names its modules by index
        for index, (name, child) in enumerate(layer.children()):
            _walk(child, f"{path}{name}.", f"{prefix}{index}.", state, leaves)
        return
    if any(True for _ in layer.children()):
        raise ValueError(f"{layer.label} ({type(layer).__name__}) has no torch twin "
                         f"(interop enters Sequential and Residual)")
    rules, counter = _rules(layer, state)
    if rules:
        leaves.append(Leaf(layer, path, prefix, rules, counter))


def _leaves(owner, model):
    if not getattr(model, "built", False):
        raise ValueError(f"{owner}: the model is not built yet (run it once or call "
                         f"model.build(input_shape))")
    leaves = []
    _walk(model, "", "", {}, leaves)
    return leaves


def to_torch_state_dict(model, *, numpy=False):
    """The state dict of ``model``'s torch twin: ``{name: torch.Tensor}`` (copies), or
    ``{name: numpy.ndarray}`` with ``numpy=True`` (no torch needed). See the module
    docstring for the names and layouts."""
    tensors = {}
    for leaf in _leaves("to_torch_state_dict", model):
        for rule in leaf.rules:
            tensors[leaf.prefix + rule.name] = np.ascontiguousarray(
                rule.to_torch(leaf.arrays(rule.keys))).copy()
        if leaf.counter:
            tensors[leaf.prefix + COUNTER] = np.zeros((), np.int64)
    if numpy:
        return tensors
    try:
        import torch
    except ImportError:
        raise ImportError("to_torch_state_dict: torch is not installed; pass numpy=True for "
                          "NumPy arrays") from None
    return {name: torch.from_numpy(array) for name, array in tensors.items()}


def _natural_key(name):
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split(".")]


def _as_numpy(value):
    if hasattr(value, "detach"):  # a torch tensor, converted without importing torch
        value = value.detach().cpu()
        try:
            return value.numpy()
        except TypeError:  # bfloat16 and other dtypes NumPy lacks
            return value.float().numpy()
    return np.asarray(value)


def _source_arrays(source):
    """Ordered ``{name: ndarray}`` from a module, a mapping or a safetensors path."""
    if isinstance(source, (str, os.PathLike)):
        tensors, _ = _safetensors.read(source)
        return {name: tensors[name] for name in sorted(tensors, key=_natural_key)}
    if hasattr(source, "state_dict") and callable(source.state_dict):
        source = source.state_dict()
    if not hasattr(source, "items"):
        raise TypeError(f"from_torch: 'source' must be a torch module, a state dict or the "
                        f"path of a .safetensors file; received {type(source).__name__}")
    return {str(name): _as_numpy(value) for name, value in source.items()}


def _suffix_prefix(key, names):
    """The module prefix of ``key`` if it ends with one of ``names`` (longest first)."""
    for name in sorted(names, key=len, reverse=True):
        if key == name or key.endswith("." + name):
            return key[:len(key) - len(name)]
    return None


def _assign_prefixes(leaves, keys, prefixes):
    """Set ``leaf.prefix`` from ``prefixes`` or by order; None where nothing matched."""
    prefixes = dict(prefixes or {})
    paths = {leaf.path.rstrip("."): leaf for leaf in leaves}
    unknown = sorted(set(prefixes) - set(paths))
    if unknown:
        raise ValueError(f"from_torch: 'prefixes' names {unknown}, which are not handgrad "
                         f"layers with weights; those are {sorted(paths)}")
    claimed = set()
    for path, prefix in prefixes.items():
        leaf = paths[path]
        leaf.prefix = f"{prefix}." if prefix else ""
        claimed.update(leaf.prefix + rule.name for rule in leaf.rules)
    for leaf in leaves:
        if leaf.path.rstrip(".") in prefixes:
            continue
        names = [rule.name for rule in leaf.rules]
        leaf.prefix = None
        for key in keys:
            if key not in claimed and (prefix := _suffix_prefix(key, names)) is not None:
                leaf.prefix = prefix
                claimed.update(prefix + name for name in names)
                break
    return claimed


def from_torch(source, model, *, prefixes=None):
    """Copy the weights of ``source`` (a torch module, a state dict, or a ``.safetensors``
    path, read without torch) into the built handgrad ``model``; returns ``model``.

    Layers are matched in order (or by ``prefixes``); every name and shape is checked
    before anything is copied. See the module docstring for the mapping.
    """
    leaves = _leaves("from_torch", model)
    arrays = _source_arrays(source)
    keys = [k for k in arrays if k.rsplit(".", 1)[-1] != COUNTER]
    claimed = _assign_prefixes(leaves, keys, prefixes)
    missing, mismatched, updates = [], [], []
    for leaf in leaves:
        for rule in leaf.rules:
            current = leaf.arrays(rule.keys)
            hg = ", ".join(f"{leaf.path}{k}" for k in rule.keys)
            name = (leaf.prefix if leaf.prefix is not None else "<unmatched>.") + rule.name
            if name not in arrays:
                missing.append(f"{name} (handgrad {hg})")
                continue
            expected = rule.to_torch(current).shape
            if tuple(arrays[name].shape) != tuple(expected):
                mismatched.append(f"{name}: torch {tuple(arrays[name].shape)} vs expected "
                                  f"{tuple(expected)} (handgrad {hg})")
                continue
            values = rule.from_torch(arrays[name], [a.shape for a in current])
            updates.extend(zip(current, values))
    unexpected = [k for k in keys if k not in claimed]
    if missing or unexpected or mismatched:
        origin = f"({str(source)!r})" if isinstance(source, (str, os.PathLike)) else ""
        raise ValueError(
            f"from_torch{origin}: the torch weights do not match the model: missing {missing}, "
            f"unexpected {unexpected}, mismatched shapes {mismatched} (torch modules are "
            f"matched to the handgrad layers with weights in order; pass prefixes={{handgrad "
            f"layer path: torch module prefix}} to match by name)")
    for target, value in updates:
        target[...] = value
    return model

