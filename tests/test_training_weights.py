"""``fit(sample_weight=, class_weight=)`` and ``evaluate(sample_weight=)`` against torch and
Keras's semantics.

Keras semantics relied on: a loss's default reduction "sum_over_batch_size" is
``sum(sample_weight * per_example_loss) / batch_size`` (Keras's documentation of
``Loss.reduction``: "the sum of the weighted losses divided by the number of elements",
not by the sum of the weights); a per-example loss over C columns (mse, binary
cross-entropy) is the mean over the last axis. ``class_weight`` gives each example the
weight of its class (its label, or the arg-max of a one-hot row; 1.0 for a class not in
the dict) and multiplies ``sample_weight``. ``validation_data`` may be ``(x, y, weights)``.
Compile's ``metrics`` are unweighted. The data-parallel case is in
tests/distributed_cases.py (the ``mlp`` and ``bn_dropout`` cases weigh their examples).
"""

import numpy as np
import pytest

from handgrad import Sequential, losses
from handgrad import layers as L
from handgrad.testing import assert_close
from handgrad.training.weights import weighted_loss

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _torch_losses(rng):
    """(name, pred, target, torch per-example loss of (pred, target))."""
    z = rng.standard_normal((6, 4))
    ids = rng.integers(0, 4, 6)
    p = rng.uniform(0.05, 0.95, (6, 4))
    t = rng.integers(0, 2, (6, 4)).astype(np.float64)
    return [
        ("cross_entropy", z, ids, lambda a: F.cross_entropy(a, torch.tensor(ids),
                                                            reduction="none")),
        ("mse", z, p, lambda a: F.mse_loss(a, torch.tensor(p), reduction="none")),
        ("huber", z, p, lambda a: F.huber_loss(a, torch.tensor(p), reduction="none")),
        ("binary_crossentropy", p, t,
         lambda a: F.binary_cross_entropy(a.clamp(1e-7, 1 - 1e-7), torch.tensor(t),
                                          reduction="none")),
        ("categorical_crossentropy", p / p.sum(-1, keepdims=True), np.eye(4)[ids],
         lambda a: F.nll_loss(torch.log(a / a.sum(-1, keepdim=True)), torch.tensor(ids),
                              reduction="none")),
    ]


@pytest.mark.parametrize("index", range(5))
def test_the_weighted_loss_and_gradient_match_torch(index):
    rng = np.random.default_rng(0)
    name, pred, target, theirs = _torch_losses(rng)[index]
    w = rng.uniform(0.0, 3.0, 6)
    loss, grad = weighted_loss(losses.get(name), pred, target, w, "output")
    tp = torch.tensor(pred, requires_grad=True)
    values = theirs(tp)
    shape = (-1,) + (1,) * (values.ndim - 1)
    expected = (values * torch.tensor(w).reshape(shape)).mean()  # sum w l / elements
    expected.backward()
    assert_close(loss, expected.item(), terms=pred.size, what=f"{name} loss")
    assert_close(grad, tp.grad.numpy(), terms=4, what=f"{name} gradient")


def _net(loss="cross_entropy", last=None):
    layers = [L.Dense(5), L.Tanh(), L.Dense(3)] + ([last] if last else [])
    return Sequential(layers, input_shape=(4,), seed=1, dtype="float64").compile("sgd", loss)


def _data(n=24, seed=2):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)), rng.integers(0, 3, n), rng.uniform(0.0, 2.0, n)


def test_evaluate_divides_by_the_number_of_examples_not_the_sum_of_weights():
    x, y, w = _data()
    net = _net()
    plain = net.evaluate(x, y, batch_size=7, return_dict=True)
    per_example, _ = losses.softmax_cross_entropy(net.predict(x), y, reduction="none")
    weighted = net.evaluate(x, y, batch_size=7, sample_weight=w, return_dict=True)
    assert_close(weighted["loss"], (w * per_example).sum() / len(x), terms=len(x), what="loss")
    assert abs(weighted["loss"] - (w * per_example).sum() / w.sum()) > 1e-3
    twice = net.evaluate(x, y, sample_weight=np.full(len(x), 2.0), return_dict=True)
    assert_close(twice["loss"], 2 * plain["loss"], terms=len(x), what="w = 2")
    assert weighted["accuracy"] == plain["accuracy"]  # metrics are unweighted (Keras)


def test_one_weighted_sgd_step_matches_torch():
    x, y, w = _data()
    net = _net()
    start = {k: v.copy() for k, v in net.named_parameters().items()}
    net.fit(x, y, epochs=1, batch_size=len(x), shuffle=False, verbose=0, sample_weight=w)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in start.items()}
    names = list(params)  # Dense 0 (W, b), Dense 2 (W, b), in layer order
    h = torch.tanh(torch.tensor(x) @ params[names[0]] + params[names[1]])
    logits = h @ params[names[2]] + params[names[3]]
    loss = (F.cross_entropy(logits, torch.tensor(y), reduction="none")
            * torch.tensor(w)).mean()
    loss.backward()
    lr = net.optimizer.lr
    for key, p in params.items():
        expected = (p - lr * p.grad).detach().numpy()
        assert_close(net.named_parameters()[key], expected, terms=len(x), what=key)


@pytest.mark.parametrize("one_hot", [False, True])
def test_class_weight_is_the_sample_weight_built_from_it(one_hot):
    x, ids, w = _data()
    y = np.eye(3)[ids] if one_hot else ids
    loss = "categorical_crossentropy" if one_hot else "cross_entropy"
    last = L.Softmax() if one_hot else None
    table = {0: 0.5, 1: 2.0}  # class 2 is left out: weight 1.0 (Keras)
    a, b = _net(loss, last), _net(loss, last)
    ha = a.fit(x, y, epochs=2, batch_size=5, rng=3, verbose=0, class_weight=table,
               sample_weight=w)
    hb = b.fit(x, y, epochs=2, batch_size=5, rng=3, verbose=0,
               sample_weight=w * np.array([0.5, 2.0, 1.0])[ids])
    assert ha.history["loss"] == hb.history["loss"]
    for key, value in a.named_parameters().items():
        np.testing.assert_array_equal(value, b.named_parameters()[key])
    c = _net(loss, last)
    hc = c.fit(x, y, epochs=2, batch_size=5, rng=3, verbose=0, sample_weight=w)
    assert hc.history["loss"] != ha.history["loss"]


def test_validation_weights_from_a_triple_and_from_validation_split():
    x, y, w = _data(30)
    net = _net()
    history = net.fit(x[:20], y[:20], epochs=1, verbose=0, sample_weight=w[:20], shuffle=False,
                      validation_data=(x[20:], y[20:], w[20:]))
    expected = net.evaluate(x[20:], y[20:], sample_weight=w[20:], return_dict=True)
    assert history.history["val_loss"] == [expected["loss"]]
    twin = _net()
    split = twin.fit(x, y, epochs=1, verbose=0, sample_weight=w, validation_split=1 / 3,
                     shuffle=False)
    for key, value in twin.named_parameters().items():
        np.testing.assert_array_equal(value, net.named_parameters()[key])
    assert split.history["val_loss"] == history.history["val_loss"]


@pytest.mark.parametrize("with_sample_weight", [False, True])
def test_validation_split_never_weighs_by_class_weight(with_sample_weight):
    # Keras splits (x, y, sample_weight) and applies class_weight to the training part only
    x, y, w = _data(30)
    w = w if with_sample_weight else None
    table = {0: 5.0, 1: 0.5}
    net = _net()
    history = net.fit(x, y, epochs=1, verbose=0, shuffle=False, validation_split=1 / 3,
                      sample_weight=w, class_weight=table)
    held_out = None if w is None else w[20:]
    expected = net.evaluate(x[20:], y[20:], sample_weight=held_out, return_dict=True)
    assert history.history["val_loss"] == [expected["loss"]]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"sample_weight": np.ones(5)}, ValueError, r"'sample_weight' must have shape \(24,\)"),
    ({"sample_weight": np.r_[np.ones(23), -1.0]}, ValueError,
     r"'sample_weight' must be finite and >= 0; received -1.0 at index 23"),
    ({"sample_weight": np.r_[np.ones(23), np.nan]}, ValueError,
     r"'sample_weight' must be finite and >= 0; received nan"),
    ({"sample_weight": "heavy"}, TypeError, r"'sample_weight' must be an array of shape"),
    ({"class_weight": [1.0, 2.0]}, TypeError, r"'class_weight' must be a dict"),
    ({"class_weight": {0: -1.0}}, ValueError,
     r"'class_weight' values must be finite numbers >= 0; received -1.0 for class 0"),
    ({"class_weight": {"a": 1.0}}, TypeError, r"'class_weight' keys must be class ids"),
    ({"validation_data": (np.zeros((2, 4)), np.zeros(2, int), np.ones(3))}, ValueError,
     r"'validation_data\[2\]' must have shape \(2,\)"),
])
def test_bad_weights_are_refused_by_name(kwargs, error, message):
    x, y, _ = _data()
    with pytest.raises(error, match=rf"fit: {message}"):
        _net().fit(x, y, verbose=0, **kwargs)


def _own_step():
    """A compiled model with its own train_step (it weighs nothing)."""
    class Own(Sequential):
        def train_step(self, x, y):
            return {"loss": 0.0}

    return Own([L.Dense(3)], input_shape=(4,)).compile("sgd", "cross_entropy")


def test_weights_need_a_built_in_step_and_a_loss_with_reduction():
    x, y, w = _data()
    own = _own_step()
    with pytest.raises(ValueError, match=r"fit: 'sample_weight' and 'class_weight' weigh the "
                                         r"built-in train_step"):
        own.fit(x, y, verbose=0, sample_weight=w)

    def plain(pred, target):
        return losses.mse(pred, target)

    net = _net(plain)
    with pytest.raises(TypeError, match=r"loss of output 'output' \('plain'\) must take "
                                        r"reduction='none'"):
        net.evaluate(x, np.zeros((24, 3)), sample_weight=w)
    with pytest.raises(ValueError, match=r"evaluate: 'sample_weight' must have shape"):
        net.evaluate(x, np.zeros((24, 3)), sample_weight=w[:3])


def _batches(x, y, w, size, weighted=True):
    """A re-iterable of Keras's generator batches, (x, y, sample_weight) or (x, y)."""
    class Batches:
        def __iter__(self):
            for i in range(0, len(x), size):
                part = slice(i, i + size)
                yield (x[part], y[part], w[part]) if weighted else (x[part], y[part])
    return Batches()


def test_generator_batches_with_sample_weight_train_and_evaluate_as_arrays_do():
    # Keras: a generator may yield (x, y, sample_weight); each batch's losses are weighed
    # by its third entry exactly as fit(x, y, sample_weight=w) weighs the same batch
    x, y, w = _data()
    arrays, stream = _net(), _net()
    arrays.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0, sample_weight=w,
               validation_data=(x[:10], y[:10], w[:10]))
    plain = _net()
    plain.fit(_batches(x, y, w, 8, weighted=False), epochs=2, verbose=0)
    history = stream.fit(_batches(x, y, w, 8), epochs=2, verbose=0,
                         validation_data=_batches(x[:10], y[:10], w[:10], 4))
    for key, value in arrays.named_parameters().items():
        assert_close(stream.named_parameters()[key], value, terms=len(x), what=key)
        assert np.abs(plain.named_parameters()[key] - value).max() > 1e-6  # weights matter
    expected = arrays.evaluate(x[:10], y[:10], sample_weight=w[:10], return_dict=True)
    assert_close(history.history["val_loss"][-1], expected["loss"], terms=10, what="val_loss")
    got = stream.evaluate(_batches(x, y, w, 5), return_dict=True)
    want = stream.evaluate(x, y, sample_weight=w, return_dict=True)
    assert_close(got["loss"], want["loss"], terms=len(x), what="evaluate loss")
    assert got["accuracy"] == want["accuracy"]
    assert stream.predict(_batches(x, y, w, 5)).shape == (len(x), 3)  # predict ignores w


def test_class_weight_weighs_generator_batches():
    x, y, w = _data()
    table = {0: 0.5, 1: 2.0}  # class 2 keeps 1.0
    arrays, stream = _net(), _net()
    arrays.fit(x, y, epochs=1, batch_size=6, shuffle=False, verbose=0, sample_weight=w,
               class_weight=table)
    stream.fit(_batches(x, y, w, 6), epochs=1, verbose=0, class_weight=table)
    for key, value in arrays.named_parameters().items():
        assert_close(stream.named_parameters()[key], value, terms=len(x), what=key)


def test_bad_generator_weights_are_refused_by_name():
    x, y, w = _data()
    with pytest.raises(ValueError, match=r"fit: 'sample_weight' is for array data; received "
                                         r"a generator 'x'"):
        _net().fit(_batches(x, y, w, 8), verbose=0, sample_weight=w)
    with pytest.raises(ValueError, match=r"evaluate: 'sample_weight' is for array data"):
        _net().evaluate(_batches(x, y, w, 8), sample_weight=w)
    short = _batches(x, y, np.ones(3), 8)  # every batch's weights: 3 of the first batch
    with pytest.raises(ValueError, match=r"fit: batch 0 of 'x': 'sample_weight' must have "
                                         r"shape \(8,\)"):
        _net().fit(short, verbose=0)
    with pytest.raises(ValueError, match=r"evaluate: batch 0 of 'x': 'sample_weight' must "
                                         r"be finite and >= 0"):
        _net().evaluate(_batches(x, y, -w, 8))
    own = _own_step()
    with pytest.raises(ValueError, match=r"fit: batch 0 of 'x': a sample_weight weighs the "
                                         r"built-in train_step's loss"):
        own.fit(_batches(x, y, w, 8), verbose=0)


def test_evaluate_takes_class_weight_as_fit_does():
    # Keras's evaluate has only sample_weight; handgrad also takes fit's class_weight,
    # turned into the same per-example weights (the weight of each example's class, 1.0
    # for a class not in the dict), multiplied by sample_weight
    x, y, w = _data()
    net = _net()
    table = {0: 0.5, 1: 3.0}
    per_example, _ = losses.softmax_cross_entropy(net.predict(x), y, reduction="none")
    by_class = np.array([0.5, 3.0, 1.0])[y]
    got = net.evaluate(x, y, batch_size=7, class_weight=table, return_dict=True)
    assert_close(got["loss"], (by_class * per_example).sum() / len(x), terms=len(x),
                 what="class-weighted loss")
    both = net.evaluate(x, y, batch_size=7, class_weight=table, sample_weight=w,
                        return_dict=True)
    assert_close(both["loss"], (w * by_class * per_example).sum() / len(x), terms=len(x),
                 what="class- and sample-weighted loss")
    stream = net.evaluate(_batches(x, y, w, 5, weighted=False), class_weight=table,
                          return_dict=True)
    assert_close(stream["loss"], got["loss"], terms=len(x), what="generator")
    with pytest.raises(TypeError, match="'class_weight' must be a dict"):
        net.evaluate(x, y, class_weight=[0.5, 3.0])
