"""ONNX export (opset 17): :mod:`.graph` builds tensors and nodes, :mod:`.converters`
converts the activations by kernel, :mod:`.export` walks the model and hands each layer
the graph builder for the ONNX form it declares. :mod:`.load` is the way back
(``load_onnx``), with the converters of :mod:`.load_ops` and :mod:`.load_shapes`."""

from .export import export_onnx
from .load import load_onnx

__all__ = ["export_onnx", "load_onnx"]
