"""What a layer declares about itself for the torch interop, the ONNX export and the
summary, so that those consumers (on higher floors) look a layer up by what it says
and never by its class (see docs/ARCHITECTURE.md, "How to add a layer").

A layer class states, beside its kernels:

- ``torch_twin``: a :class:`TorchTwin`, its torch module and parameter layout (data:
  torch names, handgrad keys, axis permutations) and how it changes the layout of the
  tensors after it; None: no twin (a layer with weights and no twin raises);
- ``onnx_form(g, v)``: a method adding the ONNX nodes of one call to the graph
  builder ``g`` (a service of :mod:`handgrad.io.onnx`, passed in: this floor never
  imports io) on the value ``v``; ``onnx_graph_form(g, values, out_shapes)`` the
  values of one call in a graph ``Model`` (several inputs or outputs: merges,
  attention, a nested graph), used there first; None: no export;
- ``receptive_field``: how one output position sees the input (``RECEPTIVE_FIELDS``);
- ``takes_ids``: whether the input is integer ids (the ONNX input is then int64).

A container is reached through ``children()`` (``chain`` when it runs them in order);
one that combines its children otherwise (a residual block, a graph model) declares
its own walks: ``torch_walk(walker, layout)``, ``onnx_form`` (``onnx_graph_form``)
and ``field_walk(fields, field)``, each given the consumer's service object.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

#: the layout effects a :class:`TorchTwin` declares on the tensors after the layer:
#: keep it, reset it (plain features), make channels-last maps, flatten maps
KEEP, RESET, MAPS, FLATTEN = "keep", "reset", "maps", "flatten"
#: the receptive-field rules: keeps the field / sees the whole input / a window from
#: its ``kernel_size``, ``stride`` (default 1), ``dilation`` attributes (else "n/a") /
#: the same from ``kwargs`` (a pool: stride defaults to the kernel) / the largest of
#: its inputs' windows (a merge) / no single window
RECEPTIVE_FIELDS = ("pointwise", "whole", "window", "pool", "merge", "n/a")
COUNTER = "num_batches_tracked"


@dataclass(frozen=True)
class Layout:
    """The layout of the tensor a layer reads, as torch interop tracks it: ``flat`` is
    the (*S, C) shape of channels-last maps that a ``Flatten`` turned into features
    (None otherwise), ``spatial`` whether the tensor is a channels-last map."""

    flat: tuple | None = None
    spatial: bool = False


@dataclass(frozen=True)
class TorchParam:
    """One torch state-dict entry ``name`` (under the module's prefix): the handgrad
    arrays ``keys`` (parameters or buffers) joined on their last axis, then transposed by
    ``perm`` (None: as is). ``features``: the leading axis runs over the input features,
    so it is reordered from (*S, C) to (C, *S) after a ``Flatten`` of maps. No ``keys``:
    a step counter torch keeps (ignored on import, 0 on export). ``optional``: a tied
    weight, which a torch file may hold once, under its other owner's name."""

    name: str
    keys: tuple = ()
    perm: tuple | None = None
    features: bool = False
    optional: bool = False


def _no_params(layer, layout):
    return []


@dataclass(frozen=True)
class TorchTwin:
    """A layer's torch twin: the torch ``module`` type (e.g. ``"Linear"``),
    ``params(layer, layout) -> [TorchParam]`` (``layout`` a :class:`Layout`; raise a
    ValueError where the layer has no twin for that input) and the ``layout`` effect on
    the tensors after it (``KEEP``, ``RESET``, ``MAPS``, ``FLATTEN``)."""

    module: str
    params: object = field(default=_no_params)
    layout: str = KEEP

    @property
    def has_params(self):
        return self.params is not _no_params


class Declarations:
    """The defaults of the declarations (mixed into ``Layer``): no torch twin, no ONNX
    form, a receptive field from kernel attributes if any, float input."""

    torch_twin: TorchTwin | None = None
    onnx_form = None
    onnx_graph_form = None
    torch_walk = None
    field_walk = None
    receptive_field = "window"
    takes_ids = False

    def input_ids(self) -> bool:
        """Whether the input is integer ids: ``takes_ids``, or a container's first
        child's (a chain or a residual block starting with an ``Embedding``)."""
        first = next(iter(self.children()), None)
        return self.takes_ids or (first is not None and first[1].input_ids())


def declared(registry, attribute):
    """The names of the registered layer classes that declare ``attribute`` (for the
    error messages that list what is supported)."""
    return sorted(name for name, cls in registry.items()
                  if getattr(cls, attribute, None) is not None)


def introduced(registry, attribute):
    """The names of the registered classes that declare ``attribute`` themselves, not
    through a base class that declares it (``Sequential``, not its subclasses)."""
    return [name for name, cls in sorted(registry.items()) if getattr(cls, attribute, None)
            and not any(getattr(base, attribute, None) for base in cls.__mro__[1:])]


# ------------------------------------------------------ parameter layouts of the built-ins
def conv_weight_perm(rank):
    """Axes taking a handgrad conv weight (*K, C_a, C_b) to torch's (C_b, C_a, *K)."""
    return (rank + 1, rank, *range(rank))


def _bias(layer):
    return [TorchParam("bias", ("b",))] if layer.use_bias else []


def dense_params(layer, layout):
    """Linear: weight (F_out, F_in) = W.T, bias = b."""
    return [TorchParam("weight", ("W",), (1, 0), features=True), *_bias(layer)]


def conv_params(layer, layout):
    """Conv and ConvTranspose: the weight's channel axes swapped and moved in front."""
    return [TorchParam("weight", ("W",), conv_weight_perm(layer.rank)), *_bias(layer)]


def embedding_params(layer, layout):
    return [TorchParam("weight", ("W",))]


def norm_params(layer, layout):
    """weight, bias = gamma, beta; running statistics as they are; the counter."""
    entries = [TorchParam(torch, (hg,), features=True) for torch, hg in (
        ("weight", "gamma"), ("bias", "beta"), ("running_mean", "running_mean"),
        ("running_var", "running_var")) if hg in layer.parameters or hg in layer.buffers]
    if COUNTER in layer.buffers:  # momentum=None: the counter weighs the batches
        return entries + [TorchParam(COUNTER, (COUNTER,))]
    return entries + ([TorchParam(COUNTER)] if "running_mean" in layer.buffers else [])


def group_norm_params(layer, layout):
    if layout.flat:
        raise ValueError(f"{layer.label} normalizes features flattened from channels-last "
                         f"maps, whose groups differ from torch's; it has no torch twin")
    return norm_params(layer, layout)


def layer_norm_params(layer, layout):
    """Over a whole (*S, C) map the vectors move to (C, *S)."""
    if not (layout.spatial and layer.min_rank > 1):
        return norm_params(layer, layout)
    rank = len(layer.input_shape) - 1
    if layer.min_rank <= rank:
        raise ValueError(f"{layer.label} normalizes some but not all axes of a "
                         f"channels-last map; it has no torch twin")
    return [replace(p, perm=(rank, *range(rank)), features=False)
            for p in norm_params(layer, layout)]


def tied_dense_params(layer, layout):
    """Linear whose weight is the Embedding's table (V, D): weight = E (optional), bias."""
    if layout.flat:
        raise ValueError(f"{layer.label} projects features flattened from channels-last "
                         f"maps with a tied table, which no torch twin reorders")
    return [TorchParam("weight", ("E",), optional=True), *_bias(layer)]


def recurrent_params(layer, layout):
    """weight_ih/hh_l{k}[_reverse] = W.T, bias_ih/hh as they are (torch's gate order),
    weight_hr = W_hr.T (an LSTM's proj_size)."""
    entries = []
    for k in range(layer.num_layers):
        for d in range(layer.directions):
            s = layer.parameter_suffix(k, d)
            entries += [TorchParam(f"weight_ih{s}", (f"W_ih{s}",), (1, 0)),
                        TorchParam(f"weight_hh{s}", (f"W_hh{s}",), (1, 0))]
            if layer.use_bias:
                entries += [TorchParam(f"bias_ih{s}", (f"b_ih{s}",)),
                            TorchParam(f"bias_hh{s}", (f"b_hh{s}",))]
            if getattr(layer, "proj_size", 0):  # an LSTM's projection, torch's weight_hr
                entries.append(TorchParam(f"weight_hr{s}", (f"W_hr{s}",), (1, 0)))
    return entries


def attention_params(layer, layout):
    """torch packs q, k, v of one size into in_proj_weight (= [W_q W_k W_v].T)."""
    t = (1, 0)
    if layer.packed:
        entries, biases = [TorchParam("in_proj_weight", ("W_in",), t)], ("b_in",)
    else:
        if layer.key_dim == layer.value_dim == layer.embed_dim:
            entries = [TorchParam("in_proj_weight", ("W_q", "W_k", "W_v"), t)]
        else:
            entries = [TorchParam(f"{k}_proj_weight", (f"W_{k}",), t) for k in "qkv"]
        biases = ("b_q", "b_k", "b_v")
    if layer.use_bias:
        entries.append(TorchParam("in_proj_bias", biases))
    entries.append(TorchParam("out_proj.weight", ("W_out",), t))
    if layer.use_bias:
        entries.append(TorchParam("out_proj.bias", ("b_out",)))
    if layer.add_bias_kv:
        entries += [TorchParam("bias_k", ("bias_k",)), TorchParam("bias_v", ("bias_v",))]
    return entries
