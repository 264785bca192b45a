"""PyTorch interop: load a torch model's weights into a handgrad model, and back.

``from_torch(source, model)`` copies the weights of ``source`` (an ``nn.Module``, a
state dict of tensors or arrays, or the path of a ``.safetensors`` file written by
``safetensors.torch.save_file(module.state_dict(), path)``, which is read without
torch) into the matching, built handgrad ``model``. ``to_torch_state_dict(model)``
goes back: a dict that ``nn.Module.load_state_dict`` accepts for the twin torch
model. Both are exact (only transposes and reorderings, no arithmetic), so
handgrad -> torch -> handgrad round trips reproduce every bit.

Matching. The handgrad layers that hold weights (parameters or running
statistics) are taken in order, entering ``Sequential``, ``Residual`` (block first,
then shortcut) and graph ``Model`` s (see :mod:`.torch_layouts`). Each one claims
the torch entries of one torch module: the first unclaimed torch key that ends with
one of the layer's torch names fixes the module prefix (``"features.3."``), and the
layer takes ``prefix + name`` for each of its names. Keys from a file are first put
in natural order (``"10.weight"`` after ``"9.weight"``), which restores
``nn.Sequential`` order but not the order of named children; for those pass
``prefixes={handgrad layer path: torch module prefix}`` (paths as in
``model.named_parameters()``, e.g. ``"block.conv_0"``; prefixes without the trailing
dot, ``""`` for a top-level module). Missing, unexpected and mismatched entries raise
one ValueError that lists all three.
``to_torch_state_dict`` names the modules as ``nn.Sequential`` does: the index of
the layer in its ``Sequential`` (``"3.weight"``, ``"1.0.weight"``), and ``block.`` /
``shortcut.`` inside a ``Residual``.

Graphs whose layers are named. Inside a graph ``Model`` a layer is matched by its
name: its torch twin is the submodule of the same name (an attribute, or a key of an
``nn.ModuleDict``), so ``Dense(name="shared")`` takes ``shared.weight`` and
``shared.bias`` (a nested model adds its name: ``encoder.conv.weight``; a
``Sequential`` in a graph its indices: ``head.0.weight``). Those entries are looked
up first, at the layer's own prefix and else under any module prefix
(``"net.shared.weight"``), whatever the order of the torch module's children;
``to_torch_state_dict`` writes them under the layer names.

Layouts: see :mod:`.torch_layouts`.
"""

from __future__ import annotations

import os

import numpy as np

from .._device import device_of, to_device, to_host
from . import safetensors as _safetensors
from .torch_layouts import COUNTER, weight_leaves


def to_torch_state_dict(model, *, numpy=False):
    """The state dict of ``model``'s torch twin: ``{name: torch.Tensor}`` (copies), or
    ``{name: numpy.ndarray}`` with ``numpy=True`` (no torch needed). See the module
    docstring for the names and layouts."""
    tensors = {}
    for leaf in weight_leaves("to_torch_state_dict", model):
        for rule in leaf.rules:
            tensors[leaf.prefix + rule.name] = np.array(  # a copy; a 0-d counter stays 0-d
                to_host(rule.to_torch(leaf.arrays(rule.keys))), order="C")
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


def _claim_named(leaf, keys, claimed):
    """The prefix of a layer inside a graph (``leaf.named``): its own when the torch
    entries are there, else the first module prefix followed by its names."""
    names = [rule.name for rule in leaf.rules]
    if not any(leaf.prefix + name in keys and leaf.prefix + name not in claimed
               for name in names):
        wanted = [leaf.named + name for name in names]
        found = (_suffix_prefix(key, wanted) for key in keys if key not in claimed)
        leaf.prefix = next((p + leaf.named for p in found if p is not None), leaf.prefix)
    claimed.update(leaf.prefix + name for name in names)


def _assign_prefixes(leaves, keys, prefixes):
    """Set ``leaf.prefix`` from ``prefixes``, by name inside a graph (first), else by
    order; None where nothing matched."""
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
    free = [leaf for leaf in leaves if leaf.path.rstrip(".") not in prefixes]
    for leaf in free:
        if leaf.named is not None:
            _claim_named(leaf, keys, claimed)
    for leaf in free:
        if leaf.named is not None:
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

    Layers are matched in order, by name inside a graph ``Model`` (or by ``prefixes``);
    every name and shape is checked before anything is copied. See the module docstring
    for the mapping.
    """
    leaves = weight_leaves("from_torch", model)
    arrays = _source_arrays(source)
    keys = [k for k in arrays if k.rsplit(".", 1)[-1] != COUNTER]
    claimed = _assign_prefixes(leaves, keys, prefixes)
    missing, mismatched, updates, written = [], [], [], {}
    for leaf in leaves:
        for rule in leaf.rules:
            current = leaf.arrays(rule.keys)
            hg = ", ".join(f"{leaf.path}{k}" for k in rule.keys)
            name = (leaf.prefix if leaf.prefix is not None else "<unmatched>.") + rule.name
            if name not in arrays:
                if not rule.optional:
                    missing.append(f"{name} (handgrad {hg})")
                continue
            claimed.add(name)
            expected = rule.to_torch(current).shape
            if tuple(arrays[name].shape) != tuple(expected):
                mismatched.append(f"{name}: torch {tuple(arrays[name].shape)} vs expected "
                                  f"{tuple(expected)} (handgrad {hg})")
                continue
            values = rule.from_torch(arrays[name], [a.shape for a in current])
            for target, value in zip(current, values):
                first = written.setdefault(id(target), (name, value))
                if first[0] != name and not np.array_equal(first[1], value):
                    mismatched.append(f"{name}: differs from {first[0]}, which it is tied to "
                                      f"(handgrad {hg}); the torch model is not tied")
            updates.extend(zip(current, values))
    folded = {n for _, layer in model.walk() for n in getattr(layer, "torch_sources", ())}
    unexpected = [k for k in keys if k not in claimed and k not in folded]
    if missing or unexpected or mismatched:
        origin = f"({str(source)!r})" if isinstance(source, (str, os.PathLike)) else ""
        raise ValueError(
            f"from_torch{origin}: the torch weights do not match the model: missing {missing}, "
            f"unexpected {unexpected}, mismatched shapes {mismatched} (torch modules are "
            f"matched to the handgrad layers with weights in order, and by layer name inside "
            f"a graph Model; pass prefixes={{handgrad layer path: torch module prefix}} to "
            f"match by name)")
    for target, value in updates:
        target[...] = to_device(value, device_of(target))  # the model may be on the GPU
    return model

