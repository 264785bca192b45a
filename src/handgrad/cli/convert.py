"""``python -m handgrad convert model.onnx model.safetensors``: an ONNX file as a handgrad
model file (``load_onnx``, then ``save``), which ``train --model-file`` fine-tunes.

``--input-shape`` fills the graph input's open sizes (a ``dim_param`` such as torch's
dynamic ``batch`` or ``height``, or no size at all), in the ONNX file's own axis order
(torch's N,C,H,W; the batch may be left out: C,H,W); a size the file fixes must match.
"""

from __future__ import annotations

import os

from ..io.checkpoint import save
from .args import UsageError, reason


def parse_shape(text):
    """``"1,3,32,32"`` -> ``(1, 3, 32, 32)``; a UsageError for anything else."""
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise UsageError(f"--input-shape must be sizes >= 1 separated by commas, in the ONNX "
                         f"file's axis order (N,C,H,W or C,H,W); received {text!r}")
    return shape


def _dims(info):
    """The sizes of a graph input: an int, its ``dim_param`` name, or ``"?"``."""
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in info.type.tensor_type.shape.dim]


def _open(dims):
    """Whether any size of ``dims`` is not fixed (the batch, first, may stay open)."""
    return any(not isinstance(d, int) or d < 1 for d in dims[1:])


def fill_input_shape(proto, shape, path):
    """Give the graph inputs of ``proto`` fixed sizes: ``shape`` (or None) fills the one
    input's open sizes; an input left open is refused, naming it and its sizes."""
    weights = {t.name for t in proto.graph.initializer}
    inputs = [info for info in proto.graph.input if info.name not in weights]
    if shape is not None:
        if len(inputs) != 1:
            raise UsageError(f"--input-shape fills the sizes of a model with one input; "
                             f"{path!r} has {len(inputs)}: "
                             f"{', '.join(repr(i.name) for i in inputs)}")
        info, dims = inputs[0], _dims(inputs[0])
        if len(shape) not in (len(dims), len(dims) - 1):
            raise UsageError(f"--input-shape {','.join(map(str, shape))} has {len(shape)} "
                             f"sizes; the input {info.name!r} of {path!r} has {len(dims)} "
                             f"axes {dims} (give all of them, or all but the batch)")
        offset = len(dims) - len(shape)
        for axis, size in enumerate(shape, start=offset):
            dim = info.type.tensor_type.shape.dim[axis]
            if isinstance(dims[axis], int) and dims[axis] >= 1:
                if dims[axis] != size:
                    raise UsageError(f"--input-shape {','.join(map(str, shape))} sets axis "
                                     f"{axis} of the input {info.name!r} to {size}, but "
                                     f"{path!r} fixes it at {dims[axis]} (sizes {dims})")
                continue
            dim.Clear()
            dim.dim_value = size
    for info in inputs:
        dims = _dims(info)
        if _open(dims):
            raise UsageError(f"the input {info.name!r} of {path!r} has open sizes {dims}; "
                             f"give them with --input-shape in the file's axis order, e.g. "
                             f"--input-shape {','.join(str(d) for d in _example(dims))}")


def _example(dims):
    """An --input-shape example for ``dims``: the fixed sizes, 32 for the open ones."""
    return [d if isinstance(d, int) and d >= 1 else 32 for d in dims[1:]]


def _check_paths(args):
    if not args.onnx.endswith(".onnx"):
        raise UsageError(f"the model to convert must be an .onnx file; received {args.onnx!r}")
    if not args.out.endswith(".safetensors"):
        raise UsageError(f"the handgrad model file must end in .safetensors; received "
                         f"{args.out!r}")
    if not os.path.isfile(args.onnx):
        raise UsageError(f"the ONNX file {args.onnx!r} does not exist")


def cmd_convert(args):
    """Read the ONNX file, fill its open input sizes, convert and save it."""
    _check_paths(args)
    shape = None if args.input_shape is None else parse_shape(args.input_shape)
    try:
        import onnx
    except ImportError:
        raise UsageError('convert reads ONNX files with the onnx package, which is not '
                         'installed (pip install "handgrad[onnx]")') from None
    try:
        proto = onnx.load(args.onnx)
    except Exception as error:  # a corrupt file fails in protobuf: one line, no traceback
        raise UsageError(f"cannot read the ONNX file {args.onnx!r}: {reason(error)}") from None
    fill_input_shape(proto, shape, args.onnx)
    from ..io.onnx import load_onnx

    try:
        model = load_onnx(proto)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise UsageError(f"cannot convert {args.onnx!r}: {reason(error)}") from None
    try:
        save(model, args.out)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot write {args.out!r}: {reason(error)}") from None
    print(f"wrote {args.out}: input shape {model.input_shape} (channels last), "
          f"{model.count_params()} parameters, {model.dtype}")
    return 0
