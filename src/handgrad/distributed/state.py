"""A model's state made equal on every rank, and the layers data-parallel training
supports."""

from __future__ import annotations

import numpy as np

from . import comm


def trainable_layers(model) -> list:
    """The layers (each once, in :meth:`~handgrad.layers.Layer.walk` order) that own
    parameters and are trainable: those whose gradients are summed over ranks."""
    layers, seen = [], set()
    for _, layer in model.walk():
        if layer.parameters and layer.trainable and id(layer) not in seen:
            seen.add(id(layer))
            layers.append(layer)
    return layers


def check_supported(op, model):
    """The model is built and has no layer whose training depends on the split of the
    batch in a way data-parallel training does not handle; else a ValueError."""
    if not getattr(model, "built", False):
        raise ValueError(f"{op}: build the model first (give input_shape, or run one "
                         f"forward): its parameters must exist on every rank")
    for _, layer in model.walk():
        if getattr(layer, "rng", None) is not None and (getattr(layer, "dropout", 0) or 0) > 0 \
                and not layer.needs_communicator:
            raise ValueError(f"{op}: {layer.label} draws dropout masks per process, so they "
                             f"would depend on the number of processes; use dropout=0.0 in "
                             f"it (a Dropout layer is supported)")
        if getattr(layer, "track_running_stats", False) and not layer.needs_communicator:
            raise ValueError(f"{op}: {layer.label} averages its running statistics over "
                             f"the examples of each process; use track_running_stats=False "
                             f"in it (BatchNorm is supported)")


def broadcast_parameters(model, root=0):
    """Make rank ``root``'s parameters, buffers (running statistics) and layers' extra
    state (e.g. Dropout's random generators) every rank's, in place; returns ``model``.
    A rank whose model has other parameter names or shapes gets a ValueError (and the
    job ends, see :func:`~handgrad.distributed.init`)."""
    check_supported("broadcast_parameters", model)
    if not comm.enabled():
        return model
    arrays = {**{f"param/{k}": v for k, v in model.named_parameters().items()},
              **{f"buffer/{k}": v for k, v in model.named_buffers().items()}}
    layout = [(name, tuple(a.shape), str(a.dtype)) for name, a in arrays.items()]
    expected = comm.broadcast(layout, root)
    if layout != expected:
        differ = [(a, b) for a, b in zip(layout, expected) if a != b] or \
            [(len(layout), len(expected))]
        raise ValueError(f"broadcast_parameters: rank {comm.rank()}'s model differs from rank "
                         f"{root}'s (name, shape, dtype; here vs there): {differ[:3]}")
    world = comm.mpi()[1]
    for array in arrays.values():
        buffer = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        world.Bcast(buffer, root=root)
        if buffer is not array:
            array[...] = buffer
    state = comm.broadcast(model.extra_state(), root)
    if comm.rank() != root:
        model.load_extra_state(state)
    return model
