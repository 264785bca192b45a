"""Adapters of the ``module_db`` rows: the torch module is built from the row's
constructor input, then its call becomes the ``nn.functional`` row it computes, with
the module's settings (read from its attributes) and parameters as that row's keywords,
so the parameters are compared as differentiable inputs of the functional adapter."""

from __future__ import annotations

import torch

from .helpers import Sample, Unsupported

F = torch.nn.functional
ACT = {"ReLU": "relu", "ReLU6": "relu6", "SELU": "selu", "SiLU": "silu", "Mish": "mish",
       "Hardswish": "hardswish", "LogSigmoid": "logsigmoid", "Softsign": "softsign",
       "Tanhshrink": "tanhshrink", "LeakyReLU": "leaky_relu", "ELU": "elu", "CELU": "celu",
       "GELU": "gelu", "Hardshrink": "hardshrink", "Softshrink": "softshrink",
       "Hardtanh": "hardtanh", "Softplus": "softplus", "Threshold": "threshold"}
ATTRS = {"leaky_relu": ("negative_slope",), "elu": ("alpha",), "celu": ("alpha",),
         "gelu": ("approximate",), "hardshrink": ("lambd",), "softshrink": ("lambd",),
         "hardtanh": ("min_val", "max_val"), "softplus": ("beta", "threshold"),
         "threshold": ("threshold", "value")}
LOSSES = {"L1Loss": ("l1_loss", ()), "MSELoss": ("mse_loss", ()),
          "SmoothL1Loss": ("smooth_l1_loss", ("beta",)), "HuberLoss": ("huber_loss", ("delta",)),
          "BCELoss": ("binary_cross_entropy", ("weight",)),
          "BCEWithLogitsLoss": ("binary_cross_entropy_with_logits", ("weight", "pos_weight")),
          "CrossEntropyLoss": ("cross_entropy", ("weight", "ignore_index", "label_smoothing")),
          "NLLLoss": ("nll_loss", ("weight", "ignore_index")),
          "KLDivLoss": ("kl_div", ("log_target",)),
          "MarginRankingLoss": ("margin_ranking_loss", ("margin",)),
          "MultiLabelMarginLoss": ("multilabel_margin_loss", ()),
          "MultiMarginLoss": ("multi_margin_loss", ("p", "margin", "weight")),
          "SoftMarginLoss": ("soft_margin_loss", ()),
          "MultiLabelSoftMarginLoss": ("multilabel_soft_margin_loss", ("weight",)),
          "GaussianNLLLoss": ("gaussian_nll_loss", ("full", "eps")),
          "PoissonNLLLoss": ("poisson_nll_loss", ("log_input", "full", "eps")),
          "HingeEmbeddingLoss": ("hinge_embedding_loss", ("margin",)),
          "CosineEmbeddingLoss": ("cosine_embedding_loss", ("margin",))}
POOL = ("kernel_size", "stride", "padding")
CONV = ("stride", "padding", "dilation", "groups")


class _Op:
    """The part of an OpInfo an adapter reads: the torch function."""

    def __init__(self, fn):
        self.op = fn


def materialize(m, args):
    """A lazy module's parameters, from one call on ``args``."""
    lazy = torch.nn.parameter.UninitializedParameter
    if any(isinstance(p, lazy) for p in m.parameters()):
        with torch.no_grad():
            m(*[a.detach().float() if isinstance(a, torch.Tensor) else a for a in args])


def as_functional(row, fn, attrs=(), params=(), check=None, fixed=None, derive=None):
    """A module adapter: the module's call as ``fn(input, *other inputs, **{attr: the
    module's attribute}, **{param: the module's parameter}, **fixed, **derive(module))``
    through ``OPS[row]``; ``check(module)`` raises Unsupported for what it cannot say."""

    def adapter(info, module_input, training):
        from .registry import OPS

        ci, fi = module_input.constructor_input, module_input.forward_input
        m = info.module_cls(*ci.args, **ci.kwargs)
        if fi.kwargs:
            raise Unsupported("forward keywords")
        if not fi.args or not isinstance(fi.args[0], torch.Tensor):
            raise Unsupported("input type")
        materialize(m, fi.args)
        m = m.to(fi.args[0].dtype).train(training)
        if check is not None:
            check(m)
        kwargs = {a: getattr(m, a) for a in attrs}
        if "reduction" in vars(m):
            kwargs["reduction"] = m.reduction
        kwargs.update({p: getattr(m, p) for p in params})
        kwargs.update(fixed or {})
        kwargs.update(derive(m, fi.args[0]) if derive is not None else {})
        return OPS[row](_Op(fn), Sample(fi.args[0], fi.args[1:], kwargs))

    return adapter


def _batch_stats(m, x):
    """What a BatchNorm / InstanceNorm module passes to its functional form."""
    if m.momentum is None:
        raise Unsupported("momentum None (cumulative average)")
    use_batch = m.training or m.running_mean is None
    flag = "training" if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) else \
        "use_input_stats"
    if flag == "use_input_stats" and x.dim() == m._get_no_batch_dim():
        raise Unsupported("unbatched input")
    return {"running_mean": m.running_mean if not m.training or m.track_running_stats
            else None,
            "running_var": m.running_var if not m.training or m.track_running_stats else None,
            flag: use_batch, "momentum": m.momentum, "eps": m.eps}


def _zeros_padding(m):
    if m.padding_mode != "zeros":
        raise Unsupported(f"padding_mode {m.padding_mode}")


MODULES = {name: as_functional(row, getattr(F, row), ATTRS.get(row, ()))
           for name, row in ACT.items()}
MODULES.update({name: as_functional(row, getattr(F, row), attrs)
                for name, (row, attrs) in LOSSES.items()})
for _nd in (1, 2, 3):
    MODULES[f"MaxPool{_nd}d"] = as_functional(
        f"max_pool{_nd}d", getattr(F, f"max_pool{_nd}d"),
        POOL + ("dilation", "ceil_mode", "return_indices"))
    MODULES[f"AvgPool{_nd}d"] = as_functional(
        f"avg_pool{_nd}d", getattr(F, f"avg_pool{_nd}d"),
        POOL + ("ceil_mode", "count_include_pad") + (("divisor_override",) if _nd > 1 else ()))
    MODULES[f"AdaptiveMaxPool{_nd}d"] = as_functional(
        f"adaptive_max_pool{_nd}d", getattr(F, f"adaptive_max_pool{_nd}d"),
        ("output_size", "return_indices"))
    MODULES[f"AdaptiveAvgPool{_nd}d"] = as_functional(
        f"adaptive_avg_pool{_nd}d", getattr(F, f"adaptive_avg_pool{_nd}d"), ("output_size",))
    for _lazy in ("", "Lazy"):
        MODULES[f"{_lazy}Conv{_nd}d"] = as_functional(
            f"conv{_nd}d", getattr(F, f"conv{_nd}d"), CONV, ("weight", "bias"), _zeros_padding)
        MODULES[f"{_lazy}ConvTranspose{_nd}d"] = as_functional(
            f"conv_transpose{_nd}d", getattr(F, f"conv_transpose{_nd}d"),
            CONV + ("output_padding",), ("weight", "bias"), _zeros_padding)
for _nd in (1, 2):
    MODULES[f"LPPool{_nd}d"] = as_functional(f"lp_pool{_nd}d", getattr(F, f"lp_pool{_nd}d"),
                                             ("norm_type", "kernel_size", "stride",
                                              "ceil_mode"))
for _nd in (2, 3):
    MODULES[f"FractionalMaxPool{_nd}d"] = as_functional(
        f"fractional_max_pool{_nd}d", getattr(F, f"fractional_max_pool{_nd}d"),
        ("kernel_size", "output_size", "output_ratio", "return_indices"))
MODULES["Linear"] = as_functional("linear", F.linear, (), ("weight", "bias"))
MODULES["Bilinear"] = as_functional("bilinear", F.bilinear, (), ("weight", "bias"))
MODULES["PReLU"] = as_functional("prelu", F.prelu, (), ("weight",))
for _nd in (1, 2, 3):
    MODULES[f"BatchNorm{_nd}d"] = as_functional("batch_norm", F.batch_norm, (),
                                                ("weight", "bias"), derive=_batch_stats)
    MODULES[f"InstanceNorm{_nd}d"] = as_functional("instance_norm", F.instance_norm, (),
                                                   ("weight", "bias"), derive=_batch_stats)
MODULES["LayerNorm"] = as_functional("layer_norm", F.layer_norm, ("normalized_shape", "eps"),
                                     ("weight", "bias"))
MODULES["RMSNorm"] = as_functional("rms_norm", F.rms_norm, ("normalized_shape", "eps"),
                                   ("weight",))
MODULES["GroupNorm"] = as_functional("group_norm", F.group_norm, ("num_groups", "eps"),
                                     ("weight", "bias"))
MODULES["LocalResponseNorm"] = as_functional("local_response_norm", F.local_response_norm,
                                             ("size", "alpha", "beta", "k"))
MODULES["Sigmoid"] = as_functional("sigmoid", torch.sigmoid)
MODULES["Tanh"] = as_functional("tanh", torch.tanh)
MODULES["Softmax2d"] = as_functional("softmax", F.softmax, fixed={"dim": -3})
MODULES["GLU"] = as_functional("glu", F.glu, ("dim",))
for _name, _fn in (("Softmax", F.softmax), ("LogSoftmax", F.log_softmax),
                   ("Softmin", F.softmin)):
    MODULES[_name] = as_functional(_fn.__name__, _fn, ("dim",))

_PAD_MODES = {"Reflection": "reflect", "Replication": "replicate", "Zero": "constant",
              "Circular": "circular", "Constant": "constant"}


def _pad_args(m, x):
    mode = next(v for k, v in _PAD_MODES.items() if type(m).__name__.startswith(k))
    return {"pad": tuple(m.padding), "mode": mode,
            **({"value": m.value} if mode == "constant" else {})}


for _kind, _mode in _PAD_MODES.items():
    for _nd in (1, 2, 3):
        MODULES[f"{_kind}Pad{_nd}d"] = as_functional(f"pad.{_mode}", F.pad, derive=_pad_args)


def embedding(info, module_input, training):
    """Embedding: op_db's embedding row takes ``(weight, ids)``."""
    from .registry import OPS

    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs)
    kwargs = {"padding_idx": m.padding_idx, "max_norm": m.max_norm,
              "scale_grad_by_freq": m.scale_grad_by_freq}
    weight = m.weight.detach().to(torch.get_default_dtype()).requires_grad_(True)
    if fi.kwargs or len(fi.args) != 1:
        raise Unsupported("forward keywords")
    return OPS["embedding"](_Op(lambda w, ids, **k: F.embedding(ids, w, **k)),
                            Sample(weight, fi.args, kwargs))


MODULES["Embedding"] = embedding


def _linear_ce(m, x):
    """LinearCrossEntropyLoss holds a Linear (its weight, and its bias when asked), stored
    flat: (C d1...dK, D) for the (C, d1, ..., dK, D) of ``out_features`` (d1, ..., dK)."""
    classes = (m.num_classes, *m.out_features)

    def shaped(p, *rest):
        return None if p is None else p.detach().reshape(classes + rest).requires_grad_()

    return {"linear_weight": shaped(m.linear.weight, m.linear.in_features),
            "linear_bias": shaped(m.linear.bias),
            "weight": m.weight, "ignore_index": m.ignore_index,
            "label_smoothing": m.label_smoothing}


def _lce_adapter(info, module_input, training):
    """The functional row takes ``(input, linear_weight, target)``: reorder."""
    from .registry import OPS

    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs).to(fi.args[0].dtype)
    kwargs = {k: v for k, v in _linear_ce(m, fi.args[0]).items() if v is not None}
    kwargs["reduction"] = m.reduction
    weight = kwargs.pop("linear_weight")
    return OPS["linear_cross_entropy"](_Op(F.linear_cross_entropy),
                                       Sample(fi.args[0], (weight, fi.args[1]), kwargs))


MODULES["LinearCrossEntropyLoss"] = _lce_adapter
