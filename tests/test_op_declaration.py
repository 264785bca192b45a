"""One declaration per op: a new activation costs one place.

A copy of the package gets a throwaway activation (``demo_softsign``: its two kernels and
one ``declare(...)``) written into ``ops/activations.py`` and nothing else; in that copy
it is exported (``handgrad.ops``, ``handgrad.ops.reference``, a layer class), checked
against torch, its loop twin and finite differences by the activation test table,
exported to ONNX and drawn by the layer-case table. The rest checks the namespaces
against the declarations in this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import handgrad
from handgrad import layers as L
from handgrad import ops
from handgrad.ops import reference

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(handgrad.__file__).resolve().parent

DEMO = '''

def demo_softsign(x):
    """y = x / (1 + |x|). The cache holds ``x``."""
    xp, x = _input("demo_softsign", x)
    return x / (1.0 + xp.abs(x)), make_cache("demo_softsign", x, x)


def demo_softsign_backward(dy, cache):
    """dx = dy / (1 + |x|)^2."""
    dy, cache = open_cache("demo_softsign_backward", "demo_softsign", dy, cache)
    return dy / (1.0 + array_module(dy).abs(cache.saved)) ** 2


declare(demo_softsign, demo_softsign_backward, layer="DemoSoftsign",
        value=lambda x: x / (1.0 + abs(x)),
        slopes=lambda x: (1.0 / (1.0 + abs(x)) ** 2, 0.0), kinks=lambda: (0.0,),
        torch=lambda F, t: F.softsign(t), onnx=lambda g, x: g.op("Softsign", [x], "softsign"))
'''

CHECK = '''
import numpy as np
import onnx.reference
import handgrad
from handgrad import layers as L, ops
from handgrad.ops import reference
from handgrad.io import export_onnx
from handgrad.model import Sequential
from handgrad.testing.layer_cases import LAYER_CASES

assert handgrad.__file__.startswith({root!r}), handgrad.__file__
assert "demo_softsign" in ops.ACTIVATIONS and ops.DECLARED["demo_softsign"].layer
assert reference.demo_softsign_backward.__module__ == "handgrad.ops.reference.activations"
layer, shape = LAYER_CASES["DemoSoftsign"](np.random.default_rng(0))
assert isinstance(layer, L.DemoSoftsign) and not layer.supports_double_backward()
model = Sequential([L.Dense(4), L.DemoSoftsign()], seed=0, dtype="float64", input_shape=(3,))
proto = export_onnx(model, None)
assert [n.op_type for n in proto.graph.node] == ["MatMul", "Add", "Softsign"]
x = np.random.default_rng(1).standard_normal((2, 3))
(y,) = onnx.reference.ReferenceEvaluator(proto).run(None, {{"input": x}})
np.testing.assert_allclose(y, model.forward(x), rtol=1e-12)
print("declared, exported, drawn")
'''


def _run(args, env, cwd):
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_a_throwaway_activation_costs_one_declaration(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    copy = tmp_path / "src" / "handgrad"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "ops" / "activations.py"
    text = module.read_text(encoding="utf-8")
    closing = "\n__all__ = exports(__name__, globals())\n"
    assert text.endswith(closing)  # the one edit: the declaration above the module's end
    module.write_text(text[: -len(closing)] + DEMO + closing, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{copy.parent}{os.pathsep}{TESTS}"}
    check = _run([sys.executable, "-c", CHECK.format(root=str(copy))], env, tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    table = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  str(TESTS / "test_activations.py"), "-k", "demo_softsign"], env, TESTS.parent)
    assert table.returncode == 0, table.stdout[-3000:] + table.stderr[-3000:]
    assert "handgrad" not in table.stderr
    passed = int(table.stdout.split(" passed")[0].split()[-1])
    # torch (3 shapes x 2 dtypes, kinks), loop twin (2 dtypes), finite differences, strides
    assert passed >= 10, table.stdout[-2000:]


def test_the_namespaces_are_the_declared_kernels():
    declared = set(ops.declare.kernel_names())
    for name in declared:
        assert getattr(ops, name).__name__ == name
    kernels = {name for name in dir(ops) if name.endswith(("_backward", "_gradgrad"))}
    assert kernels | {decl.name for decl in ops.DECLARED.values()} == declared
    twins = {name for name in dir(reference) if not name.startswith("_")
             and callable(getattr(reference, name))}
    assert twins <= declared, "a loop twin without a declared kernel"
    for decl in ops.declare.activations():
        assert getattr(L, decl.layer).forward_op is decl.forward
        if decl.elementwise:
            assert {k.__name__ for k in decl.kernels} <= twins, decl.name


def test_a_declaration_must_name_its_backward_and_be_unique():
    with pytest.raises(ValueError, match="'relu_backward'"):
        ops.declare.declare(ops.relu, ops.tanh_backward)
    with pytest.raises(ValueError, match="'relu' is already declared"):
        ops.declare.declare(ops.relu, ops.relu_backward)
    with pytest.raises(KeyError, match="declared: "):
        ops.declaration(len)

