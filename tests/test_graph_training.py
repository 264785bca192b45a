"""Training graph models with several inputs and outputs: per-output losses, loss weights
and metrics, data as lists or dicts (custom training steps: test_graph_training_steps.py)."""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.data import batches
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training import EarlyStopping

N_CLASSES = 3


def two_headed(seed=0, dtype=None):
    """Inputs ``signal`` (8,) and ``meta`` (3,); outputs ``logits`` (3 classes) and
    ``score`` (1 value), both heads reading one trunk (a fan-out)."""
    signal, meta = hg.Input((8,), name="signal"), hg.Input((3,), name="meta")
    h = L.Concatenate()([L.Dense(16, name="sig")(signal), L.Dense(8, name="met")(meta)])
    h = L.ReLU()(L.Dense(32, name="trunk")(L.Tanh()(h)))
    return hg.Model([signal, meta], [L.Dense(N_CLASSES, name="logits")(h),
                                     L.Dense(1, name="score")(h)], seed=seed, dtype=dtype)


def task(n, seed=0, dtype=np.float32):
    """A learnable task: the class is the arg-max of ``signal[:, :3] + meta``, the score a
    linear function of both inputs."""
    rng = np.random.default_rng(seed)
    signal = rng.standard_normal((n, 8)).astype(dtype)
    meta = rng.standard_normal((n, 3)).astype(dtype)
    label = np.argmax(signal[:, :3] + meta, axis=1)
    score = (signal[:, 3:5].sum(axis=1, keepdims=True) - meta[:, 2:]).astype(dtype)
    return {"signal": signal, "meta": meta}, {"logits": label, "score": score}


def compiled(model=None, loss=None, loss_weights=None, metrics=None, lr=0.01):
    model = two_headed() if model is None else model
    return model.compile(optimizers.Adam(lr=lr),
                         loss=loss or {"logits": "cross_entropy", "score": "mse"},
                         loss_weights=loss_weights,
                         metrics=metrics or {"logits": ["accuracy"], "score": ["mae"]})


def params(model, prefix=""):
    return {k: v.copy() for k, v in model.named_parameters().items() if k.startswith(prefix)}


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def as_list(x, names):
    return [x[name] for name in names]


# ------------------------------------------------------------------ 1. fit learns


def test_two_output_fit_with_per_output_losses_learns_and_logs_each_output():
    x, y = task(600)
    model = compiled(loss_weights={"logits": 1.0, "score": 0.5})
    history = model.fit(x, y, epochs=25, batch_size=32, rng=0, verbose=0,
                        validation_split=0.2)
    per_output = ["loss", "logits_loss", "score_loss", "logits_accuracy", "score_mae"]
    assert set(history.history) == {*per_output, *(f"val_{k}" for k in per_output),
                                    "lr", "seconds"}
    h = history.history
    assert h["loss"][-1] < 0.2 * h["loss"][0]
    assert h["score_loss"][-1] < 0.1 * h["score_loss"][0]
    assert h["logits_accuracy"][0] < 0.8 < 0.9 < h["logits_accuracy"][-1]
    assert h["val_logits_accuracy"][-1] > 0.85 and h["val_score_mae"][-1] < 0.3
    # the logged loss is the weighted total of the per-output losses (epoch means alike)
    batches_per_epoch = 480 // 32
    for total, first, second in zip(h["loss"], h["logits_loss"], h["score_loss"]):
        assert_close(total, first + 0.5 * second, dtype=np.float64,
                     terms=4 * batches_per_epoch, scale=total)


def test_list_and_dict_forms_train_identically():
    x, y = task(200)
    in_names, out_names = ["signal", "meta"], ["logits", "score"]
    by_dict = compiled(loss={"logits": "cross_entropy", "score": "mse"},
                       loss_weights={"score": 2.0}, metrics={"logits": ["accuracy"]})
    by_list = two_headed().compile(optimizers.Adam(lr=0.01), loss=["cross_entropy", "mse"],
                                   loss_weights=[1.0, 2.0], metrics=[["accuracy"], None])
    a = by_dict.fit(x, y, epochs=3, batch_size=16, rng=4, verbose=0)
    b = by_list.fit(as_list(x, in_names), as_list(y, out_names), epochs=3, batch_size=16,
                    rng=4, verbose=0)
    assert a.history.keys() == b.history.keys()
    for key in ("loss", "logits_loss", "score_loss", "logits_accuracy"):
        assert a.history[key] == b.history[key]
    assert same(params(by_dict), params(by_list))


def test_one_loss_and_one_metric_list_apply_to_every_output():
    x, y = task(64)
    y = {"logits": np.eye(N_CLASSES, dtype=np.float32)[y["logits"]], "score": y["score"]}
    model = two_headed()
    model.compile("adam", loss="mse", loss_weights=0.5, metrics=["mae"])
    logs = model.evaluate(x, y, return_dict=True)
    assert list(logs) == ["loss", "logits_loss", "score_loss", "logits_mae", "score_mae"]
    assert_close(logs["loss"], 0.5 * (logs["logits_loss"] + logs["score_loss"]),
                 dtype=np.float64, terms=4, scale=logs["loss"])


# ------------------------------------------------------- 2. evaluate and predict


def test_evaluate_and_predict_take_lists_and_dicts():
    x, y = task(300, seed=1)
    model = compiled(loss_weights={"score": 0.25})
    model.fit(x, y, epochs=2, batch_size=32, rng=0, verbose=0)
    xs, ys = as_list(x, model.input_names), as_list(y, model.output_names)

    by_list, by_dict = model.predict(xs, batch_size=64), model.predict(x, batch_size=64)
    whole = model.forward(xs, training=False)
    assert isinstance(by_list, list) and len(by_list) == 2
    for a, b, ref in zip(by_list, by_dict, whole):
        np.testing.assert_array_equal(a, b)
        assert_close(a, ref, dtype=np.float32, terms=64, scale=np.abs(ref).max() + 1)
    assert [p.shape for p in by_list] == [(300, N_CLASSES), (300, 1)]

    logs = model.evaluate(xs, ys, batch_size=1000, return_dict=True)
    assert logs == model.evaluate(x, y, batch_size=1000, return_dict=True)
    logits, score = by_list
    ce = float(losses.softmax_cross_entropy(logits, y["logits"])[0])
    mse = float(losses.mse(score, y["score"])[0])
    assert_close(logs["logits_loss"], ce, dtype=np.float32, terms=300, scale=ce)
    assert_close(logs["score_loss"], mse, dtype=np.float32, terms=300, scale=mse)
    assert_close(logs["loss"], ce + 0.25 * mse, dtype=np.float32, terms=300, scale=ce + mse)
    assert logs["logits_accuracy"] == np.mean(np.argmax(logits, axis=1) == y["logits"])

    empty = model.predict({"signal": x["signal"][:0], "meta": x["meta"][:0]})
    assert [(e.shape, e.dtype) for e in empty] == [((0, N_CLASSES), np.float32),
                                                   ((0, 1), np.float32)]


def test_validation_data_as_lists_and_dicts_gives_the_val_logs_of_evaluate():
    x, y = task(160, seed=2)
    x_val, y_val = task(40, seed=3)
    model = compiled()
    history = model.fit(x, y, epochs=2, batch_size=32, rng=0, verbose=0,
                        validation_data=(as_list(x_val, model.input_names), y_val))
    logs = model.evaluate(x_val, y_val, return_dict=True)
    for key, value in logs.items():
        assert history[f"val_{key}"][-1] == value


def test_validation_split_holds_out_the_last_examples_of_every_array():
    x, y = task(100, seed=4)
    model = compiled()
    history = model.fit(x, y, epochs=1, batch_size=16, rng=0, verbose=0,
                        validation_split=0.2)
    tail = model.evaluate({k: v[80:] for k, v in x.items()}, {k: v[80:] for k, v in y.items()},
                          return_dict=True)
    assert {f"val_{k}": v for k, v in tail.items()} == \
        {k: v[-1] for k, v in history.history.items() if k.startswith("val_")}


def test_callbacks_monitor_per_output_keys_and_unknown_ones_fail_first():
    x, y = task(120)
    model = compiled()
    stop = EarlyStopping("val_logits_accuracy", patience=0)
    history = model.fit(x, y, epochs=30, batch_size=8, rng=0, verbose=0,
                        validation_split=0.25, callbacks=[stop])
    assert stop.best == max(history["val_logits_accuracy"])
    assert len(history.epoch) < 30 and stop.stopped_epoch == history.epoch[-1]
    fresh = compiled()
    with pytest.raises(ValueError, match=r"monitor 'val_aux_accuracy' will not be in the epoch "
                                         r"logs.*'val_logits_accuracy'"):
        fresh.fit(x, y, validation_split=0.25, callbacks=[EarlyStopping("val_aux_accuracy")],
                  verbose=0)
    assert fresh.optimizer.iterations == 0


def test_a_graph_model_nested_in_sequential_trains_with_fit():
    x, _ = task(200)
    label = np.argmax(x["signal"][:, :3], axis=1)
    signal = hg.Input((8,), name="signal")
    block = hg.Model(signal, L.Tanh()(L.Dense(16, name="inner")(signal)), name="block")
    model = Sequential([block, L.Dense(N_CLASSES)], seed=0)
    model.compile(optimizers.Adam(lr=0.02), "cross_entropy")
    inner = params(model, "block.")
    history = model.fit(x["signal"], label, epochs=10, batch_size=32, rng=0, verbose=0)
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert inner.keys() == {"block.inner.W", "block.inner.b"}
    assert not np.array_equal(params(model, "block.")["block.inner.W"], inner["block.inner.W"])


# ------------------------------------------------------ 3. outputs left untrained


@pytest.mark.parametrize("how", ["weight 0", "no loss in a dict", "None in a list"])
def test_an_output_without_a_loss_or_with_weight_0_leaves_its_head_untrained(how):
    x, y = task(200)
    model = two_headed()
    if how == "weight 0":
        model.compile("adam", {"logits": "cross_entropy", "score": "mse"},
                      loss_weights={"logits": 1.0, "score": 0.0})
    elif how == "no loss in a dict":
        model.compile("adam", {"logits": "cross_entropy"})
        y = {"logits": y["logits"]}  # no targets needed for 'score'
    else:
        model.compile("adam", ["cross_entropy", None])
        y = [y["logits"], None]
    score_head, trunk = params(model, "score."), params(model, "trunk.")
    history = model.fit(x, y, epochs=3, batch_size=32, rng=0, verbose=0)
    assert same(params(model, "score."), score_head)  # no gradient reached it
    assert not np.array_equal(params(model, "trunk.")["trunk.W"], trunk["trunk.W"])
    assert history["loss"][-1] < history["loss"][0]
    # weight 0: logged, not trained; the default metrics give accuracy to the
    # cross-entropy output only (it would be a guess for mse)
    assert ("score_loss" in history.history) == (how == "weight 0")
    assert "logits_accuracy" in history.history and "score_accuracy" not in history.history


def test_backward_takes_none_for_an_output_without_a_gradient():
    x, _ = task(5)
    model = two_headed(dtype="float64")
    xs = [x["signal"].astype(np.float64), x["meta"].astype(np.float64)]
    logits, score = model.forward(xs, training=True)
    dlogits = np.random.default_rng(0).standard_normal(logits.shape)
    model.zero_grad()
    model.backward([dlogits, None])
    with_none = {k: v.copy() for k, v in model.named_gradients().items()}
    model.zero_grad()
    model.forward(xs, training=True)
    model.backward([dlogits, np.zeros_like(score)])
    assert same(with_none, model.named_gradients())
    assert not with_none["score.W"].any() and with_none["trunk.W"].any()


def test_two_outputs_of_one_shared_layer_get_keys_of_their_own():
    rng = np.random.default_rng(0)
    left, right = hg.Input((3,), name="left"), hg.Input((3,), name="right")
    shared = L.Dense(2, name="shared")
    model = hg.Model([left, right], [shared(left), shared(right)], seed=0)
    first, second = model.output_names
    assert first != second
    model.compile(optimizers.SGD(lr=0.1), {first: "mse", second: "mse"}, metrics=(),
                  loss_weights=[1.0, 0.0])
    x = [rng.standard_normal((16, 3)).astype(np.float32) for _ in range(2)]
    target = x[0] @ np.float32([[1, 0], [0, 1], [1, 1]])
    history = model.fit(x, {first: target, second: -target}, epochs=40, batch_size=16,
                        verbose=0)
    assert set(history.history) == {"loss", f"{first}_loss", f"{second}_loss", "lr", "seconds"}
    assert history["loss"] == history[f"{first}_loss"]  # weight 0 on the second call
    assert history[f"{first}_loss"][-1] < 0.05 * history[f"{first}_loss"][0]


# ---------------------------------------------------------------- 4. one output


def test_a_one_output_graph_model_logs_like_sequential():
    x, y = task(120)
    signal = hg.Input((8,), name="signal")
    hidden = L.ReLU()(L.Dense(16)(signal))
    model = hg.Model(signal, L.Dense(N_CLASSES, name="logits")(hidden), seed=0)
    twin = Sequential([L.Dense(16), L.ReLU(), L.Dense(N_CLASSES)], seed=0, input_shape=(8,))
    for net in (model, twin):
        net.compile(optimizers.SGD(lr=0.1), "cross_entropy")
    a = model.fit(x["signal"], y["logits"], epochs=2, batch_size=16, rng=0, verbose=0,
                  validation_split=0.25)
    b = twin.fit(x["signal"], y["logits"], epochs=2, batch_size=16, rng=0, verbose=0,
                 validation_split=0.25)
    assert set(a.history) == set(b.history) == {"loss", "accuracy", "val_loss",
                                                "val_accuracy", "lr", "seconds"}
    assert a["loss"] == b["loss"] and a["val_accuracy"] == b["val_accuracy"]
    assert model.evaluate({"signal": x["signal"]}, {"logits": y["logits"]}) == \
        model.evaluate(x["signal"], y["logits"])
    predicted = model.predict(x["signal"])
    assert predicted.shape == (120, N_CLASSES)
    np.testing.assert_array_equal(model.predict([x["signal"]]), predicted)  # a list of one
    assert model.evaluate([x["signal"]], [y["logits"]]) == model.evaluate(x["signal"],
                                                                          y["logits"])


def test_a_model_with_a_list_of_one_output_predicts_a_list():
    x, y = task(40)
    signal = hg.Input((8,), name="signal")
    model = hg.Model([signal], [L.Dense(N_CLASSES, name="logits")(signal)], seed=0)
    model.compile("sgd", ["cross_entropy"])
    history = model.fit([x["signal"]], [y["logits"]], epochs=1, verbose=0)
    assert {"loss", "accuracy"} <= set(history.history)
    out = model.predict([x["signal"]])
    assert isinstance(out, list) and out[0].shape == (40, N_CLASSES)


# ----------------------------------------------------------------- 5. bad input


@pytest.mark.parametrize("kwargs, error, match", [
    ({"loss": {"logit": "mse"}}, ValueError,
     r"compile: 'loss' keys must be output names \['logits', 'score'\]; received unknown "
     r"keys \['logit'\]"),
    ({"loss": ["mse"]}, ValueError,
     r"compile: 'loss' as a list must hold 2 entries, one per output.*received 1"),
    ({"loss": {}}, ValueError, "compile: 'loss' gives no output a loss"),
    ({"loss": "mse", "loss_weights": {"scores": 1.0}}, ValueError,
     r"compile: 'loss_weights' keys must be output names.*\['scores'\]"),
    ({"loss": "mse", "loss_weights": [1.0, -1.0]}, ValueError,
     r"compile: 'loss_weights\['score'\]' must be a finite real number >= 0; received -1"),
    ({"loss": "mse", "loss_weights": "1"}, TypeError, "compile: 'loss_weights'.*'1'"),
    ({"loss": "mse", "metrics": {"aux": ["accuracy"]}}, ValueError,
     r"compile: 'metrics' keys must be output names.*\['aux'\]"),
    ({"loss": "mse", "metrics": {"score": ["f1"]}}, ValueError,
     r"compile: 'metrics' entries must be one of .*'f1'"),
    ({"loss": "mse", "metrics": "mae"}, TypeError, r"compile: 'metrics' must be a list"),
])
def test_compile_names_the_bad_argument(kwargs, error, match):
    model = two_headed()
    with pytest.raises(error, match=match):
        model.compile("adam", **kwargs)
    assert model.optimizer is None


def test_compile_refuses_a_logits_loss_on_a_probability_output():
    signal = hg.Input((4,), name="signal")
    h = L.Dense(3)(signal)
    model = hg.Model(signal, [L.Softmax(name="probs")(h), L.Dense(1, name="score")(h)])
    with pytest.raises(ValueError, match=r"loss 'cross_entropy' takes logits, but output "
                                         r"'probs' comes from Softmax"):
        model.compile("adam", {"probs": "cross_entropy", "score": "mse"})
    model.compile("adam", {"probs": "mse", "score": "mse"})  # regressing probabilities is fine


@pytest.mark.parametrize("x, y, match", [
    (lambda x: [x["signal"]], None, r"fit: 'x' must hold 2 arrays, one per input "
                                    r"\['signal', 'meta'\]; received a list of 1"),
    (lambda x: x["signal"], None, r"fit: 'x' must be a list or a dict of 2 arrays"),
    (lambda x: {"signal": x["signal"], "metadata": x["meta"]}, None,
     r"fit: 'x' keys must be the input names \['signal', 'meta'\]; received unknown keys "
     r"\['metadata'\]"),
    (lambda x: {"signal": x["signal"]}, None,
     r"fit: 'x' has no array for input 'meta', which the model needs; received a dict with "
     r"keys \['signal'\]"),
    (lambda x: {**x, "meta": x["meta"][:9]}, None,
     r"fit: all the arrays must have the same number of examples; received 10 in input "
     r"'signal' and 9 in input 'meta'"),
    (lambda x: {**x, "meta": x["meta"][:, :2]}, None,
     r"fit: input 'meta' of 'x' must have shape \(N, 3\).*received an array of shape "
     r"\(10, 2\)"),
    (None, lambda y: {**y, "score": y["score"][:4]}, r"received 10 in input 'signal' and 4 in "
                                                     r"output 'score'"),
    (None, lambda y: {"score": y["score"]}, r"fit: 'y' has no array for output 'logits', "
                                            r"which has a loss or metrics"),
    (None, lambda y: {**y, "scores": y["score"]}, r"fit: 'y' keys must be the output names"),
    (None, lambda y: [y["logits"]], r"fit: 'y' must hold 2 arrays, one per output"),
    (None, lambda y: y["logits"], r"fit: 'y' must be a list or a dict of 2 arrays"),
    (None, lambda y: None, r"fit: 'y' must be an array of targets"),
])
def test_fit_names_the_bad_input_or_output_before_any_update(x, y, match):
    xs, ys = task(10)
    model = compiled()
    before = params(model)
    with pytest.raises((ValueError, TypeError), match=match):
        model.fit(x(xs) if x else xs, y(ys) if y else ys, verbose=0)
    assert model.optimizer.iterations == 0 and same(params(model), before)


def test_evaluate_predict_and_validation_data_name_bad_structures():
    x, y = task(10)
    model = compiled()
    with pytest.raises(ValueError, match=r"evaluate: 'y' keys must be the output names"):
        model.evaluate(x, {**y, "aux": y["score"]})
    with pytest.raises(ValueError, match=r"predict: 'x' must hold 2 arrays"):
        model.predict([x["signal"]])
    with pytest.raises(ValueError, match=r"fit: 'validation_data': all the arrays must have "
                                         r"the same number of examples"):
        model.fit(x, y, validation_data=(x, {**y, "score": y["score"][:3]}), verbose=0)
    assert model.optimizer.iterations == 0


# ------------------------------------------------------------------ 6. batching


def test_batches_slice_every_array_of_a_list_or_dict_with_the_same_indices():
    n = 23
    a = np.arange(n, dtype=np.float32)[:, None] * np.ones(3, np.float32)
    x = [a, -2 * a[:, :1]]
    y = {"ids": np.arange(n), "none": None, "twice": 2 * np.arange(n)}
    seen = []
    for xb, yb in batches(x, y, 5, rng=0):
        assert isinstance(xb, list) and set(yb) == {"ids", "none", "twice"}
        assert yb["none"] is None
        np.testing.assert_array_equal(xb[0][:, 0], yb["ids"])
        np.testing.assert_array_equal(xb[1][:, 0], -2 * yb["ids"])
        np.testing.assert_array_equal(yb["twice"], 2 * yb["ids"])
        seen.append(yb["ids"])
    assert not np.array_equal(np.concatenate(seen), np.arange(n))  # shuffled ...
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(n))  # ... once
    with pytest.raises(ValueError, match=r"batches: all the arrays must have the same number "
                                         r"of examples; received 23 in 'x\[0\]' and 22 in "
                                         r"'y\['twice'\]'"):
        batches(x, {**y, "twice": y["twice"][:22]})
