"""Keras's model API on handgrad models (Keras itself is not a dependency; the Keras
semantics relied on are written beside each test):

- ``get_weights()`` lists every layer's weights layer by layer, trainable then
  non-trainable (BatchNormalization: gamma, beta, moving_mean, moving_variance);
  ``set_weights`` takes that list back.
- ``model.save(path)`` / ``keras.models.load_model(path)`` restore the architecture, the
  weights and the compiled optimizer's state; ``save_weights``/``load_weights`` the weights.
- ``model(x)`` on arrays runs the model in inference mode (training=False outside fit).
- ``History.params`` is ``{"verbose", "epochs", "steps"}``.
- ``fit`` takes a generator of ``(x, y)`` batches with ``steps_per_epoch``.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.training import Callback

N, F, BATCH = 32, 5, 8


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, F)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int64)


def net(seed=0, compiled=True):
    model = hg.Sequential([L.Dense(8, name="hidden"), L.BatchNorm(name="bn"), L.ReLU(),
                           L.Dropout(0.5, name="drop"), L.Dense(2, name="out")],
                          input_shape=(F,), seed=seed)
    return model.compile("adam", "cross_entropy") if compiled else model


def test_get_weights_order_is_layer_by_layer_parameters_then_buffers():
    model = net()
    assert model.weight_names() == ["hidden.W", "hidden.b", "bn.gamma", "bn.beta",
                                    "bn.running_mean", "bn.running_var", "out.W", "out.b"]
    weights = model.get_weights()
    np.testing.assert_array_equal(weights[0], model.get_layer("hidden").parameters["W"])
    weights[0][...] = 7.0  # copies: the model is untouched
    assert not np.any(model.get_layer("hidden").parameters["W"] == 7.0)


def test_set_weights_round_trip_gives_the_same_predictions():
    x, _ = data()
    source, target = net(seed=1), net(seed=2)
    assert not np.allclose(source.predict(x), target.predict(x))
    target.set_weights(source.get_weights())
    np.testing.assert_array_equal(source.predict(x), target.predict(x))


@pytest.mark.parametrize("change, error, words", [
    (lambda w: w[:-1], ValueError, "has 8 weight arrays"),
    (lambda w: [w[0][:, :3], *w[1:]], ValueError, "'hidden.W') must have shape (5, 8)"),
    (lambda w: [w[0].astype(np.float64), *w[1:]], ValueError, "must have dtype float32"),
    (lambda w: [w[0].tolist(), *w[1:]], TypeError, "weights[0] ('hidden.W') must be an array"),
    (lambda w: iter(w), TypeError, "must be a list of arrays"),
])
def test_set_weights_refuses_bad_lists_and_copies_nothing(change, error, words):
    model = net()
    before = model.get_weights()
    bad = [w + 1 for w in before]
    with pytest.raises(error) as info:
        model.set_weights(change(bad))
    assert words in str(info.value)
    for kept, now in zip(before, model.get_weights()):
        np.testing.assert_array_equal(kept, now)


def test_save_and_load_model_restore_weights_and_optimizer(tmp_path):
    x, y = data()
    model = net()
    model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0, rng=0)
    model.save(tmp_path / "m.safetensors")
    loaded = hg.load_model(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    assert type(loaded.optimizer) is type(model.optimizer)
    state = model.optimizer.state_dict()
    assert state and set(loaded.optimizer.state_dict()) == set(state)
    for key, value in state.items():
        np.testing.assert_array_equal(loaded.optimizer.state_dict()[key], value)
    # both continue training identically
    model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0, rng=1)
    loaded.fit(x, y, epochs=1, batch_size=BATCH, verbose=0, rng=1)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


def test_save_weights_load_weights_by_name(tmp_path):
    x, _ = data()
    source, target = net(seed=1), net(seed=2, compiled=False)
    source.save_weights(tmp_path / "w.safetensors")
    target.load_weights(tmp_path / "w.safetensors")
    np.testing.assert_array_equal(source.predict(x), target.predict(x))
    other = hg.Sequential([L.Dense(8, name="hidden"), L.Dense(3, name="out")], input_shape=(F,))
    with pytest.raises(ValueError, match=r"missing \[\].*unexpected \['bn\.beta'"):
        other.load_weights(tmp_path / "w.safetensors")


def test_get_layer_by_name_or_index_on_both_models():
    model = net()
    assert model.get_layer(index=0) is model.layers[0]
    assert model.get_layer(index=-1) is model.get_layer("out")
    inputs = hg.Input((F,))
    graph = hg.Model(inputs, L.Dense(2, name="head")(L.Dense(4, name="body")(inputs)))
    assert graph.get_layer(index=1) is graph.get_layer(name="head")
    with pytest.raises(ValueError, match="no layer named 'nope'; the layers are"):
        model.get_layer("nope")
    with pytest.raises(ValueError, match="exactly one of 'name' and 'index'"):
        graph.get_layer("head", index=0)
    with pytest.raises(ValueError, match=r"'index' must be in \[-5, 5\)"):
        model.get_layer(index=5)


def test_calling_a_model_on_arrays_is_inference_without_caches():
    x, _ = data()
    model = net().train()
    out = model(x)  # Keras: training=False outside fit -> dropout off, running statistics
    np.testing.assert_array_equal(out, model.forward(x, training=False))
    np.testing.assert_array_equal(model(x), out)  # deterministic: dropout is off
    assert all(not layer._caches for _, layer in model.walk())
    inputs = hg.Input((F,))
    outer = hg.Model(inputs, model(inputs))  # a symbolic call still builds a graph
    np.testing.assert_array_equal(outer(x), out)


def test_verbose_on_predict_and_evaluate(capsys):
    x, y = data()
    model = net()
    model.predict(x, batch_size=BATCH)
    model.evaluate(x, y, batch_size=BATCH)
    assert capsys.readouterr().out == ""
    model.predict(x, batch_size=BATCH, verbose=1)
    model.evaluate(x, y, batch_size=BATCH, verbose=1)
    out = capsys.readouterr().out
    assert "predict [" in out and f"{N // BATCH}/{N // BATCH}" in out
    assert "evaluate [" in out and "loss" in out
    with pytest.raises(ValueError, match="'verbose' must be 0"):
        model.predict(x, verbose="loud")


class Batches(Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(batch)


def test_history_params_and_steps_per_epoch_with_arrays():
    x, y = data()
    history = net().fit(x, y, epochs=2, batch_size=BATCH, verbose=0)
    assert history.params == {"verbose": 0, "epochs": 2, "steps": N // BATCH}
    counter = Batches()
    history = net().fit(x, y, epochs=2, batch_size=BATCH, verbose=0, steps_per_epoch=2,
                        callbacks=[counter])
    assert history.params["steps"] == 2
    assert counter.seen == [0, 1, 0, 1]
    with pytest.raises(ValueError, match=r"'steps_per_epoch' \(5\) must be at most the 4"):
        net().fit(x, y, batch_size=BATCH, steps_per_epoch=5, verbose=0)


# --------------------------------------------------------------- generator input
def loop_batches(x, y, size=BATCH, extra=()):
    """Keras's usual generator: endless, the batches in order."""
    while True:
        for start in range(0, len(x), size):
            yield (x[start:start + size], y[start:start + size], *extra)


class Batched:
    """A re-iterable of one epoch of batches (Keras's Sequence habit)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return ((self.x[i:i + BATCH], self.y[i:i + BATCH]) for i in range(0, N, BATCH))


def test_generator_trains_as_arrays_with_the_same_batches():
    x, y = data()
    arrays, streamed = net(seed=3), net(seed=3)
    want = arrays.fit(x, y, epochs=3, batch_size=BATCH, shuffle=False, verbose=0)
    got = streamed.fit(loop_batches(x, y), epochs=3, steps_per_epoch=N // BATCH, verbose=0)
    assert got.params == want.params
    np.testing.assert_array_equal(got.history["loss"], want.history["loss"])
    for a, b in zip(arrays.get_weights(), streamed.get_weights()):
        np.testing.assert_array_equal(a, b)
    again = net(seed=3)
    again.fit(Batched(x, y), epochs=3, verbose=0)  # re-iterable: one pass per epoch
    for a, b in zip(arrays.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_generator_validation_evaluate_and_predict_match_arrays():
    x, y = data()
    model = net()
    history = model.fit(loop_batches(x, y), steps_per_epoch=2, epochs=1, verbose=0,
                        validation_data=loop_batches(x, y), validation_steps=N // BATCH)
    # the same batches in the same order: the same sums, exactly
    assert history.history["val_loss"][0] == model.evaluate(x, y, batch_size=BATCH)[0]
    np.testing.assert_array_equal(model.evaluate(Batched(x, y)),
                                  model.evaluate(x, y, batch_size=BATCH))
    assert model.evaluate(loop_batches(x, y), steps=1) == model.evaluate(x[:BATCH], y[:BATCH])
    np.testing.assert_array_equal(model.predict(loop_batches(x, y), steps=N // BATCH),
                                  model.predict(x))
    np.testing.assert_array_equal(model.predict(iter([x[:5], x[5:]])), model.predict(x))


def test_generator_input_errors_name_the_fix():
    x, y = data()
    model = net()
    with pytest.raises(ValueError, match="pass steps_per_epoch="):
        model.fit(loop_batches(x, y), verbose=0)
    with pytest.raises(TypeError, match=r"batch 0 of 'x' must be a tuple \(x, y\) or "
                                        r"\(x, y, sample_weight\)"):
        model.fit(loop_batches(x, y, extra=(np.ones(BATCH), None)), steps_per_epoch=1,
                  verbose=0)
    with pytest.raises(ValueError, match="ran out of batches after 4 of steps_per_epoch=5"):
        model.fit(iter(list(Batched(x, y))), steps_per_epoch=5, verbose=0)
    with pytest.raises(TypeError, match="'y' must be None when 'x' is a generator"):
        model.fit(loop_batches(x, y), y, steps_per_epoch=1, verbose=0)
    with pytest.raises(TypeError, match=r"batch 0 of 'x' must be a tuple \(x, y\)"):
        model.fit(iter([x]), steps_per_epoch=1, verbose=0)
    with pytest.raises(ValueError, match="'steps_per_epoch' must be None or an int >= 1"):
        model.fit(loop_batches(x, y), steps_per_epoch=0, verbose=0)
    with pytest.raises(ValueError, match="'validation_split' needs arrays"):
        model.fit(loop_batches(x, y), steps_per_epoch=1, validation_split=0.2, verbose=0)
