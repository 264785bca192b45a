"""Files: one safetensors file per model (config, weights, optimizer state; no pickle),
PyTorch weight layouts, and the ONNX export wing.

``save``/``load`` and the checkpoint functions live in :mod:`.checkpoint`, the file
format in :mod:`.safetensors`, the metadata checks in :mod:`.document`, the torch
layouts in :mod:`.torch_layouts` (applied by :mod:`.torch_interop`) and the ONNX
export in :mod:`.onnx`.
"""

from .._custom import register_custom
from .checkpoint import (
    FORMAT_VERSION,
    Checkpoint,
    load,
    load_checkpoint,
    load_weights,
    save,
    save_checkpoint,
    save_weights,
)
from .onnx import export_onnx, load_onnx
from .torch_convert import convert_torch
from .torch_interop import from_torch, to_torch_state_dict

__all__ = [
    "FORMAT_VERSION", "Checkpoint", "convert_torch", "export_onnx", "from_torch", "load",
    "load_checkpoint", "load_onnx", "load_weights", "register_custom", "save",
    "save_checkpoint", "save_weights",
    "to_torch_state_dict",
]
