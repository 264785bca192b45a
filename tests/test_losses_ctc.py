"""ctc_loss against torch's F.ctc_loss (batch first here): the loss, the gradient through
a log-softmax, torch's own gradient on log_probs, the target forms, blank, zero_infinity."""

import numpy as np
import pytest

from handgrad import losses
from handgrad.testing import assert_close
from loss_cases import DTYPE_IDS, DTYPES, REDUCTIONS, check_loss, log_sum_exp

torch = pytest.importorskip("torch")
F = torch.nn.functional

N, T, C, S = 4, 8, 5, 3


def _case(dtype, blank, seed=0):
    rng = np.random.default_rng(seed)
    logits = (2 * rng.standard_normal((N, T, C))).astype(dtype)
    labels = [c for c in range(C) if c != blank]
    targets = rng.choice(labels, (N, S))
    targets[0, :2] = targets[0, 2]  # a repeated label needs a blank between
    input_lengths = np.array([T, T - 1, 5, T])
    target_lengths = np.array([S, 2, 1, 0])
    return logits, targets, input_lengths, target_lengths


def _sizes(logits, reduction, target_lengths):
    """Per-sample size of the loss (T steps, each a log-sum-exp of terms up to max|log p|
    in size) and of a gradient entry (at most 1 plus the softmax's, per sample)."""
    lp = np.asarray(logits, np.float64) - log_sum_exp(logits)
    items = T * (np.max(np.abs(lp), axis=(1, 2)) + 1.0)
    grad = np.full(N, 2.0)[:, None, None]
    if reduction == "mean":
        scale = 1.0 / np.maximum(target_lengths, 1)
        items, grad = items * scale, grad * scale[:, None, None]
    return lp, items, grad


@pytest.mark.parametrize("concatenated", [False, True], ids=["padded", "concatenated"])
@pytest.mark.parametrize("blank", [0, 3])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ctc_loss_through_log_softmax_matches_torch(dtype, reduction, blank, concatenated):
    logits, targets, input_lengths, target_lengths = _case(dtype, blank)
    lp, items, grad_sizes = _sizes(logits, reduction, target_lengths)
    lp = lp.astype(dtype)
    given = (np.concatenate([t[:n] for t, n in zip(targets, target_lengths)])
             if concatenated else targets)
    loss, dlp = losses.ctc_loss(lp, given, input_lengths, target_lengths, blank=blank,
                                reduction=reduction)
    dlogits = dlp - np.exp(lp) * dlp.sum(axis=-1, keepdims=True)  # log-softmax's backward
    tz = torch.tensor(logits, requires_grad=True)
    t_loss = F.ctc_loss(tz.log_softmax(-1).transpose(0, 1), torch.tensor(given),
                        torch.tensor(input_lengths), torch.tensor(target_lengths),
                        blank=blank, reduction=reduction)
    check_loss((loss, dlogits), t_loss, [tz], dtype=dtype, reduction=reduction,
               item_sizes=items, grad_sizes=[grad_sizes], terms=3 * T * (2 * S + 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ctc_gradient_is_torchs_on_log_probs_less_its_softmax_term(dtype):
    """torch's kernel returns exp(log_probs) - q on the live steps; ours is the derivative
    -q, so adding exp(log_probs) there gives torch's log_probs.grad."""
    logits, targets, input_lengths, target_lengths = _case(dtype, 0, seed=1)
    lp, items, _ = _sizes(logits, "sum", target_lengths)
    lp = lp.astype(dtype)
    loss, dlp = losses.ctc_loss(lp, targets, input_lengths, target_lengths, reduction="sum")
    live = (np.arange(T)[None, :] < input_lengths[:, None])[..., None]
    t_lp = torch.tensor(lp.transpose(1, 0, 2), requires_grad=True)
    t_loss = F.ctc_loss(t_lp, torch.tensor(targets), torch.tensor(input_lengths),
                        torch.tensor(target_lengths), reduction="sum")
    t_loss.backward()
    torch_grad = t_lp.grad.numpy().transpose(1, 0, 2)
    terms = 3 * T * (2 * S + 1)
    assert_close(loss, t_loss.item(), dtype=dtype, terms=terms * N, scale=items.sum(),
                 what="loss")
    assert_close(dlp + np.exp(lp) * live, torch_grad, dtype=dtype, terms=terms, scale=2.0,
                 what="dlog_probs")
    assert np.all(dlp <= 0)  # -q: raising a step's log-probability lowers the loss


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_ctc_zero_infinity_zeroes_impossible_alignments(reduction):
    logits, targets, _, target_lengths = _case(np.float64, 0, seed=2)
    lp = logits - log_sum_exp(logits)
    targets[1, :2] = 1  # "1 1" needs 3 steps: 2 are too few
    input_lengths = np.array([T, 2, 5, T])
    target_lengths = np.array([S, 2, 1, 0])
    loss, grad = losses.ctc_loss(lp, targets, input_lengths, target_lengths,
                                 reduction=reduction, zero_infinity=True)
    expected = F.ctc_loss(torch.tensor(lp.transpose(1, 0, 2)), torch.tensor(targets),
                          torch.tensor(input_lengths), torch.tensor(target_lengths),
                          reduction=reduction, zero_infinity=True).numpy()
    np.testing.assert_allclose(loss, expected, rtol=1e-12)
    assert np.all(grad[1] == 0) and np.any(grad[0] != 0)
    plain, _ = losses.ctc_loss(lp, targets, input_lengths, target_lengths, reduction="none")
    assert np.isinf(plain[1]) and np.all(np.isfinite(plain[[0, 2, 3]]))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"blank": 5}, ValueError, r"ctc_loss: 'blank' must be a class id in \[0, 5\)"),
    ({"input_lengths": [9, 8, 8, 8]}, ValueError,
     r"ctc_loss: 'input_lengths' must be 4 integers in \[0, 8\]"),
    ({"targets": np.zeros((4, 3), int)}, ValueError,
     r"ctc_loss: 'targets' must be class ids in \[0, 5\) other than blank 0"),
    ({"targets": np.ones(5, int)}, ValueError,
     r"ctc_loss: 1-D 'targets' must hold sum\(target_lengths\) = 6 ids; received 5"),
    ({"targets": np.ones((4, 3))}, TypeError, r"ctc_loss: 'targets' must be integer"),
])
def test_ctc_loss_refuses_bad_arguments(kwargs, error, message):
    args = {"targets": np.ones((4, 3), int), "input_lengths": [8] * 4,
            "target_lengths": [3, 1, 1, 1]}
    blank = kwargs.pop("blank", 0)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        losses.ctc_loss(np.zeros((N, T, C)), args["targets"], args["input_lengths"],
                        args["target_lengths"], blank=blank)
