"""Checks of what a file says about a model's layers: the ValueError that names the file
and the field, layer entries ``{"class": ..., "config": {...}}`` (registered classes
only) and the structure of a graph ``Model``'s config (its Inputs, layers, nodes and
outputs), checked before anything is built from it."""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int
from ..layers import REGISTRY
from ..layers.symbolic import GraphNetwork

#: What a layer constructor, ``from_config`` or ``build`` may raise on a bad config.
CONFIG_ERRORS = (ArithmeticError, AttributeError, LookupError, MemoryError,
                 NotImplementedError, RecursionError, TypeError, ValueError)


def fail(where, field, message):
    """The ValueError for a bad ``field`` of the file ``where``."""
    return ValueError(f"{where}: field '{field}' {message}")


def entry_class(where, field, entry):
    """The registered class of a nested layer entry ``{"class": ..., "config": {...}}``."""
    if not isinstance(entry, dict) or set(entry) != {"class", "config"}:
        raise fail(where, field, f"must be a layer entry {{'class': <a registered layer>, "
                                 f"'config': {{...}}}}; received {describe(entry)}")
    name = entry["class"]
    if not isinstance(name, str) or name not in REGISTRY:
        raise fail(where, f"{field}.class", f"must name a registered layer class (one of "
                                            f"{sorted(REGISTRY)}); received {describe(name)}")
    if not isinstance(entry["config"], dict):
        raise fail(where, f"{field}.config", f"must be an object; received "
                                             f"{describe(entry['config'])}")
    return REGISTRY[name]


# ---------------------------------------------------------------- graph models
GRAPH_KEYS = ("inputs", "layers", "nodes", "outputs", "single_input", "single_output")
INPUT_KEYS = ("shape", "name", "dtype")


def is_shape(value) -> bool:
    """A per-example shape as a file holds it: a list of at most 32 integers >= 0 (or
    null: an Input's axis of any size)."""
    return isinstance(value, list) and len(value) <= 32 and all(
        d is None or (is_int(d) and d >= 0) for d in value)


def _is_dtype_name(value) -> bool:
    try:
        dtype = np.dtype(value) if isinstance(value, str) else None
    except TypeError:
        return False
    return dtype is not None and dtype.kind in "biuf" and dtype.name == value


def _check_reference(where, field, ref, inputs, nodes):
    """``["input", i]`` (i < ``inputs``) or ``[node, output]`` (node < ``nodes``)."""
    if not (isinstance(ref, list) and len(ref) == 2 and (
            (ref[0] == "input" and is_int(ref[1]) and 0 <= ref[1] < inputs)
            or (is_int(ref[0]) and 0 <= ref[0] < nodes and is_int(ref[1]) and ref[1] >= 0))):
        raise fail(where, field, f"must be a tensor reference ['input', i] with i < {inputs} "
                                 f"or [node, output] with node < {nodes} (an earlier node); "
                                 f"received {describe(ref)}")


def _check_list(where, field, value, what, empty=False):
    if not isinstance(value, list) or not (value or empty):
        raise fail(where, field, f"must be a {'' if empty else 'non-empty '}list of {what}; "
                                 f"received {describe(value)}")
    return value


def check_graph_config(where, field, config):
    """The structure of a graph ``Model``'s config before it is replayed: its Inputs,
    uniquely named layers, nodes that call them on the Inputs or on earlier nodes'
    outputs, and outputs that refer to those."""
    missing = [key for key in GRAPH_KEYS if key not in config]
    if missing:
        raise fail(where, field, f"is the config of a graph model without {missing}")
    inputs = _check_list(where, f"{field}.inputs", config["inputs"], "Input specs")
    for i, spec in enumerate(inputs):
        at = f"{field}.inputs[{i}]"
        if not isinstance(spec, dict) or "shape" not in spec or set(spec) - set(INPUT_KEYS):
            raise fail(where, at, f"must be an object with 'shape' (and optionally 'name' "
                                  f"and 'dtype'); received {describe(spec)}")
        if not is_shape(spec["shape"]):
            raise fail(where, f"{at}.shape", f"must be a list of integers >= 0 (per "
                                             f"example); received {describe(spec['shape'])}")
        for key, ok, what in (("name", isinstance(spec.get("name"), str), "a string"),
                              ("dtype", _is_dtype_name(spec.get("dtype")), "a dtype name")):
            if spec.get(key) is not None and not ok:
                raise fail(where, f"{at}.{key}", f"must be null or {what}; received "
                                                 f"{describe(spec[key])}")
    names = []
    for i, entry in enumerate(_check_list(where, f"{field}.layers", config["layers"],
                                          "layer entries")):
        entry_class(where, f"{field}.layers[{i}]", entry)
        name = entry["config"].get("name")
        if not isinstance(name, str) or name in names:
            raise fail(where, f"{field}.layers[{i}].config.name", f"must be a layer name, "
                                                                  f"unique in the model; "
                                                                  f"received {describe(name)}")
        names.append(name)
    nodes = _check_list(where, f"{field}.nodes", config["nodes"], "layer calls", empty=True)
    for j, node in enumerate(nodes):
        at = f"{field}.nodes[{j}]"
        if not isinstance(node, dict) or not {"layer", "inputs"} <= set(node) <= {
                "layer", "inputs", "training"}:
            raise fail(where, at, f"must be a layer call {{'layer': <name>, 'inputs': "
                                  f"[<tensor references>]}} (and an optional 'training': "
                                  f"<bool>); received {describe(node)}")
        if not isinstance(node.get("training", False), bool):
            raise fail(where, f"{at}.training", f"must be a bool (the call's fixed mode); "
                                                f"received {describe(node['training'])}")
        if not isinstance(node["layer"], str) or node["layer"] not in names:
            raise fail(where, f"{at}.layer", f"must name one of the model's layers {names}; "
                                             f"received {describe(node['layer'])}")
        for k, ref in enumerate(_check_list(where, f"{at}.inputs", node["inputs"],
                                            "tensor references")):
            _check_reference(where, f"{at}.inputs[{k}]", ref, len(inputs), j)
    unused = sorted(set(names) - {node["layer"] for node in nodes})
    if unused:
        raise fail(where, f"{field}.layers", f"holds layers that no node calls: {unused}")
    outputs = _check_list(where, f"{field}.outputs", config["outputs"], "tensor references")
    for k, ref in enumerate(outputs):
        _check_reference(where, f"{field}.outputs[{k}]", ref, len(inputs), len(nodes))
    for key, count in (("single_input", len(inputs)), ("single_output", len(outputs))):
        if not isinstance(config[key], bool) or (config[key] and count != 1):
            raise fail(where, f"{field}.{key}", f"must be a bool, true only for one "
                                                f"{key[7:]} (there are {count}); received "
                                                f"{describe(config[key])}")


def is_graph(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, GraphNetwork)
