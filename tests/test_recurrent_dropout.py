"""``dropout=`` between the stacked layers of RNN/LSTM/GRU/BiLSTM: torch's semantics
(every layer's output but the last goes through dropout in training; identity in
evaluation), the exact backward given the drawn masks, the seed, save/load and the
checks of the argument."""

import copy

import numpy as np
import pytest

from handgrad import io as hio
from handgrad import layers as L
from handgrad import ops
from handgrad.model import Sequential
from handgrad.testing import assert_close

from tolerances_composite import stacked_recurrent_bounds

torch = pytest.importorskip("torch")

N, T, F, H = 3, 5, 4, 3
CELLS = {"rnn": (L.RNN, torch.nn.RNN), "lstm": (L.LSTM, torch.nn.LSTM),
         "gru": (L.GRU, torch.nn.GRU)}


def _x(dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal((N, T, F)).astype(dtype)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("key", list(CELLS))
def test_evaluation_matches_torch_with_dropout_set(key, bidirectional):
    cls, torch_cls = CELLS[key]
    layer = cls(H, 3, bidirectional=bidirectional, dropout=0.4, dtype="float64", seed=1)
    layer.build((T, F))
    module = torch_cls(F, H, 3, batch_first=True, bidirectional=bidirectional,
                       dropout=0.4).double().eval()
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, value in layer.parameters.items():
            key_t = name.replace("W_", "weight_", 1).replace("b_", "bias_", 1)
            params[key_t].copy_(torch.tensor(value.T if value.ndim == 2 else value))
    x = _x()
    results = []
    (terms, scale), _ = stacked_recurrent_bounds(
        lambda: results.append(layer.forward(x, training=False)))
    with torch.no_grad():
        expected = module(torch.tensor(x))[0].numpy()
    assert_close(results[0], expected, terms=terms, scale=scale)


def test_dropout_zero_leaves_the_layer_as_it_was():
    x = _x()
    plain = L.LSTM(H, 2, seed=4, dtype="float64")
    zero = L.LSTM(H, 2, dropout=0.0, seed=4, dtype="float64")
    np.testing.assert_array_equal(zero.forward(x), plain.forward(x))
    assert not zero.draws_random and not zero.needs_communicator
    assert "rng" not in zero.extra_state()


def test_training_draws_masks_and_evaluation_does_not():
    layer = L.GRU(H, 2, dropout=0.5, seed=4, dtype="float64")
    x = _x()
    evaluation = layer.forward(x, training=False)
    np.testing.assert_array_equal(layer.forward(x, training=False), evaluation)
    assert not np.array_equal(layer.forward(x, training=True), evaluation)


def _one_layer(stacked, cls, layer, features, dtype):
    """Stacked layer ``layer`` of ``stacked`` as a one-layer twin with the same weights."""
    single = cls(H, 1, bidirectional=stacked.bidirectional, dtype=dtype)
    single.build((T, features))
    for name in single.parameters:
        single.parameters[name] = stacked.parameters[name.replace("_l0", f"_l{layer}")].copy()
    return single


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("cls", "bidirectional"), [(L.RNN, False), (L.LSTM, True),
                                                    (L.GRU, True)])
def test_training_equals_a_hand_built_stack_with_explicit_masks(cls, bidirectional, dtype):
    """Output, input gradient and every weight gradient equal those of one-layer
    layers joined by ops.dropout drawn from the same generator state."""
    stacked = cls(H, 3, bidirectional=bidirectional, dropout=0.3, dtype=dtype, seed=5)
    stacked.build((T, F))
    d = stacked.directions
    singles = [_one_layer(stacked, cls, k, F if k == 0 else d * H, dtype) for k in range(3)]
    x = _x(dtype)
    dy = np.random.default_rng(1).standard_normal((N, T, d * H)).astype(dtype)
    rng = copy.deepcopy(stacked.rng)
    y = stacked.forward(x, training=True)
    dx = stacked.backward(dy)

    h, masks = x, []
    for k, single in enumerate(singles):
        if k:
            h, cache = ops.dropout(h, 0.3, rng)
            masks.append(cache)
        h = single.forward(h, training=True)
    np.testing.assert_array_equal(y, h)
    g = dy
    for k in reversed(range(3)):
        g = singles[k].backward(g)
        if k:
            g = ops.dropout_backward(g, masks[k - 1])
    np.testing.assert_array_equal(dx, g)
    for k, single in enumerate(singles):
        for name, value in single.gradients.items():
            np.testing.assert_array_equal(
                stacked.gradients[name.replace("_l0", f"_l{k}")], value, err_msg=name)


def test_the_backward_is_the_derivative_given_the_masks():
    """Central differences of <y, dy> with the generator reset before each forward."""
    layer = L.LSTM(H, 2, bidirectional=True, dropout=0.5, seed=2, dtype="float64")
    x = _x()
    layer.build((T, F))
    dy = np.random.default_rng(3).standard_normal((N, T, 2 * H))
    state = layer.rng.bit_generator.state

    def loss(inputs):
        layer.rng.bit_generator.state = state
        return float(np.sum(layer.forward(inputs, training=True, grad=False) * dy))

    layer.rng.bit_generator.state = state
    layer.forward(x, training=True)
    dx = layer.backward(dy)
    step = 1e-6
    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        shifted = x.copy()
        shifted[index] += step
        up = loss(shifted)
        shifted[index] -= 2 * step
        numeric[index] = (up - loss(shifted)) / (2 * step)
    # central differences: truncation ~ step**2, rounding ~ eps * |loss| / step
    bound = 10 * (step ** 2 + np.finfo(np.float64).eps * np.sum(np.abs(dy)) / step)
    assert np.max(np.abs(dx - numeric)) <= bound


def test_the_same_seed_gives_the_same_masks_and_another_seed_others():
    x = _x()

    def outputs(seed):
        layer = L.RNN(H, 2, dropout=0.5, seed=seed, dtype="float64")
        layer.build((T, F))
        layer.parameters = {k: np.ones_like(v) * 0.1 for k, v in layer.parameters.items()}
        return [layer.forward(x, training=True) for _ in range(2)]

    first, again, other = outputs(7), outputs(7), outputs(8)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # the stream moves on
    assert not np.array_equal(first[0], other[0])


def test_without_a_seed_the_stream_follows_the_model_seed():
    def model(seed):
        return Sequential([L.GRU(H, 2, dropout=0.5), L.Dense(2)], input_shape=(T, F),
                          seed=seed, dtype="float64")

    x = _x()
    np.testing.assert_array_equal(model(0).forward(x, training=True),
                                  model(0).forward(x, training=True))
    first, second = model(0), model(0)
    first.forward(x, training=True)
    assert first.extra_state() != second.extra_state()


def test_save_and_load_keep_dropout_and_the_stream(tmp_path):
    model = Sequential([L.BiLSTM(H, 2, dropout=0.25, name="bi"), L.Dense(2, name="fc")],
                       input_shape=(T, F), seed=3, dtype="float64")
    x = _x()
    model.forward(x, training=True)  # move the stream on
    path = tmp_path / "model.safetensors"
    hio.save(model, path)
    loaded = hio.load(path)
    assert loaded.layers[0].dropout == 0.25
    assert loaded.layers[0].get_config() == model.layers[0].get_config()
    np.testing.assert_array_equal(loaded.forward(x, training=True),
                                  model.forward(x, training=True))


def test_dropout_with_one_layer_warns_as_torch():
    with pytest.warns(UserWarning, match="num_layers=1"):
        L.LSTM(H, dropout=0.2)
    with pytest.warns(UserWarning, match="num_layers=1"):
        L.BiLSTM(H, dropout=0.2)


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_dropout_outside_zero_one_is_a_value_error(rate):
    with pytest.raises(ValueError, match=r"GRU: 'dropout' must be"):
        L.GRU(H, 2, dropout=rate)


def test_a_non_number_dropout_is_a_type_error():
    with pytest.raises(TypeError, match="dropout"):
        L.RNN(H, 2, dropout="0.5")
