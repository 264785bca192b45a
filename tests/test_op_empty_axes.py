"""Empty axes, op family by op family, against torch.

Each case runs an op (and its loop twin, where there is one) with one axis of size 0,
on the NumPy and the compiled kernels, and torch on the same arrays (channels moved):
- where torch gives a result, handgrad gives the same output and gradients;
- where torch refuses, handgrad raises a ValueError that names the argument and its shape.
A few cases deliberately differ, where torch's answer is not usable (``expect``):
"refuse" (torch answers with a wrongly shaped array or NaN) or "empty" (torch crashes or
gives a NaN gradient; handgrad gives the empty output and zero parameter gradients the
sums over nothing give).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, finite_max

torch = pytest.importorskip("torch")
F = torch.nn.functional


def cf(t):
    """A channels-last tensor as torch's channels-first."""
    return t.movedim(-1, 1)


def cl(t):
    return t.movedim(1, -1)


def tw(w):
    """A conv weight (*K, A, B) as torch's (B, A, *K)."""
    nd = w.ndim - 2
    return w.permute(nd + 1, nd, *range(nd))


@dataclass
class Empty:
    """One call of ``op`` on arrays of ``shapes``; ``twin`` is torch's on the same tensors.

    ``prep`` turns the arrays into the op's arguments, ``pick`` selects the backward
    results that are their gradients; a refusal must name ``arg``, the ``arg_index``-th
    array."""

    op: str
    shapes: tuple
    twin: object
    prep: object = None
    kwargs: dict = field(default_factory=dict)
    pick: tuple = None
    expect: str = "torch"
    arg: str = "x"
    arg_index: int = 0


def conv(nd, shapes, **kw):
    fn = F.conv1d if nd == 1 else F.conv2d
    return Empty(f"conv{nd}d", shapes, lambda x, w, b: cl(fn(cf(x), tw(w), b, **kw)), kwargs=kw)


def conv_t(nd, shapes):
    fn = F.conv_transpose1d if nd == 1 else F.conv_transpose2d
    return Empty(f"conv_transpose{nd}d", shapes, lambda x, w, b: cl(fn(cf(x), tw(w), b)))


def pool(op, shape):
    return Empty(op, (shape,), lambda x: cl(getattr(F, op)(cf(x), 2)), kwargs={"kernel_size": 2})


def global_pool(kind, shape, expect="torch"):
    twin = getattr(F, f"adaptive_{kind}_pool2d")
    return Empty(f"global_{kind}_pool", (shape,), lambda x: twin(cf(x), 1).flatten(1),
                 expect=expect)


def norm(op, shape, expect="torch"):
    """batch, instance, group (2 groups) or layer norm (over the last axis) with affine."""
    twins = {
        "batch_norm": lambda x, g, b: cl(F.batch_norm(cf(x), None, None, g, b, training=True)),
        "instance_norm": lambda x, g, b: cl(F.instance_norm(cf(x), weight=g, bias=b)),
        "group_norm": lambda x, g, b: cl(F.group_norm(cf(x), 2, g, b)),
        "layer_norm": lambda x, g, b: F.layer_norm(x, g.shape, g, b),
    }
    preps = {"group_norm": lambda x, g, b: (x, 2, g, b),
             "layer_norm": lambda x, g, b: (x, g.shape, g, b)}
    return Empty(op, (shape, shape[-1:], shape[-1:]), twins[op], prep=preps.get(op),
                 expect=expect)


def batch_norm_eval(shape):
    channels = shape[-1]

    def twin(x, g, b):
        stats = torch.zeros(channels, dtype=x.dtype), torch.ones(channels, dtype=x.dtype)
        return cl(F.batch_norm(cf(x), *stats, g, b, training=False))
    return Empty("batch_norm", (shape, (channels,), (channels,)), twin,
                 prep=lambda x, g, b: (x, g, b, np.zeros(channels), np.ones(channels)),
                 kwargs={"training": False})


def embedding(ids, table_shape):
    return Empty("embedding", (table_shape,), lambda w: F.embedding(torch.tensor(ids), w),
                 prep=lambda w: (ids, w))


def recurrent(cell, n, t, f, h, arg="x", arg_index=0):
    gates = {"rnn": 1, "lstm": 4, "gru": 3}[cell]

    def twin(x, w_ih, w_hh, b_ih, b_hh):
        module = getattr(torch.nn, cell.upper())(f, h, batch_first=True, dtype=torch.float64)
        params = {"weight_ih_l0": w_ih.T, "weight_hh_l0": w_hh.T, "bias_ih_l0": b_ih,
                  "bias_hh_l0": b_hh}
        return torch.func.functional_call(module, params, (x,))[0]
    width = gates * h
    return Empty(cell, ((n, t, f), (f, width), (h, width), (width,), (width,)), twin,
                 pick=(0, 3, 4, 5, 6) if cell == "lstm" else (0, 2, 3, 4, 5), arg=arg,
                 arg_index=arg_index)


def attention(n, tq, tk, e, ev):
    return Empty("scaled_dot_product_attention", ((n, tq, e), (n, tk, e), (n, tk, ev)),
                 F.scaled_dot_product_attention)


def multi_head(n, tq, tk):
    def twin(q, k, v, w_in, w_out):
        module = torch.nn.MultiheadAttention(4, 2, bias=False, batch_first=True,
                                             dtype=torch.float64)
        params = {"in_proj_weight": w_in.T, "out_proj.weight": w_out.T}
        return torch.func.functional_call(module, params, (q, k, v), {"need_weights": False})[0]
    return Empty("multi_head_attention", ((n, tq, 4), (n, tk, 4), (n, tk, 4), (4, 12), (4, 4)),
                 twin, prep=lambda q, k, v, wi, wo: (q, k, v, wi, None, wo, None),
                 kwargs={"num_heads": 2}, pick=(0, 1, 2, 3, 5))


W2, WT2, IDS = (3, 3, 3, 4), (3, 3, 2, 3), np.array([[1, 0], [4, 4]])
CASES = {
    "conv2d-N": conv(2, ((0, 5, 5, 3), W2, (4,)), padding=1),
    "conv2d-H": conv(2, ((2, 0, 5, 3), W2, (4,)), padding=2),
    # torch returns an output with 0 channels whatever C_out is: refused
    "conv2d-C_in": replace(conv(2, ((2, 5, 5, 0), (3, 3, 0, 4), (4,))), expect="refuse"),
    "conv2d-C_out": replace(conv(2, ((2, 5, 5, 3), (3, 3, 3, 0), (0,))), arg="w", arg_index=1),
    "conv2d-K": replace(conv(2, ((2, 5, 5, 3), (0, 3, 3, 4), (4,))), arg="w", arg_index=1),
    "conv2d-depthwise-N": conv(2, ((0, 5, 5, 4), (3, 3, 1, 8), (8,)), groups=4),
    "conv1d-N": conv(1, ((0, 6, 3), (3, 3, 4), (4,))),
    "conv1d-L": conv(1, ((2, 0, 3), (3, 3, 4), (4,))),
    "conv_transpose2d-N": conv_t(2, ((0, 4, 4, 3), WT2, (2,))),
    "conv_transpose2d-H": conv_t(2, ((2, 0, 4, 3), WT2, (2,))),
    "conv_transpose2d-C_in": conv_t(2, ((2, 4, 4, 0), (3, 3, 2, 0), (2,))),
    "conv_transpose2d-C_out": replace(conv_t(2, ((2, 4, 4, 3), (3, 3, 0, 3), (0,))), arg="w",
                                      arg_index=1),
    "conv_transpose1d-L": conv_t(1, ((2, 0, 3), (3, 2, 3), (2,))),
    **{f"{op}-{axis}": pool(op, shape) for op in ("max_pool2d", "avg_pool2d")
       for axis, shape in (("N", (0, 4, 4, 3)), ("H", (2, 0, 4, 3)), ("C", (2, 4, 4, 0)))},
    **{f"{op}-{axis}": pool(op, shape) for op in ("max_pool1d", "avg_pool1d")
       for axis, shape in (("N", (0, 4, 3)), ("L", (2, 0, 3)), ("C", (2, 4, 0)))},
    # the global pools refuse what the other pools refuse (torch's average gives NaN for
    # H = 0 and accepts C = 0; its maximum refuses both)
    **{f"global_{kind}_pool-{axis}": global_pool(kind, shape, "refuse" if kind == "avg" and
                                                 axis != "N" else "torch")
       for kind in ("avg", "max")
       for axis, shape in (("N", (0, 4, 4, 3)), ("H", (2, 0, 4, 3)), ("C", (2, 4, 4, 0)))},
    **{f"linear-{axis}": Empty("linear", shapes, lambda x, w, b: F.linear(x, w.T, b))
       for axis, shapes in (("F_in", ((3, 0), (0, 4), (4,))), ("F_out", ((3, 5), (5, 0), (0,))),
                            ("N", ((0, 5), (5, 4), (4,))), ("T", ((2, 0, 5), (5, 4), (4,))))},
    "batch_norm-N": norm("batch_norm", (0, 3, 4)),
    "batch_norm-L": norm("batch_norm", (2, 0, 4)),
    "batch_norm-C": norm("batch_norm", (2, 3, 0)),
    "batch_norm-eval-N": batch_norm_eval((0, 3, 4)),
    "instance_norm-N": norm("instance_norm", (0, 3, 4), "empty"),  # torch: IndexError
    "instance_norm-L": norm("instance_norm", (2, 0, 4)),
    "instance_norm-C": norm("instance_norm", (2, 3, 0)),
    "group_norm-N": norm("group_norm", (0, 3, 4)),
    "group_norm-L": norm("group_norm", (2, 0, 4), "empty"),  # torch: NaN dgamma
    "group_norm-C": norm("group_norm", (2, 3, 0)),
    "layer_norm-N": norm("layer_norm", (0, 4)),
    "layer_norm-T": norm("layer_norm", (2, 0, 4)),
    "layer_norm-D": norm("layer_norm", (2, 3, 0)),
    "embedding-ids": embedding(IDS[:0], (5, 3)),
    "embedding-T": embedding(IDS[:, :0], (5, 3)),
    "embedding-D": embedding(IDS, (5, 0)),
    "embedding-V": embedding(IDS[:0], (0, 3)),
    **{f"{op}-{axis}": Empty(op, (shape,), lambda x, f=twin, a=a: f(x, a), kwargs={"axis": a})
       for op, twin in (("softmax", F.softmax), ("log_softmax", F.log_softmax))
       for axis, shape, a in (("N", (0, 5), -1), ("axis", (3, 0), -1), ("other", (3, 0), 0))},
    **{f"{decl.name}-empty": Empty(decl.name, ((2, 0, 3),),
                                   lambda x, decl=decl: decl.torch(F, x))
       for decl in ops.declare.activations() if decl.elementwise},  # every declared one
    "dropout-empty": Empty("dropout", ((3, 0),), lambda x: F.dropout(x, 0.5),
                           prep=lambda x: (x, 0.5, 0)),
    **{f"{cell}-{axis}": recurrent(cell, *sizes, *arg)
       for cell in ("rnn", "lstm", "gru") for axis, sizes, arg in (
           ("N", (0, 4, 3, 5), ()), ("T", (2, 0, 3, 5), ()), ("F", (2, 4, 0, 5), ()),
           ("H", (2, 4, 3, 0), ("W_hh", 2)))},
    **{f"scaled_dot_product_attention-{axis}": attention(*sizes) for axis, sizes in (
        ("N", (0, 3, 4, 5, 6)), ("Tq", (2, 0, 4, 5, 6)), ("Tk", (2, 3, 0, 5, 6)),
        ("E", (2, 3, 4, 0, 6)), ("Ev", (2, 3, 4, 5, 0)))},
    **{f"multi_head_attention-{axis}": multi_head(*sizes) for axis, sizes in (
        ("N", (0, 3, 4)), ("Tq", (2, 0, 4)), ("Tk", (2, 3, 0)))},
}


def torch_result(case, arrays, rng):
    """(y, dy, gradients) from torch, or None where torch refuses the input."""
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    try:
        y = case.twin(*tensors)
    except (RuntimeError, ValueError, IndexError):
        return None
    dy = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(dy))
    grads = [np.zeros(a.shape) if t.grad is None else t.grad.numpy()
             for a, t in zip(arrays, tensors)]
    return y.detach().numpy(), dy, grads


def run(module, case, arrays, dy=None):
    args = case.prep(*arrays) if case.prep else arrays
    out = getattr(module, case.op)(*args, **case.kwargs)
    y, cache = out[0], out[-1]
    grads = getattr(module, case.op + "_backward")(np.zeros(y.shape) if dy is None else dy, cache)
    grads = grads if isinstance(grads, tuple) else (grads,)
    return y, [grads[i] for i in (case.pick or range(len(arrays)))]


PARAMS = [pytest.param(module, key, id=f"{label}-{key}")
          for label, module in (("ops", ops), ("loops", reference))
          for key, case in CASES.items() if hasattr(module, case.op)]


@pytest.mark.parametrize("module, key", PARAMS)
def test_empty_axis_behaves_as_in_torch(module, key, kernel_path):
    case, rng = CASES[key], np.random.default_rng(0)
    arrays = [rng.standard_normal(shape) for shape in case.shapes]
    expected = torch_result(case, arrays, rng)
    if case.expect == "refuse" or (case.expect == "torch" and expected is None):
        with pytest.raises(ValueError) as info:
            run(module, case, arrays)
        message = str(info.value)
        assert message.startswith(f"{case.op}: '{case.arg}'"), message
        assert str(case.shapes[case.arg_index]) in message, message
        return
    if case.expect == "empty":
        y, grads = run(module, case, arrays)
        assert y.shape == case.shapes[0] and y.size == 0
        for grad, array in zip(grads, arrays):
            np.testing.assert_array_equal(grad, np.zeros(array.shape))
        return
    assert expected is not None, "torch refuses an input that handgrad should accept"
    y_torch, dy, grads_torch = expected
    y, grads = run(module, case, arrays, dy)
    # Each value is a sum of at most ``terms`` products of two factors no larger than the
    # largest input or dy (softmax weights are <= 1): that bounds the size of the terms.
    size = max([1.0, finite_max(dy)] + [finite_max(a) for a in arrays]) ** 2
    terms = max([dy.size] + [a.size for a in arrays])
    assert_close(y, y_torch, terms=terms, scale=size, what=f"{key}: y")
    for i, (ours, theirs) in enumerate(zip(grads, grads_torch)):
        assert_close(ours, theirs, terms=terms, scale=size, what=f"{key}: gradient {i}")
