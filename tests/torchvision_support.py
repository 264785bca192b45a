"""torchvision for the tests: ``pytest.importorskip`` plus the two operator schemas its import
needs. torchvision is a test-only dependency installed with ``--no-deps``; its compiled
detection operators (built for CUDA) do not load with the CPU torch build, but its import
registers fake kernels for ``torchvision::nms`` and ``torchvision::qnms``, which need the
schemas to exist. The model definitions are plain Python."""

from __future__ import annotations

import importlib.util

import pytest

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARY = []  # the torch.library.Library holding the schemas, kept alive


def torchvision():
    """The torchvision module (skip the test when it is not installed)."""
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed (pip install --no-deps torchvision==0.28.0)")
    import torch
    if not _LIBRARY:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for op, schema in _SCHEMAS.items():
            try:
                torch._C._dispatch_find_schema_or_throw(f"torchvision::{op}", "")
            except RuntimeError:
                library.define(schema)
        _LIBRARY.append(library)
    import torchvision as tv
    return tv
