"""The architecture, read from the source: the floors of the house and the rules that keep
them apart.

- No import cycle among handgrad's modules, counting imports inside functions.
- Imports only go down: a module imports modules on its own floor or below (``FLOORS``).
- At most 12 modules at the top level of the package, no file over 400 lines.
- Each package and each top-level module imports on its own, in a fresh interpreter.
- A layer registers itself where it is defined; ``layers/registry.py`` imports nothing.
- Layers name their kernels: no kernel is looked up by a string (``getattr(ops, ...)``).

The import graph is read with ``ast`` from every module, as Python resolves it:
``from P import n`` is an edge to ``P.n`` when that is a module, else to ``P``; ``import
a.b.c`` is an edge to the deepest of ``a.b.c``, ``a.b``, ``a`` that is one of ours.
Packages a module's import implicitly runs (the parents of its target) are not edges.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "handgrad"
MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 400

#: The floors of the house, top floor first (the folder tree of the design notes). A module
#: may import modules of its own floor and of the floors below, never of a floor above.
#: A name is the first part of a module's name below ``handgrad``; ``__init__`` is the
#: package itself. ``_custom`` (custom objects that a file names) and ``_optim_state``
#: (checks of an optimizer's state) import only ``_checks`` and serve ``initializers``,
#: ``optimizers`` and ``io``: they are helpers of the bottom floor, like ``_checks``, and so
#: is ``_named`` (the dict of named arrays that layers give and optimizers read).
FLOORS = [
    {"__init__", "__main__", "cli"},  # the front door: public names, the command line
    {"testing"},  # gradcheck and the layer cases
    {"zoo"},  # named networks
    {"model"},  # Sequential and the graph model
    {"inspect"},  # summary, plots, probes, anomaly detection
    {"training"},  # the fit loop, callbacks, metrics, progress
    {"distributed"},  # data-parallel training
    {"io"},  # safetensors, checkpoints, torch layouts, ONNX export
    {"layers"},  # stateful layers
    {"losses", "metrics", "optimizers", "_optim_args", "schedulers", "initializers",
     "regularizers"},
    {"ops"},  # stateless kernels and their loop twins
    {"data"},  # datasets and batching
    {"_checks", "_hyper", "_custom", "_optim_state", "_named", "_device"},  # helpers, every floor
]


# ------------------------------------------------------------------- reading the source
def module_name(path):
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def is_package(name):
    return MODULES[name].name == "__init__.py"


def ours(target):
    """The deepest of ``target`` and its parents that is one of handgrad's modules."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def imports(name, tree=None):
    """``(target module, the name it is bound to or None, line)`` for every import in
    module ``name`` (its source, or ``tree``) that names one of handgrad's modules, at
    module level or inside functions. ``import a.b`` binds the dotted name ``a.b``."""
    package = name if is_package(name) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(TREES[name] if tree is None else tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = ours(alias.name)
                if target:
                    bound = alias.asname or alias.name
                    found.append((target, bound if target == alias.name else None,
                                  node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    continue  # above the package: not one of ours
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in MODULES:
                    found.append((submodule, alias.asname or alias.name, node.lineno))
                elif ours(base):
                    found.append((ours(base), None, node.lineno))
    return found


def import_graph():
    """``{module: {imported module: first line}}``, self-imports included."""
    graph = {name: {} for name in MODULES}
    for name in MODULES:
        for target, _, line in imports(name):
            graph[name].setdefault(target, line)
    return graph


GRAPH = import_graph()


def strongly_connected_components(graph):
    """Tarjan's algorithm, iterative (no recursion limit on deep chains)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def cycle_through(graph, component):
    """One import cycle inside ``component``, as ``a -> b -> ... -> a`` with lines."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:  # breadth first: the shortest way back to the start
        path = paths.pop(0)
        for successor in sorted(graph[path[-1]]):
            if successor == start:
                return " -> ".join(
                    f"{a} (line {graph[a][b]})" for a, b in zip(path, [*path[1:], start])
                ) + f" -> {start}"
            if successor in members and successor not in seen:
                seen.add(successor)
                paths.append([*path, successor])
    return ", ".join(component)


def floor(name):
    """The index of module ``name``'s floor in ``FLOORS`` (0 is the top)."""
    part = "__init__" if name == "handgrad" else name.split(".")[1]
    for level, members in enumerate(FLOORS):
        if part in members:
            return level
    return None


# ------------------------------------------------------------------------------- tests
def test_the_graph_reader_sees_the_package():
    assert "handgrad.layers.base" in MODULES and "handgrad.ops" in MODULES
    assert "handgrad.layers.base" in GRAPH["handgrad.layers.core"]  # from .base import ...
    assert "handgrad.ops" in GRAPH["handgrad.layers.conv"]  # from .. import ops
    assert not any(target.startswith("numpy") for edges in GRAPH.values() for target in edges)


def test_no_import_cycle_counting_imports_inside_functions():
    self_imports = [f"{name} (line {edges[name]})"
                    for name, edges in GRAPH.items() if name in edges]
    assert not self_imports, "modules that import themselves: " + ", ".join(self_imports)
    cycles = [cycle_through(GRAPH, c) for c in strongly_connected_components(GRAPH)
              if len(c) > 1]
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(cycles)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}, "e": {"e": 5}}
    components = strongly_connected_components(graph)
    assert sorted(components) == [["a", "b", "c"], ["d"], ["e"]]
    assert cycle_through(graph, ["a", "b", "c"]) == (
        "a (line 1) -> b (line 2) -> c (line 3) -> a")


def test_every_module_has_a_floor():
    homeless = sorted({name.split(".")[1] for name in MODULES
                       if name != "handgrad" and floor(name) is None})
    assert not homeless, (f"place these in FLOORS (and in the design's folder tree): "
                          f"{homeless}")


def test_imports_only_go_down():
    upward = []
    for name, edges in GRAPH.items():
        for target, line in sorted(edges.items()):
            if floor(name) is not None and floor(target) is not None and (
                    floor(target) < floor(name)):
                path = MODULES[name].relative_to(SRC)
                upward.append(f"{path}:{line}: {name} imports {target}, a floor above")
    assert not upward, "imports that run back up:\n" + "\n".join(upward)


def test_few_top_level_modules_and_no_long_file():
    top = sorted(path.name for path in PACKAGE.glob("*.py")
                 if path.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"
    long = {str(path.relative_to(SRC)): n for path in MODULES.values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


def _import_alone(name):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    result = subprocess.run([sys.executable, "-W", "error", "-c", f"import {name}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return name, result.returncode, result.stderr


def test_each_package_and_top_level_module_imports_on_its_own():
    """A fresh interpreter per name, warnings as errors: no module works only because
    another was imported first. Packages are found in the source tree, so a new one is
    covered as soon as it exists."""
    names = sorted(name for name in MODULES if is_package(name) or (
        MODULES[name].parent == PACKAGE and MODULES[name].name != "__main__.py"))
    assert {"handgrad", "handgrad.ops.reference", "handgrad.io.onnx", "handgrad.losses"} <= set(
        names)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_import_alone, names))
    failed = [f"import {name}: exit {code}\n{err[-2000:]}"
              for name, code, err in results if code != 0]
    assert not failed, "\n".join(failed)


# ---------------------------------------------------------------------- layer registry
def registrations(name):
    """The class names that module ``name`` registers: classes decorated ``@register`` and
    module-level ``Name = factory("Name", ...)`` where ``factory`` is a function of this
    module that calls ``register``."""
    tree = TREES[name]

    def is_register(node):
        node = node.func if isinstance(node, ast.Call) else node
        return (isinstance(node, ast.Name) and node.id == "register") or (
            isinstance(node, ast.Attribute) and node.attr == "register")

    names = {node.name for node in tree.body if isinstance(node, ast.ClassDef)
             and any(is_register(d) for d in node.decorator_list)}
    factories = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                 and any(isinstance(n, ast.Call) and is_register(n) for n in ast.walk(node))}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id in factories
                and node.value.args and isinstance(node.value.args[0], ast.Constant)
                and node.value.args[0].value == node.targets[0].id):
            names.add(node.targets[0].id)
    return names | declared_layers(name, factories)


def declared_layers(name, factories):
    """The classes that a factory of module ``name`` makes from op declarations (an
    activation declared with ``layer="ReLU"`` beside its op, ``handgrad.ops.declare``)."""
    if not factories:
        return set()
    module = importlib.import_module(name)
    return {key for key, cls in vars(module).items() if isinstance(cls, type)
            and getattr(getattr(cls, "declaration", None), "layer", None) == key}


def test_layers_register_where_they_are_defined():
    for name in MODULES:
        if name != "handgrad.__main__":
            importlib.import_module(name)  # every module that could register a layer
    from handgrad.layers.registry import REGISTRY

    assert len(REGISTRY) >= 40
    misplaced = []
    for key, cls in sorted(REGISTRY.items()):
        home = cls.__module__
        if (key != cls.__name__ or home not in MODULES
                or getattr(sys.modules[home], key, None) is not cls
                or key not in registrations(home)):
            misplaced.append(f"{key}: {cls.__module__}.{cls.__qualname__}")
    assert not misplaced, ("registered away from their definition (register with "
                           "@register right above the class):\n" + "\n".join(misplaced))


def test_nothing_keeps_a_central_list_of_layers():
    """Only ``register`` writes into the registry."""
    writers = []
    for name, tree in TREES.items():
        if name == "handgrad.layers.registry":
            continue
        for node in ast.walk(tree):
            target = None
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr in ("update", "setdefault", "__setitem__")):
                target = node.func.value
            if target is not None and ast.unparse(target).split(".")[-1] == "REGISTRY":
                writers.append(f"{MODULES[name].relative_to(SRC)}:{node.lineno}")
    assert not writers, f"writes into the layer registry outside register(): {writers}"


def test_the_registry_imports_nothing():
    tree = TREES["handgrad.layers.registry"]
    found = [ast.unparse(node) for node in ast.walk(tree)
             if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not found, f"layers/registry.py imports: {found}"


# ------------------------------------------------------------------- kernels by name
def _public_kernel_module(target):
    """``handgrad.ops`` and its public submodules (``reference``, ``conv``, ...)."""
    parts = target.split(".")
    return parts[:2] == ["handgrad", "ops"] and not any(p.startswith("_") for p in parts[2:])


def kernel_lookups(name, tree):
    """Places in ``tree`` (module ``name``) that look a kernel up in ``handgrad.ops`` by a
    string: ``getattr``/``hasattr``/``vars`` of it, or its ``__dict__``."""
    bound = {"ops"} | {alias for target, alias, _ in imports(name, tree)
                       if alias and _public_kernel_module(target)}
    found = []
    for node in ast.walk(tree):
        subject = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id in ("getattr", "hasattr", "vars")) and node.args:
            subject = node.args[0]
        elif isinstance(node, ast.Attribute) and node.attr == "__dict__":
            subject = node.value
        if subject is not None and ast.unparse(subject) in bound:
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("source, found", [
    ("from .. import ops\ndef f(self):\n    return getattr(ops, self.name)\n", 1),
    ("from ..ops import reference as R\nk = vars(R)['conv2d']\n", 1),
    ("import handgrad.ops\nk = handgrad.ops.__dict__['relu']\n", 1),
    ("from .. import ops\nk = ops.relu\nn = getattr(self, 'name')\n", 0),
])
def test_the_kernel_lookup_finder(source, found):
    assert len(kernel_lookups("handgrad.layers.core", ast.parse(source))) == found


def test_layers_name_their_kernels():
    lookups = [f"{MODULES[name].relative_to(SRC)}:{line}"
               for name, tree in TREES.items() for line in kernel_lookups(name, tree)]
    assert not lookups, ("kernels looked up by a string; name them as class attributes "
                         f"(forward_op = staticmethod(ops.conv2d)): {lookups}")
