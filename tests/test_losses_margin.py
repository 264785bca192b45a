"""The margin losses against torch: forward and every gradient, each reduction, float32
and float64, random targets; and their refusals."""

import numpy as np
import pytest

from handgrad import losses
from handgrad.training import metrics
from loss_cases import DTYPE_IDS, DTYPES, REDUCTIONS, check_loss

torch = pytest.importorskip("torch")
F = torch.nn.functional

N, C = 6, 4


def _rng(dtype, seed):
    return np.random.default_rng(seed + (dtype == np.float32))


def _tensors(*arrays):
    return [torch.tensor(a, requires_grad=True) for a in arrays]


def _pairs(dtype, seed, y_shape):
    """Two (N, C) inputs and +-1 labels of ``y_shape``."""
    rng = _rng(dtype, seed)
    x1, x2 = (rng.standard_normal((N, C)).astype(dtype) for _ in range(2))
    return x1, x2, rng.choice([-1.0, 1.0], y_shape).astype(dtype)


def _w(a):
    return np.abs(np.asarray(a, np.float64))


@pytest.mark.parametrize("margin", [0.0, 0.5])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_margin_ranking_matches_torch(dtype, reduction, margin):
    x1, x2, y = _pairs(dtype, 1, (N, C))
    ours = losses.margin_ranking(x1, x2, y, margin=margin, reduction=reduction)
    tensors = _tensors(x1, x2)
    t_loss = F.margin_ranking_loss(*tensors, torch.tensor(y), margin=margin, reduction=reduction)
    check_loss(ours, t_loss, tensors, dtype=dtype, reduction=reduction,
               item_sizes=_w(x1) + _w(x2) + margin, grad_sizes=[np.ones(1)] * 2, terms=3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_hinge_embedding_and_soft_margin_match_torch(dtype, reduction):
    rng = _rng(dtype, 2)
    x = (2 * rng.standard_normal((N, C))).astype(dtype)
    y = rng.choice([-1.0, 1.0], (N, C)).astype(dtype)
    for ours_fn, torch_fn in [(losses.hinge_embedding, F.hinge_embedding_loss),
                              (losses.soft_margin, F.soft_margin_loss)]:
        tensors = _tensors(x)
        t_loss = torch_fn(tensors[0], torch.tensor(y), reduction=reduction)
        check_loss(ours_fn(x, y, reduction=reduction), t_loss, tensors, dtype=dtype,
                   reduction=reduction, item_sizes=_w(x) + 1.0, grad_sizes=[np.ones(1)],
                   terms=3)


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_multilabel_soft_margin_matches_torch(dtype, reduction, weighted):
    rng = _rng(dtype, 3)
    x = (3 * rng.standard_normal((N, C))).astype(dtype)
    y = rng.integers(0, 2, (N, C)).astype(dtype)
    weight = (0.2 + rng.random(C)).astype(dtype) if weighted else None
    tensors = _tensors(x)
    t_loss = F.multilabel_soft_margin_loss(tensors[0], torch.tensor(y), None if weight is None
                                           else torch.tensor(weight), reduction=reduction)
    w = 1.0 if weight is None else _w(weight)
    check_loss(losses.multilabel_soft_margin(x, y, weight, reduction=reduction), t_loss,
               tensors, dtype=dtype, reduction=reduction,
               item_sizes=np.sum(w * (_w(x) + 1.0), axis=1) / C, grad_sizes=[w / C],
               terms=3 * C)


@pytest.mark.parametrize("p, margin, weighted", [(1, 1.0, False), (2, 1.0, False),
                                                 (1, 0.7, True), (2, 2.0, True)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_multi_margin_matches_torch(dtype, reduction, p, margin, weighted):
    rng = _rng(dtype, 4)
    x = rng.standard_normal((N, C)).astype(dtype)
    y = rng.integers(0, C, N)
    weight = (0.2 + rng.random(C)).astype(dtype) if weighted else None
    tensors = _tensors(x)
    t_loss = F.multi_margin_loss(tensors[0], torch.tensor(y), p=p, margin=margin,
                                 weight=None if weight is None else torch.tensor(weight),
                                 reduction=reduction)
    w = np.ones(N) if weight is None else _w(weight)[y]
    h = margin + _w(x) + _w(x)[np.arange(N), y][:, None]
    check_loss(losses.multi_margin(x, y, p=p, margin=margin, weight=weight,
                                   reduction=reduction), t_loss, tensors, dtype=dtype,
               reduction=reduction, item_sizes=w * np.sum(h ** p, axis=1) / C,
               grad_sizes=[w[:, None] * p * h ** (p - 1)], terms=3 * C)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_multilabel_margin_matches_torch(dtype, reduction):
    rng = _rng(dtype, 5)
    x = rng.standard_normal((N, C)).astype(dtype)
    y = np.full((N, C), -1)
    for row in range(N):  # 0 to C targets per row, ended by -1; anything after it is unused
        count = row % (C + 1)
        y[row, :count] = rng.permutation(C)[:count]
        if count < C - 1:
            y[row, count + 1] = rng.integers(0, C)
    tensors = _tensors(x)
    t_loss = F.multilabel_margin_loss(tensors[0], torch.tensor(y), reduction=reduction)
    check_loss(losses.multilabel_margin(x, y, reduction=reduction), t_loss, tensors,
               dtype=dtype, reduction=reduction, item_sizes=C * (1 + 2 * np.max(_w(x), 1)),
               grad_sizes=[np.ones(1)], terms=3 * C * C)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_multilabel_margin_counts_a_repeated_id_as_torch(dtype):
    """torch sums over the listed ids, so an id listed twice counts twice."""
    x = _rng(dtype, 7).standard_normal((3, C)).astype(dtype)
    y = np.array([[2, 0, 0, -1], [1, 1, 1, 1], [3, 2, 3, -1]])
    tensors = _tensors(x)
    t_loss = F.multilabel_margin_loss(tensors[0], torch.tensor(y), reduction="none")
    check_loss(losses.multilabel_margin(x, y, reduction="none"), t_loss, tensors,
               dtype=dtype, reduction="none", item_sizes=C * (1 + 2 * np.max(_w(x), 1)),
               grad_sizes=[np.ones(1)], terms=3 * C * C)


@pytest.mark.parametrize("margin", [0.0, 0.3])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cosine_embedding_matches_torch(dtype, reduction, margin):
    x1, x2, y = _pairs(dtype, 6, N)
    tensors = _tensors(x1, x2)
    t_loss = F.cosine_embedding_loss(*tensors, torch.tensor(y), margin=margin,
                                     reduction=reduction)
    n1, n2 = (np.sqrt(np.sum(_w(a) ** 2, axis=1, keepdims=True)) for a in (x1, x2))
    check_loss(losses.cosine_embedding(x1, x2, y, margin=margin, reduction=reduction), t_loss,
               tensors, dtype=dtype, reduction=reduction, item_sizes=np.full(N, 2 + margin),
               grad_sizes=[2 / n1, 2 / n2], terms=3 * C)


@pytest.mark.parametrize("p, swap", [(2.0, False), (2.0, True), (1.0, True), (3.0, False)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_triplet_margin_matches_torch(dtype, reduction, p, swap):
    rng = _rng(dtype, 7)
    a, pos, neg = (rng.standard_normal((N, C)).astype(dtype) for _ in range(3))
    tensors = _tensors(a, pos, neg)
    t_loss = F.triplet_margin_loss(*tensors, margin=1.0, p=p, swap=swap, reduction=reduction)
    ours = losses.triplet_margin(a, pos, neg, p=p, swap=swap, reduction=reduction)
    sizes = np.sum(_w(a) + _w(pos) + _w(neg), axis=1) + 1.0
    check_loss(ours, t_loss, tensors, dtype=dtype, reduction=reduction, item_sizes=sizes,
               grad_sizes=[np.full(1, 2.0)] * 3, terms=3 * C)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: losses.margin_ranking(x, x, np.ones(3)), ValueError,
     r"margin_ranking: 'y' must have shape \(6, 4\) \(one label per item\); received "
     r"shape \(3,\)"),
    (lambda x: losses.multi_margin(x, np.zeros(6, int), p=3), ValueError,
     r"multi_margin: 'p' must be 1 or 2; received 3"),
    (lambda x: losses.multi_margin(x, np.full(6, 4)), ValueError,
     r"multi_margin: 'y' must be class ids in \[0, 4\) of shape \(6,\)"),
    (lambda x: losses.multilabel_margin(x, np.full((6, 4), 9)), ValueError,
     r"multilabel_margin: 'y' must hold class ids in \[0, 4\) ended by -1"),
    (lambda x: losses.cosine_embedding(x[0], x[1], [1]), ValueError,
     r"cosine_embedding: 'x1' and 'x2' must have shape \(N, D\)"),
    (lambda x: losses.triplet_margin(x, x, x[:3]), ValueError,
     r"triplet_margin: 'anchor', 'positive' and 'negative' must have one shape"),
    (lambda x: losses.soft_margin(x, np.array(["a"] * 24).reshape(6, 4)), TypeError,
     r"soft_margin: 'y' must hold numbers"),
])
def test_margin_losses_refuse_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call(np.ones((N, C)))


def test_margin_losses_in_compile_choose_their_accuracy():
    assert metrics.accuracy_for(losses.get("multi_margin_loss")) is metrics.accuracy
    assert metrics.accuracy_for(losses.multilabel_soft_margin) is metrics.binary_accuracy
    assert losses.takes_logits(losses.multilabel_soft_margin)
