"""Cross-entropy's options (weight, ignore_index, probability targets, label smoothing,
channels-last), nll_loss and linear_cross_entropy against torch, and how compile treats
nll_loss."""

import functools

import numpy as np
import pytest

from handgrad import Sequential, losses
from handgrad import layers as L
from handgrad.training import metrics
from loss_cases import DTYPE_IDS, DTYPES, REDUCTIONS, check_loss, log_sum_exp

torch = pytest.importorskip("torch")
F = torch.nn.functional

CLASSES = 5


def _labels(kind, shape, dtype, rng, ignore_index):
    """Class ids (some equal to ``ignore_index`` for "ignore") or probability rows."""
    if kind == "probs":
        p = rng.random((*shape, CLASSES))
        return (p / p.sum(axis=-1, keepdims=True)).astype(dtype)
    labels = rng.integers(0, CLASSES, shape)
    if kind == "ignore":
        labels.flat[::3] = ignore_index
    return labels


def ce_sizes(x, labels, weight=None, ignore_index=-100, eps=0.0):
    """Per-item size of the terms sum_c q_c (lse - x_c), per-entry size of the gradient
    p sum(q) - q, and the mean's divisor, from the weighted (smoothed) targets q."""
    x = np.asarray(x, np.float64)
    if labels.dtype.kind in "iu":
        kept = (labels != ignore_index)[..., None]
        onehot = np.eye(CLASSES)[np.where(kept[..., 0], labels, 0)] * kept
        q = (1 - eps) * onehot + eps / CLASSES * kept
        w = 1.0 if weight is None else np.abs(weight.astype(np.float64))
        divisor = float(np.sum(onehot * w))
    else:
        q, divisor = (1 - eps) * np.abs(labels.astype(np.float64)) + eps / CLASSES, None
    if weight is not None:
        q = q * np.abs(weight.astype(np.float64))
    lse = log_sum_exp(x)
    items = np.sum(q * (np.abs(lse) + np.abs(x)), axis=-1)
    grad = np.exp(x - lse) * q.sum(axis=-1, keepdims=True) + q
    return items, grad, divisor


def _torch_classes(array):
    """Our (N, ..., C) as torch's (N, C, ...)."""
    return array.movedim(-1, 1) if array.ndim > 2 else array


@pytest.mark.parametrize("shape", [(6,), (3, 4)], ids=["NC", "NLC"])
@pytest.mark.parametrize("kind", ["ids", "ignore", "probs"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize("eps", [0.0, 0.2], ids=["sharp", "smoothed"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cross_entropy_options_match_torch(dtype, reduction, eps, weighted, kind, shape):
    rng = np.random.default_rng(len(shape) + 7 * weighted)
    x = (3 * rng.standard_normal((*shape, CLASSES))).astype(dtype)
    ignore = 1 if kind == "ignore" else -100  # a real class id: its labels are skipped
    labels = _labels(kind, shape, dtype, rng, ignore)
    weight = (0.2 + 2 * rng.random(CLASSES)).astype(dtype) if weighted else None
    ours = losses.softmax_cross_entropy(x, labels, weight=weight, ignore_index=ignore,
                                        label_smoothing=eps, reduction=reduction)
    tx = torch.tensor(x, requires_grad=True)
    t_loss = F.cross_entropy(_torch_classes(tx), _torch_classes(torch.tensor(labels))
                             if kind == "probs" else torch.tensor(labels),
                             None if weight is None else torch.tensor(weight),
                             ignore_index=ignore, label_smoothing=eps, reduction=reduction)
    items, grad, divisor = ce_sizes(x, labels, weight, ignore, eps)
    check_loss(ours, t_loss, [tx], dtype=dtype, reduction=reduction, item_sizes=items,
               grad_sizes=[grad], terms=CLASSES, divisor=divisor)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_every_label_ignored_is_nan_with_zero_gradient(smoothing):
    x = np.random.default_rng(0).standard_normal((3, CLASSES))
    labels = np.full(3, -100)
    loss, grad = losses.softmax_cross_entropy(x, labels, label_smoothing=smoothing)
    expected = F.cross_entropy(torch.tensor(x), torch.tensor(labels),
                               label_smoothing=smoothing)
    assert np.isnan(loss) and bool(torch.isnan(expected))
    assert np.all(grad == 0)
    total, _ = losses.softmax_cross_entropy(x, labels, reduction="sum")
    assert total == 0.0


@pytest.mark.parametrize("shape", [(6,), (3, 4)], ids=["NC", "NLC"])
@pytest.mark.parametrize("kind", ["ids", "ignore"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nll_loss_matches_torch(dtype, reduction, weighted, kind, shape):
    rng = np.random.default_rng(3)
    logits = 2 * rng.standard_normal((*shape, CLASSES))
    log_probs = (logits - log_sum_exp(logits)).astype(dtype)
    ignore = 2 if kind == "ignore" else -100
    labels = _labels(kind, shape, dtype, rng, ignore)
    weight = (0.2 + 2 * rng.random(CLASSES)).astype(dtype) if weighted else None
    ours = losses.nll_loss(log_probs, labels, weight, ignore, reduction=reduction)
    tl = torch.tensor(log_probs, requires_grad=True)
    t_loss = F.nll_loss(_torch_classes(tl), torch.tensor(labels),
                        None if weight is None else torch.tensor(weight),
                        ignore_index=ignore, reduction=reduction)
    kept = labels != ignore
    w = np.ones(CLASSES) if weight is None else weight.astype(np.float64)
    picked = w[np.where(kept, labels, 0)] * kept
    items = picked * np.abs(np.take_along_axis(
        log_probs.astype(np.float64), np.where(kept, labels, 0)[..., None], -1)[..., 0])
    check_loss(ours, t_loss, [tl], dtype=dtype, reduction=reduction, item_sizes=items,
               grad_sizes=[picked], divisor=float(picked.sum()))


@pytest.mark.parametrize("biased", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("options", [{}, {"weight": True, "ignore_index": 1},
                                     {"label_smoothing": 0.3}], ids=["plain", "weight", "smooth"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_linear_cross_entropy_matches_torch(dtype, reduction, options, biased):
    rng = np.random.default_rng(5)
    features = 4
    x = rng.standard_normal((6, features)).astype(dtype)
    w = rng.standard_normal((CLASSES, features)).astype(dtype)
    b = rng.standard_normal(CLASSES).astype(dtype) if biased else None
    labels = rng.integers(0, CLASSES, 6)
    kwargs = dict(options)
    if kwargs.pop("weight", False):
        kwargs["weight"] = (0.2 + 2 * rng.random(CLASSES)).astype(dtype)
    ours = losses.linear_cross_entropy(x, w, labels, linear_bias=b, reduction=reduction,
                                       **kwargs)
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, w, b) if a is not None]
    t_kwargs = {k: torch.tensor(v) if k == "weight" else v for k, v in kwargs.items()}
    t_loss = F.linear_cross_entropy(tensors[0], tensors[1], torch.tensor(labels),
                                    linear_bias=tensors[2] if biased else None,
                                    reduction=reduction, **t_kwargs)
    ax, aw = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64))
    z_sizes = ax @ aw.T + (0.0 if b is None else np.abs(b.astype(np.float64)))
    items, dz, divisor = ce_sizes(z_sizes, labels, kwargs.get("weight"),
                                  kwargs.get("ignore_index", -100),
                                  kwargs.get("label_smoothing", 0.0))
    grads = [dz @ aw, dz.T @ ax] + ([dz.sum(axis=0)] if biased else [])
    loss, (dx, dw, db) = ours
    assert (db is None) == (not biased)
    check_loss((loss, (dx, dw, db) if biased else (dx, dw)), t_loss, tensors, dtype=dtype,
               reduction=reduction, item_sizes=items, grad_sizes=grads,
               terms=features + CLASSES + 6, divisor=divisor)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: losses.softmax_cross_entropy(x, [0, 1, 2], weight=np.ones(4)), ValueError,
     r"softmax_cross_entropy: 'weight' must hold one value per class, shape \(5,\); "
     r"received shape \(4,\)"),
    (lambda x: losses.softmax_cross_entropy(x, [0, 1, 2], ignore_index=1.5), TypeError,
     r"softmax_cross_entropy: 'ignore_index' must be an integer class id; received"),
    (lambda x: losses.softmax_cross_entropy(x, np.full(x.shape, 0.2), ignore_index=0),
     ValueError, r"'ignore_index' does not apply to probability targets"),
    (lambda x: losses.nll_loss(x, [0, 7, 1]), ValueError,
     r"nll_loss: 'labels' must be class ids in \[0, 5\); received label 7 at index \(1,\)"),
    (lambda x: losses.nll_loss(x, np.zeros(3)), TypeError,
     r"nll_loss: 'labels' must be integer class ids; received"),
    (lambda x: losses.linear_cross_entropy(x, np.ones((5, 4)), [0, 1, 2]), ValueError,
     r"linear_cross_entropy: 'linear_weight' must have shape \(C, 5\)"),
])
def test_classification_losses_refuse_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call(np.zeros((3, 5)))


def test_nll_loss_in_compile_means_arg_max_accuracy_and_log_probabilities():
    assert not losses.takes_logits(losses.nll_loss)
    assert losses.takes_log_probabilities(functools.partial(losses.nll_loss, ignore_index=0))
    assert metrics.accuracy_for(losses.nll_loss) is metrics.accuracy
    assert losses.get("NLL_LOSS") is losses.nll_loss
    net = Sequential([L.Dense(3), L.Softmax()], input_shape=(2,))
    with pytest.raises(ValueError, match=r"compile: loss 'nll_loss' takes log-probabilities, "
                                         r"but the model ends with Softmax"):
        net.compile("sgd", "nll_loss")
    plain = Sequential([L.Dense(3)], input_shape=(2,), seed=0)
    plain.compile("sgd", "nll_loss", metrics=["accuracy"])
    history = plain.fit(np.zeros((4, 2), np.float32), np.array([0, 1, 2, 1]), epochs=1,
                        verbose=0)
    assert "accuracy" in history.history


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_linear_cross_entropy_keeps_classes_last_for_sequences(dtype):
    """(N, L, D) inputs give (N, L, C) logits, classes last: torch's (N, C, L) after the
    linear layer and a move of the class axis."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    w, b = rng.standard_normal((CLASSES, 4)).astype(dtype), rng.standard_normal(CLASSES)
    labels = rng.integers(0, CLASSES, (2, 3))
    loss, grads = losses.linear_cross_entropy(x, w, labels, linear_bias=b.astype(dtype))
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, w, b.astype(dtype))]
    t_loss = F.cross_entropy(F.linear(*tensors).movedim(-1, 1), torch.tensor(labels))
    z = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T + np.abs(b)
    items, dz, _ = ce_sizes(z, labels)
    flat = [dz.reshape(-1, CLASSES), np.abs(x.astype(np.float64)).reshape(-1, 4)]
    check_loss((loss, grads), t_loss, tensors, dtype=dtype, reduction="mean",
               item_sizes=items, grad_sizes=[dz @ np.abs(w), flat[0].T @ flat[1],
                                             flat[0].sum(0)], terms=4 + CLASSES + 6)


@pytest.mark.parametrize("kind", ["ids", "ignore", "probs"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_linear_cross_entropy_takes_several_class_axes(dtype, reduction, kind):
    """A weight (C, d1, d2, D) is torch's K-dimensional loss: logits (N, C, d1, d2) there,
    (N, d1, d2, C) here; labels (N, d1, d2) or probabilities (N, d1, d2, C)."""
    rng = np.random.default_rng(9)
    features, positions = 4, (2, 3)
    x = rng.standard_normal((5, features)).astype(dtype)
    w = rng.standard_normal((CLASSES, *positions, features)).astype(dtype)
    b = rng.standard_normal((CLASSES, *positions)).astype(dtype)
    weight = (0.2 + 2 * rng.random(CLASSES)).astype(dtype)
    labels = _labels(kind, (5, *positions), dtype, rng, 2)
    keywords = {} if kind == "probs" else {"ignore_index": 2}
    ours = losses.linear_cross_entropy(x, w, labels, linear_bias=b, weight=weight,
                                       label_smoothing=0.1, reduction=reduction, **keywords)
    tensors = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    target = torch.tensor(labels)
    t_loss = F.linear_cross_entropy(
        tensors[0], tensors[1], target.movedim(-1, 1) if kind == "probs" else target,
        linear_bias=tensors[2], weight=torch.tensor(weight), label_smoothing=0.1,
        reduction=reduction, **keywords)
    ax, aw = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)).reshape(-1, features)
    z = (ax @ aw.T + np.abs(b.astype(np.float64)).reshape(-1)).reshape(5, CLASSES, *positions)
    items, dz, divisor = ce_sizes(np.moveaxis(z, 1, -1), labels, weight,
                                  keywords.get("ignore_index", -100), 0.1)
    dz = np.moveaxis(dz, -1, 1).reshape(5, -1)
    grads = [dz @ aw, (dz.T @ ax).reshape(w.shape), dz.sum(axis=0).reshape(b.shape)]
    check_loss(ours, t_loss, tensors, dtype=dtype, reduction=reduction, item_sizes=items,
               grad_sizes=grads, terms=features + CLASSES + 6, divisor=divisor)


def test_linear_cross_entropy_refuses_a_bias_of_another_shape():
    with pytest.raises(ValueError, match=r"linear_cross_entropy: 'linear_bias' must have shape "
                                         r"\(5, 2\) \(linear_weight's without the features\); "
                                         r"received shape \(5,\)"):
        losses.linear_cross_entropy(np.zeros((3, 4)), np.zeros((5, 2, 4)), np.zeros((3, 2), int),
                                    linear_bias=np.zeros(5))
