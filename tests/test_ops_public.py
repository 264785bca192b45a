"""The public face of ``handgrad.ops`` for the code above the kernels.

- No module outside ``handgrad/ops`` imports a private name of ``ops`` (a path or name
  with a leading underscore, a kernel module's helper, ``ops._x``): layers and
  converters use what ``handgrad.ops`` exports, or its public helper modules.
- The geometry helpers give the sizes the kernels compute, and refuse bad input by
  naming the argument.
- The compiled-kernel switches and the stable special functions behave as documented.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import handgrad
from handgrad import ops
from handgrad.ops import geometry

PACKAGE = Path(handgrad.__file__).resolve().parent
OPS = "handgrad.ops"
#: Public modules of ``ops`` meant to be imported from: the loop twins and the helpers.
PUBLIC_MODULES = {"reference", "geometry", "special", "compiled"}


def _package_of(path):
    """The package that relative imports in the module at ``path`` start from."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1])


def _resolve(package, node):
    """The absolute module name an ``ImportFrom`` names."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _ops_tail(module):
    """The parts after ``handgrad.ops`` (None: not in ops)."""
    if module == OPS:
        return []
    if module.startswith(OPS + "."):
        return module[len(OPS) + 1:].split(".")
    return None


def private_ops_uses(source, package):
    """``(line, text)`` for each use of a private ops name in ``source``, a module of
    ``package``."""
    tree = ast.parse(source)
    found, ops_names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                tail = _ops_tail(alias.name)
                if tail is None:
                    continue
                if any(part.startswith("_") for part in tail) or (
                        tail and tail[0] not in PUBLIC_MODULES):
                    found.append((node.lineno, f"import {alias.name}"))
                elif not tail and alias.asname:
                    ops_names.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(package, node)
            for alias in node.names:
                if _ops_tail(f"{module}.{alias.name}") == []:  # from handgrad import ops
                    ops_names.add(alias.asname or alias.name)
            tail = _ops_tail(module)
            if tail is None:
                continue
            text = f"from {'.' * node.level}{node.module or ''} import " + ", ".join(
                a.name for a in node.names)
            if any(part.startswith("_") for part in tail) or (
                    tail and tail[0] not in PUBLIC_MODULES):
                found.append((node.lineno, text))
            elif not tail and any(a.name.startswith("_") or not hasattr(ops, a.name)
                                  for a in node.names):
                found.append((node.lineno, text))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and isinstance(node.value, ast.Name) and node.value.id in ops_names):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_no_module_outside_ops_imports_a_private_ops_name():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "ops") in path.parents:
            continue
        offenders += [f"{path.relative_to(PACKAGE)}:{line}: {text}"
                      for line, text in private_ops_uses(path.read_text(encoding="utf-8"),
                                                         _package_of(path))]
    assert not offenders, "private names of handgrad.ops used outside it:\n" + "\n".join(
        offenders)


@pytest.mark.parametrize("source, expected", [
    ("from ..ops._args.windows import parse_padding", True),
    ("from ..ops.softmax import log_softmax_values", True),
    ("from ..ops import _special", True),
    ("import handgrad.ops._engine.dispatch", True),
    ("from .. import ops\nops._special.sigmoid", True),
    ("from handgrad import ops as o\no._engine", True),
    ("from ..ops import no_such_name", True),
    ("from .. import ops\nops.conv2d", False),
    ("from ..ops import parse_padding, check_lengths, special", False),
    ("from ..ops.reference import conv2d", False),
    ("from ..ops.geometry import WindowGeometry", False),
    ("from ..ops import activations", False),
    ("from .._checks import is_int\nfrom . import conv", False),
])
def test_the_private_name_check_reads_imports_as_python_does(source, expected):
    """The checker itself, on text placed in ``handgrad.layers``."""
    assert bool(private_ops_uses(source, "handgrad.layers")) is expected


def test_every_public_helper_is_exported_from_ops():
    for name in geometry.__all__:
        assert getattr(ops, name) is getattr(geometry, name), name
    for name in ("compiled_kernels_available", "compiled_kernels_enabled",
                 "use_compiled_kernels", "special"):
        assert hasattr(ops, name), name


# --------------------------------------------------------------------- geometry helpers
CONV_CASES = [
    ((9,), 3, {}),
    ((9,), 3, {"padding": "causal", "dilation": 2}),
    ((10,), 4, {"padding": "same", "stride": 3}),
    ((7, 8), (3, 2), {"stride": (2, 1), "padding": ((1, 0), (0, 1))}),
    ((6, 6), 3, {"padding": "same", "dilation": 2}),
    ((5, 9), 3, {"padding": (1, 2), "stride": 2}),
]


@pytest.mark.parametrize("size, kernel, kwargs", CONV_CASES)
def test_conv_geometry_is_what_the_kernel_computes(size, kernel, kwargs):
    nd = len(size)
    k = (kernel,) * nd if isinstance(kernel, int) else kernel
    x, w = np.zeros((1, *size, 2)), np.zeros((*k, 2, 3))
    y, _ = (ops.conv1d if nd == 1 else ops.conv2d)(x, w, **kwargs)
    g = ops.conv_geometry(size, kernel, **kwargs)
    assert g.output_size == y.shape[1:-1] and g.input_size == size and not g.transposed
    assert [a.kernel for a in g.axes] == list(k)
    assert g.pads_begin == tuple(before for before, _ in g.padding)


@pytest.mark.parametrize("size, kernel, kwargs", [
    ((5,), 3, {"stride": 2, "padding": 1, "output_padding": 1}),
    ((4, 3), (3, 2), {"stride": (2, 3), "padding": "same"}),
    ((4, 4), 3, {"stride": 2, "dilation": 2, "padding": ((2, 0), (1, 1)),
                 "output_padding": (1, 0)}),
])
def test_conv_transpose_geometry_is_what_the_kernel_computes(size, kernel, kwargs):
    nd = len(size)
    k = (kernel,) * nd if isinstance(kernel, int) else kernel
    x, w = np.zeros((1, *size, 3)), np.zeros((*k, 2, 3))
    y, _ = (ops.conv_transpose1d if nd == 1 else ops.conv_transpose2d)(x, w, **kwargs)
    g = ops.conv_transpose_geometry(size, kernel, **kwargs)
    assert g.transposed and g.output_size == y.shape[1:-1] and g.input_size == size
    extra = kwargs.get("output_padding", 0)
    extra = (extra,) * nd if isinstance(extra, int) else extra
    for axis, (_, after), e in zip(g.axes, g.padding, extra):
        assert axis.pad_after == after - e


@pytest.mark.parametrize("size, kernel, kwargs", [
    ((7,), 2, {}),
    ((7,), 3, {"stride": 2, "padding": 1, "ceil_mode": True}),
    ((6, 7), (2, 3), {"stride": (2, 2), "padding": (1, 1), "dilation": (1, 2)}),
    ((5, 5), 2, {"padding": "same"}),
    ((5, 6), 3, {"stride": 2, "ceil_mode": True}),
])
def test_pool_geometry_is_what_the_kernel_computes(size, kernel, kwargs):
    nd = len(size)
    y, _ = (ops.max_pool1d if nd == 1 else ops.max_pool2d)(np.zeros((1, *size, 2)), kernel,
                                                           **kwargs)
    g = ops.pool_geometry(size, kernel, **kwargs)
    assert g.output_size == y.shape[1:-1] and g.input_size == size
    assert g.pads_end == tuple(max(a.pad_after, 0) for a in g.axes)


@pytest.mark.parametrize("call, error, words", [
    (lambda: ops.conv_geometry((5,), 0), ValueError, "'kernel_size'"),
    (lambda: ops.conv_geometry("5", 3), TypeError, "'input_size'"),
    (lambda: ops.conv_geometry((), 3), TypeError, "'input_size'"),
    (lambda: ops.conv_geometry((0, 4), 3), ValueError, "'input_size'"),
    (lambda: ops.conv_geometry((5, 5), 3, padding="causal"), ValueError, "'padding'"),
    (lambda: ops.conv_geometry((2,), 5, op="Conv1D"), ValueError, "Conv1D: output size"),
    (lambda: ops.conv_geometry((5,), 3, stride=0), ValueError, "'stride'"),
    (lambda: ops.conv_transpose_geometry((5,), 3, stride=2, output_padding=2), ValueError,
     "'output_padding'"),
    (lambda: ops.pool_geometry((5,), 2, padding=2), ValueError, "'padding'"),
    (lambda: ops.pool_geometry((5,), 2, ceil_mode=1), TypeError, "'ceil_mode'"),
    (lambda: ops.parse_padding("op", -1, 1, (3,), (1,), (1,), (5,)), ValueError, "'padding'"),
    (lambda: ops.check_normalized_shape("op", "4"), TypeError, "'normalized_shape'"),
    (lambda: ops.check_lengths("op", [0, 2], 2, 3), ValueError, "'lengths'"),
    (lambda: ops.check_ids("op", np.array([3]), 3), ValueError, "'ids'"),
    (lambda: ops.check_padding_idx("op", 3, 3), ValueError, "'padding_idx'"),
])
def test_helpers_name_the_argument_and_the_value(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_validators_return_the_normalized_value():
    assert ops.parse_padding("op", "same", 2, (3, 4), (1, 1), (1, 1), (5, 5)) == ((1, 1), (1, 2))
    assert ops.check_normalized_shape("op", 4) == (4,)
    assert ops.check_lengths("op", [1, 3], 2, 3).dtype == np.int64
    assert ops.check_padding_idx("op", -1, 5) == 4
    assert ops.RECURRENT_GATES == {"rnn": 1, "lstm": 4, "gru": 3}


# ---------------------------------------------------------- compiled kernels, special
def test_the_compiled_kernel_switches():
    with ops.use_compiled_kernels(False):
        assert ops.compiled_kernels_enabled() is False
    with ops.use_compiled_kernels(True):
        assert ops.compiled_kernels_enabled() is ops.compiled_kernels_available()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_log_softmax_is_the_kernels(dtype):
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(dtype) * 30
    y, _ = ops.log_softmax(x, axis=0)
    np.testing.assert_array_equal(ops.special.log_softmax(np, x, 0), y)
    assert ops.special.log_softmax(np, np.zeros((2, 0), dtype), 1).shape == (2, 0)
