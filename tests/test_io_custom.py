"""What ``save`` accepts, ``load`` reads back: custom losses and initializers (registered
or given as ``custom_objects``), what is refused at save time, exact resumption with
custom objects, every layer case, and checked optimizer state and weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from handgrad import _custom, initializers, io, losses, optimizers
from handgrad import layers as L
from handgrad.io import safetensors as _safetensors
from handgrad.model import Sequential
from handgrad.testing import LAYER_CASES
from handgrad.testing.keras_cases import CUSTOM_OBJECTS


def half_glorot(shape, dtype=np.float32, rng=None):
    """A custom initializer: Glorot uniform halved."""
    w = initializers.glorot_uniform(shape, dtype, rng)
    w *= 0.5
    return w


def smooth_ce(pred, y):
    """A custom loss: cross-entropy with label smoothing."""
    return losses.softmax_cross_entropy(pred, y, label_smoothing=0.1)


OBJECTS = {"half_glorot": half_glorot, "smooth_ce": smooth_ce}


@pytest.fixture(autouse=True)
def empty_registry(monkeypatch):
    """Each test starts from, and leaves behind, the registry it found."""
    monkeypatch.setattr(_custom, "_REGISTRY", {})


def data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int64)


def custom_model(loss=smooth_ce, init=half_glorot):
    net = Sequential([L.Dense(8, kernel_initializer=init, name="hidden"), L.ReLU(),
                      L.Dropout(0.2, seed=3, name="drop"),
                      L.Dense(2, bias_initializer=init, name="head")], seed=0, input_shape=(6,))
    return net.compile(optimizers.Adam(lr=0.01), loss)


def assert_same_state(a, b):
    pa, pb = a.named_parameters(), b.named_parameters()
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)


def stored_document(path):
    return json.loads(_safetensors.read(path)[1]["handgrad"])


# --------------------------------------------------------------- refused at save


@pytest.mark.parametrize("which, where", [
    ("loss", "the loss"),
    ("initializer", "the kernel_initializer of Dense 'hidden'"),
    ("lambda", "the loss"),
])
def test_save_refuses_a_callable_that_load_could_not_find(tmp_path, which, where):
    path = tmp_path / "model.safetensors"
    io.save(custom_model("cross_entropy", "glorot_uniform"), path)
    before = path.read_bytes()
    net = {"loss": lambda: custom_model(init="glorot_uniform"),
           "initializer": lambda: custom_model(loss="cross_entropy"),
           "lambda": lambda: custom_model(lambda p, y: smooth_ce(p, y), "glorot_uniform")}[which]()
    with pytest.raises(ValueError) as caught:
        io.save(net, path)
    message = str(caught.value)
    assert message.startswith(f"save: {where} is the custom callable")
    assert "@handgrad.io.register_custom" in message and "custom_objects=" in message
    assert path.read_bytes() == before  # the weights never reach a file load cannot read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


@pytest.mark.parametrize("register", ["decorator", "named", "keyword"])
def test_registered_custom_objects_round_trip(tmp_path, register):
    names = {"decorator": ("half_glorot", "smooth_ce"), "named": ("init_a", "loss_a"),
             "keyword": ("init_b", "loss_b")}[register]
    if register == "decorator":
        io.register_custom(half_glorot)
        io.register_custom(smooth_ce)
    elif register == "named":
        io.register_custom(names[0])(half_glorot)
        io.register_custom(names[1])(smooth_ce)
    else:
        io.register_custom(name=names[0])(half_glorot)
        io.register_custom(name=names[1])(smooth_ce)
    net = custom_model()
    x, y = data()
    net.fit(x, y, epochs=1, batch_size=16, rng=0, verbose=0)
    path = tmp_path / "model.safetensors"
    io.save(net, path)
    document = stored_document(path)
    assert document["loss"] == {"custom": names[1]}
    assert document["model"]["config"]["layers"][0]["config"]["kernel_initializer"] == {
        "custom": names[0]}
    loaded = io.load(path)
    assert loaded.loss_fn is smooth_ce and loaded["hidden"].kernel_initializer is half_glorot
    assert loaded["head"].bias_initializer is half_glorot
    assert np.array_equal(loaded.predict(x), net.predict(x))
    assert loaded.evaluate(x, y) == net.evaluate(x, y)


def test_custom_objects_round_trip_and_a_missing_one_is_named(tmp_path):
    net = custom_model()
    path = tmp_path / "model.safetensors"
    io.save(net, path, custom_objects=OBJECTS)
    for given, field, name in [(None, "'loss'", "'smooth_ce'"),
                               ({"smooth_ce": smooth_ce},
                                "'model.config.layers[0].config.kernel_initializer'",
                                "'half_glorot'")]:
        with pytest.raises(ValueError) as caught:
            io.load(path, custom_objects=given)
        message = str(caught.value)
        assert str(path) in message and field in message and name in message
        assert "custom_objects=" in message
    loaded = io.load(path, custom_objects=OBJECTS)
    assert loaded.loss_fn is smooth_ce and loaded["hidden"].kernel_initializer is half_glorot
    assert_same_state(net, loaded)


def test_custom_objects_take_precedence_over_the_registry(tmp_path):
    io.register_custom(smooth_ce)
    io.register_custom(half_glorot)
    path = tmp_path / "model.safetensors"
    io.save(custom_model(), path)

    def other_loss(pred, y):
        return losses.softmax_cross_entropy(pred, y)

    loaded = io.load(path, custom_objects={"smooth_ce": other_loss})
    assert loaded.loss_fn is other_loss and loaded["hidden"].kernel_initializer is half_glorot


def test_resuming_with_custom_objects_is_bit_identical(tmp_path):
    x, y = data(80, seed=3)
    rng = np.random.default_rng(42)
    straight = custom_model()
    straight.fit(x, y, epochs=2, batch_size=16, rng=rng, verbose=0)
    path = tmp_path / "ckpt.safetensors"
    io.save_checkpoint(path, straight, straight.optimizer, epoch=2, rng=rng,
                       custom_objects=OBJECTS)
    straight.fit(x, y, epochs=4, initial_epoch=2, batch_size=16, rng=rng, verbose=0)
    checkpoint = io.load_checkpoint(path, custom_objects=OBJECTS)
    resumed = checkpoint.model
    resumed.fit(x, y, epochs=4, initial_epoch=checkpoint.epoch, batch_size=16,
                rng=checkpoint.rng, verbose=0)
    assert_same_state(straight, resumed)
    # the test can fail: the same file with another loss continues differently
    plain = {**OBJECTS, "smooth_ce": losses.softmax_cross_entropy}
    other = io.load_checkpoint(path, custom_objects=plain)
    other.model.fit(x, y, epochs=4, initial_epoch=2, batch_size=16, rng=other.rng, verbose=0)
    assert not np.array_equal(other.model.named_parameters()["head.W"],
                              straight.named_parameters()["head.W"])


def test_built_in_callables_are_stored_by_name(tmp_path):
    net = custom_model(losses.softmax_cross_entropy, initializers.he_normal)
    path = tmp_path / "model.safetensors"
    io.save(net, path)
    document = stored_document(path)
    assert document["loss"] == "softmax_cross_entropy"
    assert document["model"]["config"]["layers"][0]["config"]["kernel_initializer"] == "he_normal"
    loaded = io.load(path)
    assert loaded.loss_fn is losses.softmax_cross_entropy
    assert loaded["hidden"].kernel_initializer == "he_normal"


# ---------------------------------------------------------------- the registry


def _definition():
    def twin(shape, dtype=np.float32, rng=None):
        return np.zeros(shape, dtype)
    return twin


def test_register_custom_checks_its_input():
    with pytest.raises(TypeError, match=r"only callables .* received 5"):
        io.register_custom("five")(5)
    with pytest.raises(TypeError, match="'name' must be a string; received 3"):
        io.register_custom(3)
    with pytest.raises(ValueError, match="'name' must be a non-empty name"):
        io.register_custom("")
    with pytest.raises(ValueError, match="no usable __name__; pass register_custom"):
        io.register_custom(lambda p, y: (0.0, p))
    io.register_custom("loss")(smooth_ce)
    with pytest.raises(ValueError, match="the name 'loss' is already registered for"):
        io.register_custom("loss")(half_glorot)
    first, second = _definition(), _definition()  # the same definition, run twice
    assert io.register_custom("twin")(first) is first
    assert io.register_custom("twin")(second) is second
    assert _custom._REGISTRY["twin"] is second and _custom._REGISTRY["loss"] is smooth_ce


@pytest.mark.parametrize("custom_objects, error, match", [
    ([smooth_ce], TypeError, "'custom_objects' must be a dict name -> callable"),
    ({"smooth_ce": 5}, TypeError, r"'custom_objects'\['smooth_ce'\] must be callable"),
    ({"": smooth_ce}, ValueError, "'name' must be a non-empty name"),
    ({3: smooth_ce}, TypeError, "'name' must be a string; received 3"),
])
def test_custom_objects_must_map_names_to_callables(tmp_path, custom_objects, error, match):
    path = tmp_path / "model.safetensors"
    with pytest.raises(error, match=match):
        io.save(custom_model(), path, custom_objects=custom_objects)
    assert not path.exists()
    io.save(custom_model(), path, custom_objects=OBJECTS)
    with pytest.raises(error, match=match):
        io.load(path, custom_objects=custom_objects)


def test_a_registered_name_given_to_another_object_is_refused(tmp_path):
    io.register_custom("init")(half_glorot)
    with pytest.raises(ValueError, match="registered as 'init', but custom_objects maps 'init'"):
        io.save(custom_model(loss="cross_entropy"), tmp_path / "m.safetensors",
                custom_objects={"init": initializers.zeros})
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------- other things refused at save


def test_an_unregistered_layer_class_is_refused_at_save(tmp_path):
    class Scaled(L.Dense):
        pass

    class Dense(L.Dense):  # shadows the registered name
        pass

    for cls, why in ((Scaled, "which is not registered"),
                     (Dense, "but another class is registered under that name")):
        net = Sequential([L.ReLU(), cls(2, name="odd")], input_shape=(3,))
        with pytest.raises(ValueError, match=rf"{cls.__name__} 'odd' is a .*{cls.__name__}, "
                                             rf"{why}; .*@handgrad.layers.register"):
            io.save(net, tmp_path / "m.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_a_custom_optimizer_class_is_refused_at_save(tmp_path):
    class MyAdam(optimizers.Adam):
        pass

    net = custom_model("cross_entropy", "glorot_uniform")
    net.compile(MyAdam(), "cross_entropy")
    path = tmp_path / "m.safetensors"
    with pytest.raises(ValueError, match=r"the optimizer MyAdam cannot be stored .* "
                                         r"\(include_optimizer=False"):
        io.save(net, path)
    assert not path.exists()
    io.save(net, path, include_optimizer=False)
    assert isinstance(io.load(path).optimizer, optimizers.Adam)


def test_an_optimizer_state_that_does_not_fit_the_model_is_refused_at_save(tmp_path):
    trained = custom_model("cross_entropy", "glorot_uniform")
    trained.fit(*data(), epochs=1, batch_size=16, rng=0, verbose=0)
    other = Sequential([L.Dense(2, name="solo")], input_shape=(6,))
    with pytest.raises(ValueError, match=r"the state holds parameters \['head.W'"):
        io.save_checkpoint(tmp_path / "m.safetensors", other, trained.optimizer)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs, error, match", [
    ({"extra": {"a": {1, 2}}}, TypeError, r"'extra\['a'\]' must hold only JSON values"),
    ({"extra": {1: "x"}}, TypeError, "'extra' has the key 1; a file stores only string keys"),
    ({"extra": [1]}, TypeError, "'extra' must be a dict or None"),
    ({"epoch": True}, TypeError, "'epoch' must be an int >= 0; received True"),
    ({"epoch": -1}, ValueError, "'epoch' must be an int >= 0; received -1"),
    ({"optimizer": "adam"}, TypeError, "'optimizer' must be a handgrad Optimizer or None"),
])
def test_save_checkpoint_checks_its_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        io.save_checkpoint(tmp_path / "m.safetensors", custom_model("mse", "zeros"), **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_numpy_scalars_in_extra_are_stored_as_numbers(tmp_path):
    path = tmp_path / "m.safetensors"
    extra = {"best": np.float32(0.25), "steps": [np.int64(3)], "note": None}
    io.save_checkpoint(path, custom_model("mse", "zeros"), extra=extra)
    assert io.load_checkpoint(path).extra == {"best": 0.25, "steps": [3], "note": None}


# ------------------------------------------------------------- every layer case


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_every_layer_case_saves_and_loads_back(tmp_path, name):
    rng = np.random.default_rng(sorted(LAYER_CASES).index(name))
    layer, shape = LAYER_CASES[name](rng)
    layer.build(shape)
    path = tmp_path / f"{name}.safetensors"
    io.save_checkpoint(path, layer, custom_objects=CUSTOM_OBJECTS)  # Lambda's callables
    loaded = io.load_checkpoint(path, custom_objects=CUSTOM_OBJECTS).model
    assert type(loaded) is type(layer)
    assert json.dumps(loaded.get_config()) == json.dumps(layer.get_config())
    for what in ("named_parameters", "named_buffers"):
        ours, theirs = getattr(layer, what)(), getattr(loaded, what)()
        assert ours.keys() == theirs.keys()
        assert all(np.array_equal(ours[k], theirs[k]) and ours[k].dtype == theirs[k].dtype
                   for k in ours)


# ------------------------------------------------- optimizer state, weights, torch


def test_load_state_dict_checks_against_params_and_changes_nothing_on_error():
    params = {"w": np.ones((2, 3))}
    opt = optimizers.Adam(lr=0.1)
    opt.step(params, {"w": np.full((2, 3), 0.5)})
    before = opt.state_dict()
    bad = {**before, "exp_avg/w": np.zeros((3, 2))}
    with pytest.raises(ValueError, match=r"exp_avg/w: state \(3, 2\) float64 vs parameter "
                                         r"\(2, 3\) float64"):
        opt.load_state_dict(bad, params=params)
    opt.load_state_dict(bad)  # without params only the layout is checked
    opt.load_state_dict(before, params=params)
    after = opt.state_dict()
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k])
                                                 for k in after)
    with pytest.raises(TypeError, match="'params' must be None or a dict"):
        opt.load_state_dict(before, params=[1])


def test_load_weights_names_the_file_and_what_is_wrong(tmp_path):
    net = custom_model("mse", "zeros")
    path = tmp_path / "weights.safetensors"
    io.save(net, path)
    with pytest.raises(ValueError, match="load_weights: 'model' must be a built handgrad model"):
        io.load_weights(Sequential([L.Dense(2)]), path)
    as_float64 = Sequential([L.Dense(8, name="hidden"), L.ReLU(), L.Dropout(0.2, name="drop"),
                             L.Dense(2, name="head")], dtype="float64", input_shape=(6,))
    with pytest.raises(ValueError, match=r"weights\.safetensors'\): the parameters do not match "
                                         r"the model: .*mismatched dtypes \['head.W: file "
                                         r"float32 vs model float64'"):
        io.load_weights(as_float64, path)
    torch_style = tmp_path / "torch.safetensors"
    _safetensors.write(torch_style, {"0.weight": np.zeros((8, 6), np.float32)})
    with pytest.raises(ValueError, match=r"torch\.safetensors'\): the file holds no 'param/' "
                                         r"tensors .* use handgrad.io.from_torch"):
        io.load_weights(net, torch_style)


def test_from_torch_names_the_file(tmp_path):
    path = tmp_path / "state.safetensors"
    _safetensors.write(path, {"weight": np.zeros((5, 5), np.float32),
                              "bias": np.zeros(5, np.float32)})
    model = Sequential([L.Dense(2)], input_shape=(3,))
    with pytest.raises(ValueError, match=r"from_torch\('.*state\.safetensors'\): the torch "
                                         r"weights do not match the model"):
        io.from_torch(path, model)
