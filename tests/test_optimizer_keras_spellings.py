"""Keras's optimizer spellings.

Keras semantics relied on (keras.optimizers): ``Adam``/``AdamW``/``Adamax``/``Nadam`` take
``learning_rate``, ``beta_1``, ``beta_2`` and ``epsilon``; ``RMSprop`` takes
``learning_rate``, ``rho`` (the decay of the squared-gradient average, torch's
``alpha``), ``momentum``, ``epsilon`` and ``centered``; ``SGD`` takes ``learning_rate``,
``momentum`` and ``nesterov``; ``Adagrad`` and ``Adadelta`` take ``epsilon``. handgrad
keeps its own (torch's) defaults for what the call leaves out.
"""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import optimizers
from handgrad.optimizers import (
    SGD,
    Adadelta,
    AdaGrad,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    NAdam,
    RMSProp,
    RMSprop,
)
from handgrad.testing import assert_close

# (class, Keras's spelling, handgrad's spelling of the same settings)
CASES = [
    (Adam, dict(learning_rate=2e-3, beta_1=0.8, beta_2=0.99, epsilon=1e-7, amsgrad=True),
     dict(lr=2e-3, betas=(0.8, 0.99), eps=1e-7, amsgrad=True)),
    (AdamW, dict(learning_rate=2e-3, beta_1=0.8, beta_2=0.99, epsilon=1e-7,
                 weight_decay=0.004), dict(lr=2e-3, betas=(0.8, 0.99), eps=1e-7,
                                           weight_decay=0.004)),
    (Adamax, dict(learning_rate=1e-3, beta_1=0.7, beta_2=0.9, epsilon=1e-7),
     dict(lr=1e-3, betas=(0.7, 0.9), eps=1e-7)),
    (NAdam, dict(learning_rate=1e-3, beta_1=0.7, beta_2=0.9, epsilon=1e-7),
     dict(lr=1e-3, betas=(0.7, 0.9), eps=1e-7)),
    (RMSprop, dict(learning_rate=1e-3, rho=0.9, momentum=0.5, epsilon=1e-7, centered=True),
     dict(lr=1e-3, alpha=0.9, momentum=0.5, eps=1e-7, centered=True)),
    (SGD, dict(learning_rate=0.1, momentum=0.9, nesterov=True),
     dict(lr=0.1, momentum=0.9, nesterov=True)),
    (Adagrad, dict(learning_rate=0.1, epsilon=1e-7), dict(lr=0.1, eps=1e-7)),
    (Adadelta, dict(learning_rate=0.5, rho=0.8, epsilon=1e-7), dict(lr=0.5, rho=0.8, eps=1e-7)),
]


def test_keras_class_names():
    assert RMSprop is RMSProp and Adagrad is AdaGrad


@pytest.mark.parametrize("cls, keras, torch_like", CASES,
                         ids=[cls.__name__ for cls, _, _ in CASES])
def test_keras_spellings_set_the_same_optimizer(cls, keras, torch_like):
    a, b = cls(**keras), cls(**torch_like)
    assert a.get_config() == b.get_config()
    rng = np.random.default_rng(0)
    pa, pb = {"w": rng.standard_normal(5)}, {}
    pb["w"] = pa["w"].copy()
    for _ in range(3):
        g = {"w": rng.standard_normal(5)}
        a.step(pa, g)
        b.step(pb, g)
    np.testing.assert_array_equal(pa["w"], pb["w"])
    by_name = optimizers.get(cls.__name__.lower(), **keras)
    assert by_name.get_config() == b.get_config()


def test_one_beta_given_the_other_keeps_handgrads_default():
    default = Adam()
    assert Adam(beta_1=0.5).betas == (0.5, default.betas[1])
    assert Adam(beta_2=0.9).betas == (default.betas[0], 0.9)
    assert Adam(beta_1=0.5).eps == default.eps  # not Keras's 1e-7 unless given


def test_keras_adam_and_rmsprop_step_as_torch_with_the_mapped_names():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(6)
    grads = [rng.standard_normal(6) for _ in range(4)]
    pairs = [(Adam(learning_rate=0.01, beta_1=0.8, beta_2=0.95, epsilon=1e-7),
              lambda p: torch.optim.Adam([p], lr=0.01, betas=(0.8, 0.95), eps=1e-7)),
             (RMSprop(learning_rate=0.01, rho=0.9, momentum=0.5, epsilon=1e-7),
              lambda p: torch.optim.RMSprop([p], lr=0.01, alpha=0.9, momentum=0.5, eps=1e-7))]
    for ours, make in pairs:
        params = {"w": w0.copy()}
        tp = torch.tensor(w0.copy(), requires_grad=True)
        theirs = make(tp)
        for g in grads:
            ours.step(params, {"w": g})
            tp.grad = torch.tensor(g)
            theirs.step()
        assert_close(params["w"], tp.detach().numpy(), terms=len(grads) * 8,
                     what=type(ours).__name__)


@pytest.mark.parametrize("call, message", [
    (lambda: Adam(beta1=0.9), r"Adam: unexpected argument 'beta1'; did you mean 'beta_1'"),
    (lambda: RMSprop(decay=0.9), r"RMSProp: unexpected argument 'decay'; .*accepted: .*rho"),
    (lambda: SGD(nesterov=True, momentum=0.9, learning_rte=0.1),
     r"did you mean 'learning_rate'.*accepted: clipnorm, clipvalue, dampening, "),
    (lambda: Adam(betas=(0.9, 0.99), beta_2=0.9),
     r"received both 'beta_2' \(Keras's name\) and 'betas' \(handgrad's\)"),
    (lambda: Adam(eps=1e-8, epsilon=1e-7), r"received both 'epsilon' .* and 'eps'"),
    (lambda: Adam(0.1, learning_rate=0.2), r"received both 'learning_rate' .* and 'lr'"),
])
def test_misspelled_or_doubled_arguments_name_the_accepted_spellings(call, message):
    with pytest.raises(TypeError, match=message):
        call()
