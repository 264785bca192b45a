"""The binary cross-entropies under torch's names (probabilities vs logits), their
``weight``/``pos_weight``, the refusals, Keras's ``binary_crossentropy`` and smooth L1."""

import functools

import numpy as np
import pytest

from handgrad import Sequential, losses
from handgrad import layers as L
from handgrad.testing import assert_close

from tolerances import loss_bounds, pair_loss_sizes

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]
DTYPE_IDS = ["float64", "float32"]
REDUCTIONS = ["mean", "sum", "none"]
SHAPE = (5, 3)


def _compare(ours, t_input, t_loss, reduction, dtype, sizes):
    """(loss, dinput) against torch's, for "none" through a random upstream gradient."""
    loss, grad = ours
    upstream = None
    if reduction == "none":
        upstream = np.random.default_rng(9).standard_normal(loss.shape).astype(dtype)
        t_loss.backward(torch.tensor(upstream))
        expected, grad = t_loss.detach().numpy(), grad * upstream
        assert loss.dtype == dtype
    else:
        t_loss.backward()
        expected = t_loss.item()
        assert isinstance(loss, float)
    assert grad.dtype == dtype
    (loss_terms, loss_scale), (grad_terms, grad_scale) = loss_bounds(*sizes, reduction, 1,
                                                                     upstream)
    assert_close(loss, expected, dtype=dtype, terms=loss_terms, scale=loss_scale, what="loss")
    assert_close(grad, t_input.grad.numpy(), dtype=dtype, terms=grad_terms, scale=grad_scale,
                 what="dinput")


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    probabilities = rng.random(SHAPE).astype(dtype)
    probabilities[0, :3] = [0.0, 1.0, 1e-30 if dtype == np.float64 else 1e-20]  # log clamps
    targets = rng.random(SHAPE).astype(dtype)
    targets[0, :2] = [0.0, 1.0]  # p = t at the ends: torch's gradient there is 0
    logits = (3 * rng.standard_normal(SHAPE)).astype(dtype)
    weight = (0.5 + rng.random(SHAPE[-1:])).astype(dtype)  # one per class, broadcast
    pos_weight = (0.5 + 2 * rng.random(SHAPE[-1:])).astype(dtype)
    return probabilities, targets, logits, weight, pos_weight


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_binary_cross_entropy_of_probabilities_matches_torch(dtype, reduction, weighted):
    p, t, _, weight, _ = _inputs(dtype)
    weight = weight if weighted else None
    ours = losses.binary_cross_entropy(p, t, weight, reduction=reduction)
    tp = torch.tensor(p, requires_grad=True)
    t_loss = F.binary_cross_entropy(tp, torch.tensor(t), None if weight is None else
                                    torch.tensor(weight), reduction=reduction)
    sizes = pair_loss_sizes("binary_cross_entropy", p, t, weight=weight)
    _compare(ours, tp, t_loss, reduction, dtype, sizes)


@pytest.mark.parametrize("weights", ["plain", "weight", "pos_weight", "both"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_binary_cross_entropy_with_logits_matches_torch(dtype, reduction, weights):
    _, t, z, weight, pos_weight = _inputs(dtype)
    weight = weight if weights in ("weight", "both") else None
    pos_weight = pos_weight if weights in ("pos_weight", "both") else None
    ours = losses.binary_cross_entropy_with_logits(z, t, weight, pos_weight,
                                                   reduction=reduction)
    tz = torch.tensor(z, requires_grad=True)
    t_loss = F.binary_cross_entropy_with_logits(
        tz, torch.tensor(t), None if weight is None else torch.tensor(weight),
        reduction=reduction, pos_weight=None if pos_weight is None else torch.tensor(pos_weight))
    sizes = pair_loss_sizes("binary_cross_entropy_with_logits", z, t, weight=weight,
                            pos_weight=pos_weight)
    _compare(ours, tz, t_loss, reduction, dtype, sizes)


def test_probabilities_give_torch_bce_loss_where_the_old_logit_loss_was_wrong():
    # the trap: a torch user passing probabilities to the logits loss got a wrong value
    p = np.array([0.9, 0.2, 0.6, 0.3])
    t = np.array([0.0, 1.0, 1.0, 0.0])
    expected = F.binary_cross_entropy(torch.tensor(p), torch.tensor(t)).item()
    loss, _ = losses.get("binary_cross_entropy")(p, t)
    assert_close(loss, expected, dtype=np.float64, terms=8, scale=4 * 3.0, what="loss")
    with_logits, _ = losses.binary_cross_entropy_with_logits(p, t)
    assert abs(with_logits - expected) > 0.1  # a different loss: the names now say which


@pytest.mark.parametrize("value", [1.5, -0.1, np.nan])
def test_binary_cross_entropy_refuses_values_outside_0_1(value):
    p = np.array([[0.5, value], [0.2, 0.3]])
    with pytest.raises(ValueError, match=r"binary_cross_entropy: 'probabilities' must lie in "
                                         r"\[0, 1\]; received .* at index \(0, 1\) \(for "
                                         r"logits.*use 'binary_cross_entropy_with_logits'\)"):
        losses.binary_cross_entropy(p, np.zeros((2, 2)))


@pytest.mark.parametrize("fn", [losses.binary_cross_entropy,
                                losses.binary_cross_entropy_with_logits])
def test_weights_are_checked(fn):
    p, t = np.full((4, 3), 0.5), np.zeros((4, 3))
    with pytest.raises(ValueError, match=rf"{fn.__name__}: 'weight' must broadcast to the "
                                         rf"input's shape \(4, 3\); received shape \(4,\)"):
        fn(p, t, np.ones(4))
    with pytest.raises(TypeError, match=rf"{fn.__name__}: 'weight' has dtype float32"):
        fn(p, t, np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"must broadcast to the input's shape"):
        fn(p, t, np.ones((2, 4, 3)))
    if fn is losses.binary_cross_entropy_with_logits:
        with pytest.raises(ValueError, match=r"'pos_weight' must broadcast to the input's "
                                             r"shape \(4, 3\); received shape \(2,\)"):
            fn(p, t, pos_weight=np.ones(2))


def test_keras_binary_crossentropy_takes_probabilities_unless_from_logits():
    rng = np.random.default_rng(3)
    p, t = rng.random((4, 2)), rng.random((4, 2))
    keras = losses.get("binary_crossentropy")
    ours, theirs = keras(p, t, from_logits=True), losses.binary_cross_entropy_with_logits(p, t)
    assert ours[0] == theirs[0]
    np.testing.assert_array_equal(ours[1], theirs[1])
    # probabilities well inside [1e-7, 1 - 1e-7]: Keras's clipping is inactive, and its
    # formula is torch's (the exact comparison with Keras's is in test_losses_keras.py)
    ours, theirs = keras(p, t), losses.binary_cross_entropy(p, t)
    assert (p > 1e-3).all() and (p < 1 - 1e-3).all()
    assert_close(ours[0], theirs[0], terms=p.size, what="loss")
    assert_close(ours[1], theirs[1], terms=4, what="gradient")
    with pytest.raises(TypeError, match=r"binary_crossentropy: 'from_logits' must be a bool"):
        keras(p, t, from_logits=1)
    assert losses.takes_logits(functools.partial(keras, from_logits=True))
    assert not losses.takes_logits(keras)
    assert not losses.takes_logits(losses.binary_cross_entropy)
    assert losses.takes_logits(losses.binary_cross_entropy_with_logits)


@pytest.mark.parametrize("loss", ["binary_cross_entropy_with_logits",
                                  functools.partial(losses.binary_crossentropy,
                                                    from_logits=True)])
def test_compile_refuses_a_sigmoid_ended_model_with_a_logits_loss(loss):
    net = Sequential([L.Dense(3), L.Sigmoid()], input_shape=(2,))
    with pytest.raises(ValueError, match=r"compile: loss .* takes logits, but the model ends "
                                         r"with Sigmoid .*, which outputs probabilities; .* or use "
                                         r"'binary_cross_entropy', which takes probabilities"):
        net.compile("sgd", loss)
    assert net.optimizer is None


@pytest.mark.parametrize("loss", ["binary_cross_entropy", "binary_crossentropy"])
def test_compile_accepts_a_sigmoid_ended_model_with_a_probability_loss(loss):
    rng = np.random.default_rng(0)
    net = Sequential([L.Dense(3), L.Sigmoid()], input_shape=(2,), seed=0, dtype="float64")
    net.compile("sgd", loss, metrics=())
    x, y = rng.standard_normal((8, 2)), rng.integers(0, 2, (8, 3)).astype(np.float64)
    p = net.predict(x)
    expected = F.binary_cross_entropy(torch.tensor(p), torch.tensor(y)).item()
    loss = net.train_step(x, y)["loss"]  # the loss before the step
    sizes = pair_loss_sizes("binary_cross_entropy", p, y)
    assert_close(loss, expected, dtype=np.float64, terms=p.size, scale=sizes[0].mean(),
                 what="loss")


# --- smooth L1 ---------------------------------------------------------------------------


@pytest.mark.parametrize("beta, error", [(-1.0, ValueError), (float("nan"), ValueError),
                                         ("1", TypeError)])
def test_smooth_l1_bad_beta(beta, error):
    with pytest.raises(error, match=r"smooth_l1: 'beta' must be a finite real number >= 0"):
        losses.smooth_l1(np.zeros(3), np.zeros(3), beta=beta)


def test_smooth_l1_is_huber_over_beta():
    rng = np.random.default_rng(4)
    pred, target = 2 * rng.standard_normal(20), 2 * rng.standard_normal(20)
    for beta in (0.5, 1.0, 3.0):
        loss, grad = losses.smooth_l1(pred, target, beta=beta, reduction="none")
        h_loss, h_grad = losses.huber(pred, target, delta=beta, reduction="none")
        sizes = pair_loss_sizes("huber", pred, target, beta)
        assert_close(loss * beta, h_loss, dtype=np.float64, terms=2, scale=sizes[0].max(),
                     what="loss")
        assert_close(grad * beta, h_grad, dtype=np.float64, terms=2, scale=sizes[1].max(),
                     what="grad")
    assert beta != 1.0 and not np.allclose(loss, h_loss)  # the factor beta tells them apart
