"""ONNX export (opset 17): :mod:`.graph` builds tensors and nodes, :mod:`.converters`
holds one converter per layer family, :mod:`.export` walks the model."""

from .export import export_onnx

__all__ = ["export_onnx"]
