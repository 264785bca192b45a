"""The ``handgrad`` document of a saved file, read field by field.

Every malformed field is a ValueError that names the file and the field (as a path such
as ``model.config.layers[2].config``). Nothing is looked up by a name from the file
except in an allow-list: registered layer classes, built-in optimizers and losses, the
custom objects the caller supplies or registered, and the bit generators of
:data:`BIT_GENERATORS`.
"""

from __future__ import annotations

import numpy as np

from .. import _custom
from .._checks import describe, is_int
from ..layers import REGISTRY
from . import safetensors as _safetensors
from .config_checks import (
    CONFIG_ERRORS,
    check_graph_config,
    entry_class,
    fail,
    is_graph,
    is_shape,
)

FORMAT_VERSION = 1
FIELDS = ("format", "model", "extra_state", "epoch", "rng", "extra", "optimizer", "loss",
          "metrics", "loss_weights")
MODEL_FIELDS = ("class", "config", "input_shape")
#: The only bit generators a file may name.
BIT_GENERATORS = {cls.__name__: cls for cls in (np.random.PCG64, np.random.PCG64DXSM,
                                                np.random.Philox, np.random.SFC64,
                                                np.random.MT19937)}


# ----------------------------------------------------------------- JSON values


def jsonable(value):
    """``value`` with NumPy arrays as lists and NumPy scalars as Python numbers."""
    if isinstance(value, dict):
        return {key: jsonable(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def check_json(op, name, value, path=""):
    """Refuse what JSON would change or cannot hold: non-string keys, sets, objects."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json(op, name, item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{op}: '{name}{path}' has the key {key!r}; a file stores "
                                f"only string keys")
            check_json(op, name, item, f"{path}[{key!r}]")
        return
    raise TypeError(f"{op}: '{name}{path}' must hold only JSON values (dicts with string "
                    f"keys, lists, strings, numbers, bools, None); received {describe(value)}")


# ------------------------------------------------------------ random generators


def _uint(bits):
    return (lambda v: is_int(v) and 0 <= v < 2**bits), f"an integer in [0, 2**{bits})"


def _uints(bits, n):
    check = _uint(bits)[0]
    return (lambda v: isinstance(v, list) and len(v) == n and all(map(check, v)),
            f"a list of {n} integers in [0, 2**{bits})")


def _between(low, high):
    return (lambda v: is_int(v) and low <= v <= high), f"an integer in [{low}, {high}]"


_PCG = {"state": {"state": _uint(128), "inc": _uint(128)}, "has_uint32": _between(0, 1),
        "uinteger": _uint(32)}
#: The exact layout of each allowed generator's state (as NumPy's ``.state``, in JSON):
#: nested dicts of ``(check, description)``.
RNG_LAYOUTS = {
    "PCG64": _PCG, "PCG64DXSM": _PCG,
    "Philox": {"state": {"counter": _uints(64, 4), "key": _uints(64, 2)},
               "buffer": _uints(64, 4), "buffer_pos": _between(0, 4),
               "has_uint32": _between(0, 1), "uinteger": _uint(32)},
    "SFC64": {"state": {"state": _uints(64, 4)}, "has_uint32": _between(0, 1),
              "uinteger": _uint(32)},
    "MT19937": {"state": {"key": _uints(32, 624), "pos": _between(0, 624)}},
}


def _check_layout(where, field, value, layout):
    if not isinstance(value, dict) or set(value) != set(layout):
        keys = sorted(value) if isinstance(value, dict) else describe(value)
        raise fail(where, field, f"must be an object with the keys {sorted(layout)}; "
                                 f"received {keys}")
    for key, spec in layout.items():
        if isinstance(spec, dict):
            _check_layout(where, f"{field}.{key}", value[key], spec)
        elif not spec[0](value[key]):
            shown = value[key] if isinstance(value[key], list) and len(value[key]) > 8 else None
            received = f"a list of {len(shown)} items" if shown else describe(value[key])
            raise fail(where, f"{field}.{key}", f"must be {spec[1]}; received {received}")


def check_rng_state(where, field, state):
    """A random generator's state: an allowed ``bit_generator`` and its exact layout."""
    if not isinstance(state, dict):
        raise fail(where, field, f"must be a generator state (an object with "
                                 f"'bit_generator'); received {describe(state)}")
    name = state.get("bit_generator")
    if not isinstance(name, str) or name not in BIT_GENERATORS:
        raise fail(where, f"{field}.bit_generator", f"must name one of the bit generators "
                                                    f"{sorted(BIT_GENERATORS)}; received "
                                                    f"{describe(name)}")
    _check_layout(where, field, {k: v for k, v in state.items() if k != "bit_generator"},
                  RNG_LAYOUTS[name])


def generator(where, field, state):
    """A ``numpy.random.Generator`` in the stored ``state`` (checked first)."""
    check_rng_state(where, field, state)
    bit_generator = BIT_GENERATORS[state["bit_generator"]]()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def check_rng_states_in(where, field, tree):
    """Check every generator state (a dict with ``bit_generator``) inside ``tree``."""
    if isinstance(tree, dict):
        if "bit_generator" in tree:
            check_rng_state(where, field, tree)
            return
        for key, value in tree.items():
            check_rng_states_in(where, f"{field}.{key}", value)
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            check_rng_states_in(where, f"{field}[{i}]", value)


# -------------------------------------------------------------------- document


def parse(where, metadata):
    """The document: JSON, an object, the right format, only known fields."""
    text = metadata.get("handgrad")
    try:
        document = _safetensors.loads_unique(text, where) if isinstance(text, str) else None
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{where} is not a handgrad model file (its handgrad metadata is "
                         f"not valid JSON: {error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{where} is not a handgrad model file (no valid handgrad metadata)")
    version = document.get("format")
    if not is_int(version) or version != FORMAT_VERSION:
        raise ValueError(f"{where} has format {version!r}; this handgrad reads format "
                         f"{FORMAT_VERSION} (field 'format')")
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise fail(where, unknown[0], f"is not a field of format {FORMAT_VERSION} (known: "
                                      f"{list(FIELDS)})")
    if "model" not in document:
        raise fail(where, "model", "is missing")
    document.setdefault("metrics", [])  # a list or an object: see handgrad.io.objective
    for name, kind in (("extra", dict), ("extra_state", dict)):
        if not isinstance(document.setdefault(name, kind()), kind):
            raise fail(where, name, f"must be a JSON {'object' if kind is dict else 'array'}; "
                                    f"received {describe(document[name])}")
    epoch = document.setdefault("epoch", 0)
    if not is_int(epoch) or epoch < 0:
        raise fail(where, "epoch", f"must be an integer >= 0; received {describe(epoch)}")
    return document


def resolve_config(where, field, value, custom_objects):
    """A copy of a stored config with custom references replaced by their objects and
    every nested layer entry (a dict with "class", or an item of "layers") checked."""
    if _custom.is_reference(value):
        return _custom.resolve(value, custom_objects, where, field)
    if isinstance(value, dict):
        if "class" in value and is_graph(entry_class(where, field, value)):
            check_graph_config(where, f"{field}.config", value["config"])
        if "layers" in value and not isinstance(value["layers"], list):
            raise fail(where, f"{field}.layers", f"must be a list of layer entries; received "
                                                 f"{describe(value['layers'])}")
        for i, item in enumerate(value.get("layers") or ()):
            entry_class(where, f"{field}.layers[{i}]", item)
        return {key: resolve_config(where, f"{field}.{key}", item, custom_objects)
                for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_config(where, f"{field}[{i}]", item, custom_objects)
                for i, item in enumerate(value)]
    return value


def _nested(field, value):
    """``(field, class, config)`` of the layer entries directly inside ``value``."""
    if isinstance(value, dict) and set(value) == {"class", "config"}:
        yield field, REGISTRY[value["class"]], value["config"]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nested(f"{field}.{key}", item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _nested(f"{field}[{i}]", item)


def _first_failure(field, cls, config):
    """``(field, error)`` of the innermost layer entry whose construction fails."""
    for child in _nested(field, config):
        found = _first_failure(f"{child[0]}.config", child[1], child[2])
        if found is not None:
            return found
    try:
        cls.from_config(config)
    except CONFIG_ERRORS as error:
        return field, error
    return None


def build_model(where, spec, custom_objects):
    """The model of the ``model`` field, built for its ``input_shape``."""
    if not isinstance(spec, dict) or set(spec) != set(MODEL_FIELDS):
        received = sorted(spec) if isinstance(spec, dict) else describe(spec)
        raise fail(where, "model", f"must be an object with the keys {list(MODEL_FIELDS)}; "
                                   f"received {received}")
    cls = entry_class(where, "model", {"class": spec["class"], "config": spec["config"]})
    shape, several = spec["input_shape"], None  # several: the number of graph inputs
    if is_graph(cls):
        check_graph_config(where, "model.config", spec["config"])
        several = None if spec["config"]["single_input"] else len(spec["config"]["inputs"])
    if several is None and not is_shape(shape):
        raise fail(where, "model.input_shape", f"must be a list of integers >= 0 (the "
                                               f"per-example shape); received {describe(shape)}")
    if several is not None and not (isinstance(shape, list) and len(shape) == several
                                    and all(map(is_shape, shape))):
        raise fail(where, "model.input_shape", f"must be a list of {several} per-example "
                                               f"shapes (one per input), each a list of "
                                               f"integers >= 0; received {describe(shape)}")
    shape = tuple(shape) if several is None else [tuple(s) for s in shape]
    config = resolve_config(where, "model.config", spec["config"], custom_objects)
    try:
        model = cls.from_config(config)
    except CONFIG_ERRORS as error:
        field, error = _first_failure("model.config", cls, config) or ("model.config", error)
        raise fail(where, field, f"is not a valid layer config: {error}") from None
    try:
        if not model.built:
            model.build(shape)
    except CONFIG_ERRORS as error:
        raise fail(where, "model.input_shape", f"{spec['input_shape']}: the model cannot be "
                                               f"built for it: {error}") from None
    built = model.input_shape
    built = tuple(built) if several is None else [tuple(s) for s in built]
    if built != shape:
        raise fail(where, "model.input_shape", f"{spec['input_shape']} disagrees with the "
                                               f"model config's input shape {built}")
    return model


def several_outputs(spec) -> bool:
    """Whether the ``model`` field describes a graph with several outputs (read before
    the model is built; :func:`build_model` checks the field)."""
    config = spec.get("config") if isinstance(spec, dict) else None
    name = spec.get("class") if isinstance(spec, dict) else None
    return (isinstance(name, str) and is_graph(REGISTRY.get(name)) and isinstance(config, dict)
            and isinstance(config.get("outputs"), list) and len(config["outputs"]) > 1)


def load_extra_state(where, model, state):
    """Restore the layers' extra state (e.g. dropout generators) exactly, or raise."""
    check_rng_states_in(where, "extra_state", state)
    unknown = sorted(set(state) - set(model.extra_state()))
    if unknown:
        raise fail(where, "extra_state", f"names layers {unknown} that have no extra state; "
                                         f"those that do are {sorted(model.extra_state())}")
    try:
        model.load_extra_state(state)
    except CONFIG_ERRORS as error:
        raise fail(where, "extra_state", f"cannot be restored: {error}") from None
    restored = jsonable(model.extra_state())
    for key, value in state.items():
        if restored[key] != value:
            raise fail(where, f"extra_state.{key}", "holds entries the layer does not "
                                                    "restore exactly")
