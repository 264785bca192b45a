"""ONNX export (opset 17): :mod:`.graph` builds tensors and nodes, :mod:`.converters`
converts the activations by kernel, :mod:`.export` walks the model and hands each layer
the graph builder for the ONNX form it declares."""

from .export import export_onnx

__all__ = ["export_onnx"]
