"""Where arrays live: ``"cpu"`` (NumPy) or ``"cuda"`` (CuPy, the optional ``cuda`` extra).

The kernels never ask for a device: they follow their inputs through
:func:`handgrad._checks.array_module`. A layer or model holds a ``device``; its
parameters, gradients, buffers and optimizer state are arrays of that device's module,
and ``fit``/``predict``/``evaluate`` move each batch there once (:func:`to_device`).

Random numbers (initializers, dropout masks, noise) are always drawn on the host from a
NumPy ``Generator`` and then moved, so the same seed gives the same numbers on both
devices (a GPU-side stream would be faster for large masks, but would not match).
"""

from __future__ import annotations

import numpy as np

from ._checks import array_module, describe

DEVICES = ("cpu", "cuda")
CUDA_EXTRA = "pip install 'handgrad[cuda]'"


def check_device(owner: str, device) -> str:
    """``device`` ("cpu", "cuda", "cuda:0" or None for "cpu") as "cpu" or "cuda"; asking
    for "cuda" without CuPy (or without a GPU) raises an error naming the extra."""
    if device is None:
        return "cpu"
    if not isinstance(device, str) or device not in (*DEVICES, "cuda:0"):
        raise ValueError(f"{owner}: 'device' must be 'cpu' or 'cuda' (CuPy's current GPU; "
                         f"choose another with cupy.cuda.Device(i).use()); received "
                         f"{describe(device)}")
    if device.startswith("cuda"):
        cuda_module(owner)
        return "cuda"
    return "cpu"


def cuda_module(owner: str = "handgrad"):
    """The ``cupy`` module, or a clear error when it (or a GPU) is missing."""
    try:
        import cupy
    except ImportError as error:
        raise ImportError(f"{owner}: device='cuda' needs CuPy, which is not installed; "
                          f"install the optional extra: {CUDA_EXTRA} (CuPy for CUDA 12)"
                          ) from error
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CUDA runtime errors have no common base class
        raise RuntimeError(f"{owner}: device='cuda' found CuPy but no usable GPU: "
                           f"{error}") from error
    if count < 1:
        raise RuntimeError(f"{owner}: device='cuda' found CuPy but no GPU")
    return cupy


def device_of(array) -> str:
    """"cuda" for a CuPy array, else "cpu"."""
    return "cpu" if array_module(array) is np else "cuda"


def to_host(array):
    """``array`` as a NumPy array (a CuPy array is copied to the host; others pass)."""
    if array is None or array_module(array) is np:
        return array
    return array.get()


def to_device(array, device: str):
    """``array`` on ``device`` ("cpu" or "cuda"); an array already there is returned
    as is. Lists, tuples and dicts are moved element by element; None and non-arrays
    (ints, strings) pass."""
    if isinstance(array, dict):
        return {key: to_device(value, device) for key, value in array.items()}
    if isinstance(array, (list, tuple)):
        return type(array)(to_device(value, device) for value in array)
    if not hasattr(array, "dtype") or not hasattr(array, "shape"):
        return array
    if device == "cpu":
        return to_host(array)
    if array_module(array) is not np:
        return array
    return cuda_module().asarray(array)


def like(array, reference):
    """``array`` (a host draw, an index or a constant) on the device of ``reference``."""
    return to_device(array, device_of(reference))


def move_dict(arrays: dict, device: str) -> None:
    """Move every array of ``arrays`` to ``device`` in place (the dict is kept)."""
    for key, value in list(arrays.items()):
        arrays[key] = to_device(value, device)


def host_copy(model):
    """A deep copy of ``model`` (a layer) with its arrays on the host, for the readers
    that need NumPy (ONNX export); the model itself stays where it is."""
    import copy
    return copy.deepcopy(model).to("cpu")
