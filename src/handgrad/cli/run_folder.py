"""The run folder of ``python -m handgrad train`` and what goes into metrics.json."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re

import numpy as np

from .. import __version__
from ..ops import compiled_kernels_available, compiled_kernels_enabled
from .args import UsageError, dataset_kind, reason

OUTPUTS = ("model.safetensors", "metrics.json", "curve.png")  # what train writes


def _safe(name):
    """``name`` with runs of other characters than letters, digits, ``._-`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")


def _run_name(args):
    """``<dataset>-<model>``, e.g. ``mnist1d-cnn``, ``idx-fashion-cnn`` or, for
    ``--model-file resnet18.safetensors``, ``digits-resnet18``."""
    kind = dataset_kind(args.dataset)
    if kind in ("idx", "text"):
        path = os.path.abspath(args.dataset[len(kind) + 1:])
        folder = os.path.splitext(os.path.basename(path))[0]
        folder = _safe(folder)
        dataset = f"{kind}-{folder}" if folder else kind
    else:
        dataset = args.dataset
    model = args.model
    if model is None:  # --model-file
        model = os.path.splitext(os.path.basename(args.model_file))[0]
    return f"{dataset}-{_safe(model) or 'model'}"


def _occupied(path):
    return os.path.lexists(path) and not (os.path.isdir(path) and not os.listdir(path))


def output_dir(args):
    """``(folder, created)``: ``--out``, refusing to overwrite a model there without
    ``--force``; by default a new ``runs/<dataset>-<model>[-N]``, never a used one."""
    if args.out is None:
        base = os.path.join("runs", _run_name(args))
        out, n = base, 1
        while _occupied(out):
            n += 1
            out = f"{base}-{n}"
    else:
        out = args.out
        taken = [name for name in OUTPUTS if os.path.lexists(os.path.join(out, name))]
        if taken and not args.force:
            raise UsageError(f"the output directory {out!r} already holds {', '.join(taken)} "
                             f"from another run; pass --force to overwrite, or choose another "
                             f"--out (by default each run gets its own folder under runs/)")
    created = not os.path.lexists(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output directory {out!r}: {reason(error)}"
                         ) from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into the output directory {out!r} (permission denied)")
    return out, created


def environment():
    """Versions and whether the compiled (numba) kernels were on, for metrics.json."""
    try:
        available = compiled_kernels_available()
        numba_version = importlib.metadata.version("numba") if available else None
    except importlib.metadata.PackageNotFoundError:
        numba_version = None
    return {"handgrad": __version__, "numpy": np.__version__, "numba": numba_version,
            "python": platform.python_version(),
            "compiled_kernels": compiled_kernels_enabled()}


def json_safe(value):
    """``value`` with NaN and infinities as None: metrics.json stays strict JSON."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
