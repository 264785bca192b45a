"""What a graph ``Model`` takes and gives: arrays by input, gradients by output, and its
config (the layers and the calls between them, replayed by ``from_config``)."""

from __future__ import annotations

from .._checks import describe
from ..layers.symbolic import shape_matches
from ..layers.tied import link_tied


def _named(owner, what, names, value):
    """A list in ``names`` order from an array, a list or a dict keyed by ``names``."""
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(names))
        missing = [n for n in names if n not in value]
        if unknown or missing:
            raise ValueError(f"{owner}: '{what}' keys must be {names}; missing {missing}, "
                             f"unexpected {unknown}")
        return [value[n] for n in names]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) != len(names):
        raise ValueError(f"{owner}: '{what}' must hold {len(names)} entries (one per "
                         f"{'input' if what == 'x' else 'output'}: {names}); received "
                         f"{len(values)}")
    return values


def arrays_by_input(model, x):
    """The input arrays in input order, each checked against its Input's shape."""
    arrays = _named(model.label, "x", model.input_names, x)
    first = None
    for name, tensor, array in zip(model.input_names, model.inputs, arrays):
        shape = getattr(array, "shape", None)
        if shape is None or not shape_matches(tuple(shape[1:]), tensor.shape):
            raise ValueError(f"{model.label}: input {name!r} must have shape (N, "
                             f"{', '.join(map(str, tensor.shape))}); received "
                             f"{describe(array)}")
        if first is not None and shape[0] != first:
            raise ValueError(f"{model.label}: every input must have the same batch size; "
                             f"input {name!r} has {shape[0]}, the first has {first}")
        first = shape[0]
    return arrays


def output_gradients(model, dy, shapes):
    """``{tensor uid: dL/dtensor}`` for the outputs given a gradient (None: none)."""
    values = _named(model.label, "dy", model.output_names, dy)
    grads = {}
    for name, tensor, grad in zip(model.output_names, model.outputs, values):
        if grad is None:
            continue
        shape, _ = shapes[tensor.uid]
        if getattr(grad, "shape", None) != shape:
            raise ValueError(f"{model.label}: the gradient of output {name!r} must have "
                             f"shape {shape}; received {describe(grad)}")
        grads[tensor.uid] = grads[tensor.uid] + grad if tensor.uid in grads else grad
    return grads


def _reference(model, tensor, node_index):
    """``["input", i]`` or ``[node index, output index]`` for a tensor of ``model``."""
    for i, candidate in enumerate(model.inputs):
        if candidate is tensor:
            return ["input", i]
    return [node_index[id(tensor.node)], tensor.index]


def config_of(model) -> dict:
    """Inputs, layers, the calls (nodes) and the outputs, JSON-serializable."""
    node_index = {id(node): i for i, node in enumerate(model.nodes)}
    return {
        "inputs": [{"shape": list(t.shape), "name": t.name,
                    "dtype": None if t.dtype is None else t.dtype.name} for t in model.inputs],
        "layers": [{"class": type(layer).__name__, "config": layer.get_config()}
                   for layer in model.layers],
        "nodes": [{"layer": node.layer.name,
                   "inputs": [_reference(model, t, node_index) for t in node.inputs],
                   **({} if node.training is None else {"training": node.training})}
                  for node in model.nodes],
        "outputs": [_reference(model, t, node_index) for t in model.outputs],
        "single_input": model.single_input, "single_output": model.single_output,
        **({} if model.output_keys is None else {"output_keys": model.output_keys}),
    }


def replay(config, registry, make_input):
    """``(inputs, outputs, remaining config)``: rebuild the layers and call them again."""
    config = dict(config)
    try:
        inputs = [make_input(tuple(spec["shape"]), spec.get("name"), spec.get("dtype"))
                  for spec in config.pop("inputs")]
        layers = {}
        for entry in config.pop("layers"):
            if entry.get("class") not in registry:
                raise ValueError(f"unknown layer class {entry.get('class')!r}")
            layer = registry[entry["class"]].from_config(entry["config"])
            layers[layer.name] = layer
        link_tied(layers.values())  # a TiedDense's config names its Embedding
        produced = []

        def tensor(ref):
            return inputs[ref[1]] if ref[0] == "input" else produced[ref[0]][ref[1]]

        for node in config.pop("nodes"):
            args = [tensor(ref) for ref in node["inputs"]]
            out = layers[node["layer"]](args if len(args) > 1 else args[0],
                                        training=node.get("training"))
            produced.append(out if isinstance(out, list) else [out])
        outputs = [tensor(ref) for ref in config.pop("outputs")]
        single_input, single_output = config.pop("single_input"), config.pop("single_output")
        keys = config.pop("output_keys", None)
        if keys is not None:
            outputs = dict(zip(keys, outputs))
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"Model.from_config: malformed graph config ({error!r})") from None
    return (inputs[0] if single_input else inputs, outputs[0] if single_output else outputs,
            config)
