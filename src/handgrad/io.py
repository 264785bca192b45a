"""Saving and loading models: one safetensors file holds the config, the weights,
the buffers, the optimizer state and the training position (no pickle anywhere).

Tensor names: ``param/<name>``, ``buffer/<name>``, ``optim/<key>``; the
``__metadata__`` entry ``handgrad`` is a JSON document with the model config,
the optimizer config, the loss, the epoch, random-generator states and layer
extra state. Writes are atomic (temporary file + rename).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from . import _safetensors, optimizers
from .interop import from_torch, to_torch_state_dict  # noqa: F401  (PyTorch interop)
from .layers import REGISTRY
from .onnx_export import export_onnx  # noqa: F401  (ONNX export)

FORMAT_VERSION = 1


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns."""

    model: object
    optimizer: object = None
    epoch: int = 0
    rng: object = None
    extra: dict = field(default_factory=dict)


def _rng_state(rng):
    return None if rng is None else rng.bit_generator.state


def _rng_from_state(state):
    if state is None:
        return None
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def save_checkpoint(path, model, optimizer=None, *, epoch=0, rng=None, extra=None):
    """Write ``model`` (config, parameters, buffers, layer state), ``optimizer`` state,
    the ``epoch`` reached and the data ``rng`` state to ``path``."""
    if not model.built:
        raise ValueError("save_checkpoint: the model is not built yet (run it once or call "
                         "model.build(input_shape))")
    tensors = {f"param/{k}": v for k, v in model.named_parameters().items()}
    tensors.update({f"buffer/{k}": v for k, v in model.named_buffers().items()})
    document = {
        "format": FORMAT_VERSION,
        "model": {"class": type(model).__name__, "config": model.get_config(),
                  "input_shape": list(model.input_shape)},
        "extra_state": model.extra_state(),
        "epoch": int(epoch),
        "rng": _rng_state(rng),
        "extra": extra or {},
        "optimizer": None,
        "loss": getattr(model, "loss_name", None),
        "metrics": list(getattr(model, "metrics", ())),
    }
    if optimizer is not None:
        document["optimizer"] = optimizer.get_config()
        tensors.update({f"optim/{k}": v for k, v in optimizer.state_dict().items()})
    _safetensors.write(path, tensors, {"handgrad": json.dumps(document)})


def _split(tensors, prefix):
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def assign_arrays(owner, targets: dict, arrays: dict, what="weights"):
    """Copy ``arrays`` into ``targets`` in place; a key or shape mismatch raises a
    ValueError listing the missing, unexpected and mismatched keys."""
    missing = sorted(set(targets) - set(arrays))
    unexpected = sorted(set(arrays) - set(targets))
    mismatched = sorted(f"{k}: file {tuple(arrays[k].shape)} vs model {tuple(targets[k].shape)}"
                        for k in set(targets) & set(arrays)
                        if tuple(arrays[k].shape) != tuple(targets[k].shape))
    if missing or unexpected or mismatched:
        raise ValueError(f"{owner}: the {what} do not match the model: missing {missing}, "
                         f"unexpected {unexpected}, mismatched shapes {mismatched}")
    for key, target in targets.items():
        target[...] = arrays[key]


def _document(path, metadata):
    try:
        document = json.loads(metadata["handgrad"])
        document["model"]["class"]
    except (KeyError, TypeError, json.JSONDecodeError):
        raise ValueError(f"{str(path)!r} is not a handgrad model file (no valid handgrad "
                         f"metadata)") from None
    if document.get("format") != FORMAT_VERSION:
        raise ValueError(f"{str(path)!r} has format {document.get('format')!r}; this handgrad "
                         f"reads format {FORMAT_VERSION}")
    return document


def load_checkpoint(path) -> Checkpoint:
    """Rebuild the model (and optimizer) saved by :func:`save_checkpoint`."""
    tensors, metadata = _safetensors.read(path)
    document = _document(path, metadata)
    spec = document["model"]
    if spec["class"] not in REGISTRY:
        raise ValueError(f"{str(path)!r}: unknown model class {spec['class']!r}")
    try:
        model = REGISTRY[spec["class"]].from_config(spec["config"])
        if not model.built:
            model.build(tuple(spec["input_shape"]))
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{str(path)!r}: the stored model config is invalid: {error}") from None
    assign_arrays(f"load_checkpoint({str(path)!r})", model.named_parameters(),
                  _split(tensors, "param/"), "parameters")
    assign_arrays(f"load_checkpoint({str(path)!r})", model.named_buffers(),
                  _split(tensors, "buffer/"), "buffers")
    model.load_extra_state(document.get("extra_state") or {})
    optimizer = None
    if document.get("optimizer") is not None:
        optimizer = optimizers.from_config(document["optimizer"])
        optimizer.load_state_dict(_split(tensors, "optim/"))
    if document.get("loss") is not None and hasattr(model, "compile"):
        model.compile(optimizer or "adam", document["loss"], document.get("metrics") or ())
    return Checkpoint(model, optimizer, document.get("epoch", 0),
                      _rng_from_state(document.get("rng")), document.get("extra") or {})


def save(model, path, include_optimizer=True):
    """Save a model (and its compiled optimizer's state) to one safetensors file."""
    optimizer = getattr(model, "optimizer", None) if include_optimizer else None
    save_checkpoint(path, model, optimizer)


def load(path):
    """Load a model saved by :func:`save` (compiled again if it was compiled)."""
    return load_checkpoint(path).model


def load_weights(model, path):
    """Copy the parameters and buffers stored in ``path`` into an existing, built model."""
    tensors, _ = _safetensors.read(path)
    assign_arrays(f"load_weights({str(path)!r})", model.named_parameters(),
                  _split(tensors, "param/"), "parameters")
    assign_arrays(f"load_weights({str(path)!r})", model.named_buffers(),
                  _split(tensors, "buffer/"), "buffers")
    return model
