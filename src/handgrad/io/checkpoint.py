"""Saving and loading models: one safetensors file holds the config, the weights,
the buffers, the optimizer state and the training position (no pickle anywhere).

Tensor names: ``param/<name>``, ``buffer/<name>``, ``optim/<key>``; the
``__metadata__`` entry ``handgrad`` is a JSON document with the model config,
the optimizer config, the loss, metrics and loss weights (per output for a graph
``Model`` with several, see :mod:`.objective`), the epoch, random-generator states and
layer extra state. Writes are atomic (temporary file + rename).

A graph ``Model`` is stored as any model: its config lists its Inputs, its layers
(a shared layer once, a nested model as a layer entry), its nodes (the calls) and its
outputs, and ``input_shape`` is the list of its Inputs' shapes when it has several;
:mod:`.config_checks` checks that structure before anything is built from it.

A file holds no code. A custom loss, initializer or metric is stored by name and found
again when the file is loaded: register it once with ``@register_custom`` (as Keras's
``register_keras_serializable``), or pass the same ``custom_objects={name: object}`` to
``save`` and to ``load``. What cannot be named is refused when saving, so every file
that ``save`` writes, ``load`` reads back. Loading checks every field and tensor: a bad
one is a ValueError naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from .. import _custom, optimizers
from .._checks import describe, is_int
from .._device import check_device, device_of, to_device
from .._optim_state import check_against
from ..layers import REGISTRY, Layer
from . import document as doc
from . import objective
from . import safetensors as _safetensors

FORMAT_VERSION = doc.FORMAT_VERSION
PREFIXES = ("param/", "buffer/", "optim/")


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns."""

    model: object
    optimizer: object = None
    epoch: int = 0
    rng: object = None
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------------ saving


def _check_registered(op, model):
    """Every layer of ``model`` (reached through ``walk()``) can be found again by its
    class name."""
    for _, layer in model.walk():
        cls = type(layer)
        if REGISTRY.get(cls.__name__) is not cls:
            taken = cls.__name__ in REGISTRY
            raise ValueError(
                f"{op}: {layer.label} is a {cls.__module__}.{cls.__qualname__}, "
                + ("but another class is registered under that name" if taken else
                   "which is not registered")
                + "; a file names layers by class, so give the class a unique name and "
                  "decorate it with @handgrad.layers.register")


def _optimizer_config(op, optimizer, model):
    """The optimizer's config, checked to rebuild the same class and to fit the model."""
    if not isinstance(optimizer, optimizers.Optimizer):
        raise TypeError(f"{op}: 'optimizer' must be a handgrad Optimizer or None; received "
                        f"{describe(optimizer)}")
    config = optimizer.get_config()
    hint = ("a file holds only the built-in optimizers; save without it "
            "(include_optimizer=False, or optimizer=None)")
    try:
        twin = optimizers.from_config(config)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{op}: the optimizer {type(optimizer).__name__} cannot be stored "
                         f"({error}); {hint}") from None
    if type(twin) is not type(optimizer):
        raise ValueError(f"{op}: the optimizer {type(optimizer).__name__} would load as "
                         f"{type(twin).__name__}; {hint}")
    check_against(op, optimizer.state, model.named_parameters())
    return config


def _rng_state(op, rng):
    if rng is None:
        return None
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{op}: 'rng' must be a numpy.random.Generator or None; received "
                        f"{describe(rng)}")
    state = doc.jsonable(rng.bit_generator.state)
    if state.get("bit_generator") not in doc.BIT_GENERATORS:
        raise ValueError(f"{op}: 'rng' uses the bit generator {state.get('bit_generator')!r}; "
                         f"a file can hold one of {sorted(doc.BIT_GENERATORS)}")
    return state


def save_checkpoint(path, model, optimizer=None, *, epoch=0, rng=None, extra=None,
                    custom_objects=None):
    """Write ``model`` (config, parameters, buffers, layer state), ``optimizer`` state,
    the ``epoch`` reached, the data ``rng`` state and ``extra`` (JSON values) to ``path``.

    ``custom_objects`` (name -> callable) names custom losses, initializers and metrics
    that are not registered; pass the same mapping to :func:`load_checkpoint`. Anything
    that a file could not name is refused before the file is written.
    """
    op = "save_checkpoint"
    if not isinstance(model, Layer):
        raise TypeError(f"{op}: 'model' must be a handgrad model or layer; received "
                        f"{describe(model)}")
    if not model.built:
        raise ValueError("save_checkpoint: the model is not built yet (run it once or call "
                         "model.build(input_shape))")
    if not is_int(epoch) or epoch < 0:
        error = TypeError if not is_int(epoch) else ValueError
        raise error(f"{op}: 'epoch' must be an int >= 0; received {describe(epoch)}")
    extra = {} if extra is None else doc.jsonable(extra)
    if not isinstance(extra, dict):
        raise TypeError(f"{op}: 'extra' must be a dict or None; received {describe(extra)}")
    doc.check_json(op, "extra", extra)
    custom_objects = _custom.check_custom_objects(op, custom_objects)
    _check_registered(op, model)
    tensors = {f"param/{k}": v for k, v in model.named_parameters().items()}
    tensors.update({f"buffer/{k}": v for k, v in model.named_buffers().items()})
    with _custom.saving(custom_objects):
        document = {
            "format": FORMAT_VERSION,
            "model": {"class": type(model).__name__, "config": model.get_config(),
                      "input_shape": list(model.input_shape)},
            "extra_state": doc.jsonable(model.extra_state()),
            "epoch": int(epoch),
            "rng": _rng_state(op, rng),
            "extra": extra,
            "optimizer": None,
            **objective.compiled_fields(model),
        }
        if document["loss_weights"] is None:
            del document["loss_weights"]  # the default (1 for every output) is left out
    if optimizer is not None:
        document["optimizer"] = _optimizer_config(op, optimizer, model)
        tensors.update({f"optim/{k}": v for k, v in optimizer.state_dict().items()})
    try:
        text = json.dumps(document)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{op}: the model config cannot be stored as JSON: {error}") from None
    _safetensors.write(path, tensors, {"handgrad": text})


def save(model, path, include_optimizer=True, custom_objects=None):
    """Save a model (and its compiled optimizer's state) to one safetensors file; see
    :func:`save_checkpoint` for ``custom_objects``."""
    optimizer = getattr(model, "optimizer", None) if include_optimizer else None
    save_checkpoint(path, model, optimizer, custom_objects=custom_objects)


# ----------------------------------------------------------------------- loading


def _split(tensors, prefix):
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def assign_arrays(owner, targets: dict, arrays: dict, what="weights"):
    """Copy ``arrays`` into ``targets`` in place; a key, shape or dtype mismatch raises a
    ValueError listing the missing, unexpected and mismatched keys (nothing is copied)."""
    missing = sorted(set(targets) - set(arrays))
    unexpected = sorted(set(arrays) - set(targets))
    common = sorted(set(targets) & set(arrays))
    shapes = [f"{k}: file {tuple(arrays[k].shape)} vs model {tuple(targets[k].shape)}"
              for k in common if tuple(arrays[k].shape) != tuple(targets[k].shape)]
    dtypes = [f"{k}: file {arrays[k].dtype} vs model {targets[k].dtype}"
              for k in common if arrays[k].dtype != targets[k].dtype]
    if missing or unexpected or shapes or dtypes:
        raise ValueError(f"{owner}: the {what} do not match the model: missing {missing}, "
                         f"unexpected {unexpected}, mismatched shapes {shapes}, mismatched "
                         f"dtypes {dtypes}")
    for key, target in targets.items():
        target[...] = to_device(arrays[key], device_of(target))


def _load_optimizer(where, document, tensors, model):
    optimizer = objective.optimizer(where, document.get("optimizer"))
    state = _split(tensors, "optim/")
    if optimizer is None:
        if state:
            raise doc.fail(where, "optimizer", f"is null, but the file holds optimizer "
                                               f"tensors {sorted(state)[:5]}")
        return None
    try:
        optimizer.load_state_dict(state, params=model.named_parameters())
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: the optimizer state (the 'optim/' tensors) does not fit "
                         f"the model: {error}") from None
    return optimizer


def load_checkpoint(path, custom_objects=None, device=None) -> Checkpoint:
    """Rebuild the model (and optimizer) saved by :func:`save_checkpoint`, checking every
    field and tensor. ``custom_objects`` (name -> callable) supplies custom losses,
    initializers and metrics that the file names (before the registered ones); ``device``
    ("cpu", the default, or "cuda") places the model and its optimizer state."""
    device = check_device("load_checkpoint", device)
    custom_objects = _custom.check_custom_objects("load_checkpoint", custom_objects)
    tensors, metadata = _safetensors.read(path)
    where = repr(str(path))
    document = doc.parse(where, metadata)
    unexpected = sorted(k for k in tensors if not k.startswith(PREFIXES))
    if unexpected:
        raise ValueError(f"{where}: unexpected tensors {unexpected[:5]}; a handgrad model "
                         f"file holds only {list(PREFIXES)} tensors")
    rng = None if document.get("rng") is None else doc.generator(where, "rng", document["rng"])
    compiled = objective.read_fields(where, document, custom_objects,
                                     doc.several_outputs(document["model"]))
    model = doc.build_model(where, document["model"], custom_objects)
    owner = f"load_checkpoint({str(path)!r})"
    assign_arrays(owner, model.named_parameters(), _split(tensors, "param/"), "parameters")
    assign_arrays(owner, model.named_buffers(), _split(tensors, "buffer/"), "buffers")
    doc.load_extra_state(where, model, document["extra_state"])
    optimizer = _load_optimizer(where, document, tensors, model)
    objective.compile_from(where, model, optimizer, compiled)
    if device != "cpu":
        model.to(device)
        if optimizer is not None:  # the model's own was moved already: a no-op then
            optimizer.to(device)
    return Checkpoint(model, optimizer, document["epoch"], rng, document["extra"])


def load(path, custom_objects=None, device=None):
    """Load a model saved by :func:`save` (compiled again if it was compiled), placed on
    ``device`` ("cpu" or "cuda")."""
    return load_checkpoint(path, custom_objects, device).model


def load_as(cls, path, custom_objects=None):
    """:func:`load`, refusing a file that holds another class than ``cls`` (a model
    class's ``load`` classmethod)."""
    model = load(path, custom_objects)
    if not isinstance(model, cls):
        raise ValueError(f"{cls.__name__}.load: {str(path)!r} holds a "
                         f"{type(model).__name__}, not a {cls.__name__}")
    return model


def save_weights(model, path):
    """Write only the parameters and buffers of a built ``model`` (``param/<name>``,
    ``buffer/<name>``; no config, no optimizer) for :func:`load_weights`."""
    if not isinstance(model, Layer) or not model.built:
        raise ValueError(f"save_weights: 'model' must be a built handgrad model (run it once "
                         f"or call model.build(input_shape)); received {describe(model)}")
    tensors = {f"param/{k}": v for k, v in model.named_parameters().items()}
    tensors.update({f"buffer/{k}": v for k, v in model.named_buffers().items()})
    _safetensors.write(path, tensors, {"handgrad_weights": str(FORMAT_VERSION)})


def load_weights(model, path):
    """Copy the parameters and buffers stored in ``path`` into an existing, built model."""
    if not isinstance(model, Layer) or not model.built:
        raise ValueError(f"load_weights: 'model' must be a built handgrad model (run it once "
                         f"or call model.build(input_shape)); received {describe(model)}")
    tensors, _ = _safetensors.read(path)
    owner = f"load_weights({str(path)!r})"
    if model.named_parameters() and not _split(tensors, "param/"):
        raise ValueError(f"{owner}: the file holds no 'param/' tensors (handgrad's names); "
                         f"for a PyTorch state dict use handgrad.io.from_torch")
    assign_arrays(owner, model.named_parameters(), _split(tensors, "param/"), "parameters")
    assign_arrays(owner, model.named_buffers(), _split(tensors, "buffer/"), "buffers")
    return model
