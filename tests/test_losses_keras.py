"""Keras's cross-entropies of probabilities (``from_logits=False``, Keras's default) against a
NumPy transcription of Keras's formula and against torch, their gradients through the
model's own Softmax/Sigmoid, training a softmax-ended model, the loss objects and refusals.

Keras semantics relied on (keras.src.backend.numpy.nn, the same in its torch and JAX
backends; eps = keras.config.epsilon() = 1e-7)::

    categorical_crossentropy(target, output):
        output = output / sum(output, axis=-1, keepdims=True)
        output = clip(output, eps, 1 - eps)
        return -sum(target * log(output), axis=-1)
    sparse_categorical_crossentropy: categorical_crossentropy(one_hot(target), output)
    binary_crossentropy(target, output):
        output = clip(output, eps, 1 - eps)
        return -(target * log(output) + (1 - target) * log(1 - output))   (then mean(-1))
    label_smoothing: categorical y (1 - ls) + ls / C, binary y (1 - ls) + ls / 2.
"""

import numpy as np
import pytest

from handgrad import Sequential, losses
from handgrad import layers as L
from handgrad.io import load, save
from handgrad.testing import assert_close, tolerance

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]
EPS = 1e-7


def keras_categorical(target, output):
    eps = output.dtype.type(EPS)
    output = output / output.sum(axis=-1, keepdims=True)
    output = np.clip(output, eps, 1 - eps)
    return -(target * np.log(output)).sum(axis=-1)


def keras_binary(target, output):
    eps = output.dtype.type(EPS)
    output = np.clip(output, eps, 1 - eps)
    return -(target * np.log(output) + (1 - target) * np.log(1 - output))


def probabilities(dtype, shape=(6, 4), clipped=True, seed=0):
    """Rows of probabilities, unnormalized (Keras divides by the sum); with ``clipped``,
    some entries 0 and 1 - 1e-9 so that the clip acts."""
    rng = np.random.default_rng(seed)
    p = rng.random(shape) + 0.05
    p /= p.sum(axis=-1, keepdims=True) * rng.uniform(0.8, 1.2, (*shape[:-1], 1))
    if clipped:
        p[0, 0], p[1] = 0.0, 0.0
        p[1, 2] = 1.0
    return p.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "float32"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_categorical_and_sparse_match_keras_formula_and_torch(dtype, smoothing):
    p = probabilities(dtype)
    ids = np.array([0, 2, 1, 3, 0, 1])
    onehot = np.eye(4, dtype=dtype)[ids]
    target = onehot * (1 - smoothing) + smoothing / 4
    expected = keras_categorical(target, p)
    tp = torch.tensor(p, requires_grad=True)
    r = tp / tp.sum(-1, keepdim=True)
    theirs = -(torch.tensor(target) * torch.log(r.clamp(EPS, 1 - EPS))).sum(-1).mean()
    theirs.backward()
    if smoothing == 0.0:  # torch's own nll_loss of log(clipped p) is the same loss
        nll = F.nll_loss(torch.log(r.detach().clamp(EPS, 1 - EPS)), torch.tensor(ids))
        assert_close(nll.item(), theirs.item(), dtype=dtype, terms=6, what="nll_loss")
    for fn, labels in [(losses.categorical_crossentropy, onehot),
                       (losses.sparse_categorical_crossentropy, ids),
                       (losses.sparse_categorical_crossentropy, ids[:, None])]:
        loss, grad = fn(p, labels, label_smoothing=smoothing)
        assert grad.dtype == dtype
        assert_close(loss, expected.mean(), dtype=dtype, terms=4 * 6, what="vs Keras")
        assert_close(loss, theirs.item(), dtype=dtype, terms=4 * 6, what="vs torch")
        # dp = (g - sum g r) / S sums C terms of size up to max|q / c| / S
        assert_close(grad, tp.grad.numpy(), dtype=dtype, terms=4, what="dp vs torch")
        values, _ = fn(p, labels, label_smoothing=smoothing, reduction="none")
        assert_close(values, expected, dtype=dtype, terms=4, what="per example")
    assert grad[1, 2] == 0.0 or smoothing > 0  # 1.0 / S clipped: no gradient through it


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "float32"])
def test_binary_matches_keras_formula_and_torch_on_clipped_probabilities(dtype):
    rng = np.random.default_rng(1)
    p = rng.random((5, 3)).astype(dtype)
    p[0, 0], p[1, 1], p[2, 2] = 0.0, 1.0, 1e-9
    t = rng.integers(0, 2, (5, 3)).astype(dtype)
    t[3] = 0.3  # soft targets
    loss, grad = losses.binary_crossentropy(p, t)
    # Keras's per-example loss is mean(-1); the batch mean of those is the element mean
    assert_close(loss, keras_binary(t, p).mean(-1).mean(), dtype=dtype, terms=15, what="Keras")
    tp = torch.tensor(p, requires_grad=True)
    theirs = F.binary_cross_entropy(tp.clamp(EPS, 1 - EPS), torch.tensor(t))
    theirs.backward()
    assert_close(loss, theirs.item(), dtype=dtype, terms=15, what="vs torch")
    assert_close(grad, tp.grad.numpy(), dtype=dtype, terms=2, what="dp vs torch")
    assert grad[0, 0] == 0.0 and grad[1, 1] == 0.0  # clipped: no gradient
    loss_s, _ = losses.binary_crossentropy(p, t, label_smoothing=0.2)
    assert_close(loss_s, keras_binary(t * 0.8 + 0.1, p).mean(), dtype=dtype, terms=15,
                 what="label smoothing")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "float32"])
def test_through_softmax_and_sigmoid_layers_the_gradient_is_the_fused_logits_one(dtype):
    rng = np.random.default_rng(2)
    z = rng.standard_normal((7, 5)).astype(dtype)  # clipping inactive: p >> 1e-7
    ids = rng.integers(0, 5, 7)
    softmax = L.Softmax()
    p = softmax.forward(z, training=True)
    loss, dp = losses.sparse_categorical_crossentropy(p, ids)
    fused, dz_fused = losses.sparse_categorical_crossentropy(z, ids, from_logits=True)
    assert_close(loss, fused, dtype=dtype, terms=5 * 7, what="loss")
    # softmax backward p (dp - sum p dp) sums 5 terms of size p |dp| <= 1 + p
    assert_close(softmax.backward(dp), dz_fused, dtype=dtype, terms=5, scale=2.0, what="dz")
    sigmoid = L.Sigmoid()
    s = sigmoid.forward(z, training=True)
    t = rng.integers(0, 2, z.shape).astype(dtype)
    loss, ds = losses.binary_crossentropy(s, t)
    fused, dz_fused = losses.binary_crossentropy(z, t, from_logits=True)
    assert_close(loss, fused, dtype=dtype, terms=z.size, what="binary loss")
    # s (1 - s) * (s - t) / (s (1 - s)): a few roundings of a value of size <= 1 / N
    assert_close(sigmoid.backward(ds), dz_fused, dtype=dtype, terms=4, what="binary dz")


def _pair(make_last, loss_prob, loss_logits):
    prob = Sequential([L.Dense(6), L.Tanh(), L.Dense(3), make_last()], input_shape=(4,),
                      seed=3, dtype="float64")
    logit = Sequential([L.Dense(6), L.Tanh(), L.Dense(3)], input_shape=(4,), seed=3,
                       dtype="float64")
    prob.compile("sgd", loss_prob, metrics=["accuracy"])
    logit.compile("sgd", loss_logits, metrics=["accuracy"])
    return prob, logit


@pytest.mark.parametrize("loss, logits_loss, make_last, sparse", [
    ("categorical_crossentropy", losses.CategoricalCrossentropy(from_logits=True),
     L.Softmax, False),
    ("sparse_categorical_crossentropy", "cross_entropy", L.Softmax, True),
    ("binary_crossentropy", losses.BinaryCrossentropy(from_logits=True), L.Sigmoid, False),
])
def test_a_probability_ended_model_trains_as_the_logits_model(loss, logits_loss, make_last,
                                                              sparse):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 4))
    ids = rng.integers(0, 3, 32)
    y = ids if sparse else np.eye(3)[ids]
    prob, logit = _pair(make_last, loss, logits_loss)
    epochs, batch = 5, 8
    for net in (prob, logit):
        net.fit(x, y, epochs=epochs, batch_size=batch, rng=0, verbose=0)
    assert prob.predict(x).min() > 1e-3  # the clip was inactive
    # The two paths differ by rounding only: each step's dz by a few eps (C = 3 terms of
    # size <= 2), its dW = x^T dz / N by that times max|x|; SGD (lr 0.01) adds the steps'
    # differences. Weights then differ by about steps * lr * max|x| * tolerance.
    steps = epochs * 32 // batch
    trained = prob.named_parameters()
    for key, value in logit.named_parameters().items():
        assert_close(trained[key], value, dtype=np.float64,
                     scale=steps * 0.01 * np.abs(x).max() * 2.0, terms=3 * 6, what=key)
    start = Sequential([L.Dense(6), L.Tanh(), L.Dense(3)], input_shape=(4,), seed=3,
                       dtype="float64").named_parameters()
    moved = max(np.abs(value - start[key]).max() for key, value in trained.items())
    assert moved > 1e3 * tolerance(np.float64, 18, steps * 0.01 * np.abs(x).max() * 2.0)


def test_compile_accepts_keras_names_on_a_softmax_and_refuses_from_logits_there():
    for loss in ("categorical_crossentropy", "sparse_categorical_crossentropy",
                 losses.SparseCategoricalCrossentropy()):
        Sequential([L.Dense(3), L.Softmax()], input_shape=(2,)).compile("sgd", loss)
    net = Sequential([L.Dense(3), L.Softmax()], input_shape=(2,))
    with pytest.raises(ValueError, match=r"compile: loss CategoricalCrossentropy\(from_logits="
                                         r"True.*takes logits, but the model ends with Softmax"):
        net.compile("sgd", losses.CategoricalCrossentropy(from_logits=True))
    for loss in ("cross_entropy", "softmax_cross_entropy"):  # handgrad's names: logits
        with pytest.raises(ValueError, match=r"takes logits"):
            net.compile("sgd", loss)


@pytest.mark.parametrize("fn", [losses.categorical_crossentropy,
                                losses.sparse_categorical_crossentropy,
                                losses.binary_crossentropy])
def test_logits_given_as_probabilities_are_refused_with_the_fix(fn):
    z = np.array([[1.5, -0.5, 0.2], [0.1, 0.3, 0.2]])
    labels = np.array([0, 1]) if fn is losses.sparse_categorical_crossentropy else \
        np.eye(3)[[0, 1]]
    with pytest.raises(ValueError, match=rf"{fn.__name__}: 'probabilities' must lie in "
                                         rf"\[0, 1\]; received 1.5 at index \(0, 0\) "
                                         rf"\(for logits.*pass from_logits=True"):
        fn(z, labels)
    with pytest.raises(TypeError, match=rf"{fn.__name__}: 'from_logits' must be a bool"):
        fn(z, labels, from_logits="yes")


def test_an_all_zero_row_and_bad_loss_object_options_are_refused():
    with pytest.raises(ValueError, match=r"positive sum over the class axis.*index \(1,\)"):
        losses.categorical_crossentropy(np.array([[0.5, 0.5], [0.0, 0.0]]), np.eye(2))
    with pytest.raises(ValueError, match=r"CategoricalCrossentropy: 'reduction' must be one "
                                         r"of .*received 'avg'"):
        losses.CategoricalCrossentropy(reduction="avg")
    with pytest.raises(ValueError, match=r"BinaryCrossentropy: 'label_smoothing'"):
        losses.BinaryCrossentropy(label_smoothing=1.5)
    with pytest.raises(TypeError, match=r"SparseCategoricalCrossentropy: 'from_logits' must "
                                        r"be a bool"):
        losses.SparseCategoricalCrossentropy(from_logits=1)


def test_loss_objects_reduce_as_keras_and_save_with_the_model(tmp_path):
    p, ids = probabilities(np.float64, clipped=False), np.array([0, 2, 1, 3, 0, 1])
    obj = losses.SparseCategoricalCrossentropy()  # Keras's default "sum_over_batch_size"
    assert obj(p, ids)[0] == losses.sparse_categorical_crossentropy(p, ids)[0]
    summed = losses.SparseCategoricalCrossentropy(reduction="sum")(p, ids)[0]
    assert_close(summed, 6 * obj(p, ids)[0], terms=6, what="sum")
    net = Sequential([L.Dense(4), L.Softmax()], input_shape=(3,), seed=0, dtype="float64")
    net.compile("sgd", losses.CategoricalCrossentropy(label_smoothing=0.1))
    save(net, tmp_path / "m.safetensors")
    loaded = load(tmp_path / "m.safetensors")
    assert isinstance(loaded.loss_fn, losses.CategoricalCrossentropy)
    assert loaded.loss_fn.get_config() == {"from_logits": False, "label_smoothing": 0.1,
                                           "reduction": "mean"}
    x = np.random.default_rng(0).standard_normal((5, 3))
    y = np.eye(4)[[0, 1, 2, 3, 0]]
    assert loaded.evaluate(x, y, return_dict=True) == net.evaluate(x, y, return_dict=True)


@pytest.mark.parametrize("loss, keras_loss, metric, keras_metric", [
    ("binary_crossentropy", keras_binary, "binary_accuracy", lambda t, p: (p > 0.5) == (t > 0.5)),
    ("mse", lambda t, p: (p - t) ** 2, "mae", lambda t, p: abs(p - t)),
])
def test_targets_without_the_trailing_one_axis_are_read_as_keras_reads_them(
        loss, keras_loss, metric, keras_metric):
    # Keras brings y_true (N,) and y_pred (N, 1) to one rank (squeeze_or_expand_to_same_rank)
    # before its losses and metrics: per-example terms, never an (N, N) broadcast.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((24, 3))
    t = (rng.random(24) > 0.5).astype(np.float64)

    def net():
        model = Sequential([L.Dense(1), L.Sigmoid()], input_shape=(3,), seed=2, dtype="float64")
        model.compile("sgd", loss, metrics=[metric])
        return model

    flat, column = net(), net()
    p = flat.predict(x)
    value, measured = flat.evaluate(x, t)
    assert_close(value, keras_loss(t[:, None], p).mean(), dtype=np.float64, terms=24)
    assert_close(measured, keras_metric(t[:, None], p).mean(), dtype=np.float64, terms=24)
    kwargs = dict(epochs=2, batch_size=8, rng=0, verbose=0, class_weight={0: 2.0, 1: 1.0})
    logs = [model.fit(x, y, **kwargs).history for model, y in ((flat, t), (column, t[:, None]))]
    for key in ("loss", metric):
        assert logs[0][key] == logs[1][key], key
    for key, value in column.named_parameters().items():
        assert np.array_equal(flat.named_parameters()[key], value), key


@pytest.mark.parametrize("activation, loss, match", [
    ("softmax", "cross_entropy", r"loss 'cross_entropy' takes logits, but the model ends "
                                 r"with Dense 'dense_0' with activation='softmax'"),
    ("sigmoid", losses.BinaryCrossentropy(from_logits=True), r"takes logits, but the model "
                                                            r"ends with Dense 'dense_0' with "
                                                            r"activation='sigmoid'"),
    ("softmax", "nll_loss", r"takes log-probabilities, but the model ends with Dense "
                            r"'dense_0' with activation='softmax'"),
])
def test_a_fused_softmax_or_sigmoid_is_refused_before_a_logits_loss(activation, loss, match):
    # Dense(3, activation="softmax") computes what Dense(3) + Softmax() does: a logits loss
    # after it would apply a second softmax (or sigmoid), as after the separate layer.
    net = Sequential([L.Dense(3, activation=activation)], input_shape=(2,))
    with pytest.raises(ValueError, match=match + r".*drop that activation"):
        net.compile("sgd", loss)
    Sequential([L.Dense(3, activation=activation)], input_shape=(2,)).compile(
        "sgd", "binary_crossentropy" if activation == "sigmoid" else "categorical_crossentropy")


@pytest.mark.parametrize("last", [lambda: [L.Dense(2, activation="sigmoid")],
                                  lambda: [L.Dense(2), L.Sigmoid()]])
def test_binary_accuracy_thresholds_a_sigmoid_output_at_one_half_whatever_the_loss(last):
    # Keras's binary_accuracy is mean((y_pred > 0.5) == (y_true > 0.5)) on the output as it
    # is; a sigmoid-ended model's output is a probability even under mse.
    rng = np.random.default_rng(6)
    x, t = rng.standard_normal((40, 3)), (rng.random((40, 2)) > 0.5).astype(np.float64)
    net = Sequential(last(), input_shape=(3,), seed=1, dtype="float64")
    net.compile("sgd", "mse", metrics=["binary_accuracy"])
    p = net.predict(x)
    assert net.evaluate(x, t)[1] == np.mean((p > 0.5) == (t > 0.5)) != np.mean((p > 0) == t)
