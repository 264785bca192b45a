"""The recurrent kernels (rnn, lstm, gru): against torch.nn.RNN/LSTM/GRU with copied
weights (including initial states, reversed direction and pack_padded_sequence),
against their loop twins, against central finite differences, padded positions,
dtypes, non-contiguous inputs and every bad input."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

from tolerances_composite import recurrent_bounds

torch = pytest.importorskip("torch")
pack = torch.nn.utils.rnn.pack_padded_sequence
unpack = torch.nn.utils.rnn.pad_packed_sequence

GATES = {"rnn": 1, "lstm": 4, "gru": 3}
# (op name, keyword arguments): the four cells
CELLS = [("rnn", {"nonlinearity": "tanh"}), ("rnn", {"nonlinearity": "relu"}), ("lstm", {}),
         ("gru", {})]
CELL_IDS = ["rnn-tanh", "rnn-relu", "lstm", "gru"]
LENGTHS = [5, 2, 1, 4]  # N = 4, T = 5: full, short, single-step and mid-length sequences


def inputs(cell, dtype=np.float64, n=4, steps=5, features=3, hidden=3, seed=0, bias=(True, True),
           states=True):
    """x, W_ih, W_hh, b_ih, b_hh, h0 (and c0 for the LSTM), with random values."""
    rng = np.random.default_rng(seed)
    width = GATES[cell] * hidden

    def draw(*shape, scale=1.0):
        return (scale * rng.standard_normal(shape)).astype(dtype)

    arrays = [draw(n, steps, features), draw(features, width, scale=0.6),
              draw(hidden, width, scale=0.6), draw(width, scale=0.5) if bias[0] else None,
              draw(width, scale=0.5) if bias[1] else None, draw(n, hidden) if states else None]
    if cell == "lstm":
        arrays.append(draw(n, hidden) if states else None)
    return arrays


def upstream(cell, y, seed=1):
    """Random dy, dh_n (and dc_n): never all ones."""
    rng = np.random.default_rng(seed)
    n, hidden = y.shape[0], y.shape[2]
    grads = [rng.standard_normal(y.shape).astype(y.dtype),
             rng.standard_normal((n, hidden)).astype(y.dtype)]
    if cell == "lstm":
        grads.append(rng.standard_normal((n, hidden)).astype(y.dtype))
    return grads


def run(module, cell, arrays, kwargs, seed=1):
    """Forward then backward: (outputs (y, h_n[, c_n]), upstream grads, gradients)."""
    *outputs, cache = getattr(module, cell)(*arrays, **kwargs)
    grads_in = upstream(cell, outputs[0], seed)
    grads = getattr(module, cell + "_backward")(grads_in[0], cache, *grads_in[1:])
    return outputs, grads_in, grads


# ---------------------------------------------------------------------------- torch
def torch_run(cell, arrays, kwargs, grads_in):
    """The same computation with torch.nn.RNN/LSTM/GRU(batch_first=True); a reversed
    direction is the backward half of a bidirectional module (the forward half gets a
    zero upstream gradient). Returns (outputs, gradients) in the kernel's order."""
    x, W_ih, W_hh, b_ih, b_hh, h0, *c0 = arrays
    n, steps, features = x.shape
    hidden = W_hh.shape[0]
    reverse, lengths = kwargs.get("reverse", False), kwargs.get("lengths")
    dtype = torch.float64 if x.dtype == np.float64 else torch.float32
    common = dict(batch_first=True, bidirectional=reverse, bias=b_ih is not None)
    if cell == "rnn":
        module = torch.nn.RNN(features, hidden, nonlinearity=kwargs["nonlinearity"], **common)
    else:
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](features, hidden, **common)
    module = module.to(dtype)
    suffix = "_reverse" if reverse else ""
    with torch.no_grad():  # handgrad's (F, G*H) is torch's (G*H, F) transposed
        getattr(module, "weight_ih_l0" + suffix).copy_(torch.tensor(W_ih.T))
        getattr(module, "weight_hh_l0" + suffix).copy_(torch.tensor(W_hh.T))
        if b_ih is not None:
            getattr(module, "bias_ih_l0" + suffix).copy_(torch.tensor(b_ih))
            getattr(module, "bias_hh_l0" + suffix).copy_(torch.tensor(b_hh))
    d = 2 if reverse else 1
    tx = torch.tensor(x, requires_grad=True)
    states = []
    for s in [h0, *c0]:
        full = torch.zeros(d, n, hidden, dtype=dtype)
        if s is not None:
            full[d - 1] = torch.tensor(s)
        states.append(full.requires_grad_(True))
    seq = tx if lengths is None else pack(tx, torch.tensor(lengths), batch_first=True,
                                          enforce_sorted=False)
    out, final = module(seq, tuple(states) if cell == "lstm" else states[0])
    if lengths is not None:
        out, _ = unpack(out, batch_first=True, total_length=steps)
    finals = list(final) if cell == "lstm" else [final]
    y = out[..., (d - 1) * hidden:]
    loss = (y * torch.tensor(grads_in[0])).sum()
    for f, g in zip(finals, grads_in[1:]):
        loss = loss + (f[d - 1] * torch.tensor(g)).sum()
    loss.backward()
    outputs = [y.detach().numpy()] + [f[d - 1].detach().numpy() for f in finals]
    grads = [tx.grad.numpy()]
    grads += [None if s is None else t.grad[d - 1].numpy() for s, t in zip([h0, *c0], states)]
    for name, given in (("weight_ih_l0", True), ("weight_hh_l0", True),
                        ("bias_ih_l0", b_ih is not None), ("bias_hh_l0", b_hh is not None)):
        g = getattr(module, name + suffix).grad.numpy() if given else None
        grads.append(g.T if g is not None and name.startswith("weight") else g)
    return outputs, grads


def assert_all_close(cell, arrays, kwargs, grads_in, actual, expected, dtype):
    """Outputs and gradients ``actual = (outputs, grads)`` against ``expected`` within
    the rounding tolerance of the recurrence in ``dtype`` (tolerances_composite)."""
    (f_terms, f_scale), (b_terms, b_scales) = recurrent_bounds(cell, arrays, kwargs, grads_in)
    bounds = [(f_terms, f_scale)] * len(output_names(cell))
    bounds += [(b_terms, b_scales[name]) for name in grad_names(cell)]
    names = output_names(cell) + grad_names(cell)
    actual, expected = [*actual[0], *actual[1]], [*expected[0], *expected[1]]
    assert len(actual) == len(expected) == len(names)
    for a, e, name, (terms, scale) in zip(actual, expected, names, bounds):
        if e is None:
            assert a is None, name
        else:
            assert a.dtype == np.dtype(dtype), name
            assert_close(a, e, dtype=dtype, terms=terms, scale=scale, what=name)


def grad_names(cell):
    states = ["dh0", "dc0"] if cell == "lstm" else ["dh0"]
    return ["dx", *states, "dW_ih", "dW_hh", "db_ih", "db_hh"]


def output_names(cell):
    return ["y", "h_n", "c_n"] if cell == "lstm" else ["y", "h_n"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_matches_torch(cell, kwargs, reverse, padded, dtype):
    arrays = inputs(cell, dtype)
    kwargs = {**kwargs, "reverse": reverse, "lengths": LENGTHS if padded else None}
    outputs, grads_in, grads = run(ops, cell, arrays, kwargs)
    expected = torch_run(cell, arrays, kwargs, grads_in)
    assert_all_close(cell, arrays, kwargs, grads_in, (outputs, grads), expected, dtype)


@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_matches_torch_without_bias_or_initial_state(cell, kwargs):
    arrays = inputs(cell, bias=(False, False), states=False)
    outputs, grads_in, grads = run(ops, cell, arrays, kwargs)
    expected = torch_run(cell, arrays, kwargs, grads_in)
    assert_all_close(cell, arrays, kwargs, grads_in, (outputs, grads), expected, np.float64)
    assert all(g is None for g in grads[1:-4])  # no initial state: no state gradient
    assert grads[-2] is None and grads[-1] is None


def test_long_float32_lstm_matches_torch():
    arrays = inputs("lstm", np.float32, n=8, steps=40, features=32, hidden=64, seed=3)
    arrays[1] *= 0.1
    arrays[2] *= 0.1
    outputs, grads_in, grads = run(ops, "lstm", arrays, {})
    expected = torch_run("lstm", arrays, {}, grads_in)
    assert_all_close("lstm", arrays, {}, grads_in, (outputs, grads), expected, np.float32)


# -------------------------------------------------------------------- loop twins
TWIN_OPTIONS = [
    {},
    {"reverse": True},
    {"lengths": LENGTHS},
    {"lengths": LENGTHS, "reverse": True},
    {"lengths": np.array([3, 5, 5, 1], dtype=np.int32), "bias": (True, False)},
    {"bias": (False, True), "states": False, "reverse": True},
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("options", TWIN_OPTIONS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_matches_the_loop_twin(cell, kwargs, options, dtype):
    options = dict(options)
    array_options = {k: options.pop(k) for k in ("bias", "states") if k in options}
    arrays = inputs(cell, dtype, seed=2, **array_options)
    kwargs = {**kwargs, **options}
    outputs, grads_in, grads = run(ops, cell, arrays, kwargs)
    twin_outputs, _, twin_grads = run(reference, cell, arrays, kwargs)
    assert_all_close(cell, arrays, kwargs, grads_in, (outputs, grads), (twin_outputs, twin_grads),
                     dtype)


# ------------------------------------------------------------ finite differences
def finite_differences(cell, arrays, kwargs, grads_in, eps=1e-6):
    """Central differences of L = <y, dy> + <h_n, dh_n> (+ <c_n, dc_n>) for every
    entry of every array input, with their measured error: ``[(numeric, error)]``.
    The step 1e-6 balances truncation (~h^2) against rounding (~eps/h) in float64."""
    fn = getattr(ops, cell)

    def loss():
        outputs = fn(*arrays, **kwargs)[:-1]
        return sum(float(np.sum(o * g)) for o, g in zip(outputs, grads_in))

    numeric = []
    for a in arrays:
        if a is None:
            numeric.append(None)
            continue
        numeric.append(numeric_gradient(loss, a, eps, with_error=True))
    return numeric


@pytest.mark.parametrize("options", [{}, {"lengths": [4, 2, 3], "reverse": True}],
                         ids=["full", "lengths-reverse"])
@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_gradients_match_finite_differences(cell, kwargs, options):
    arrays = inputs(cell, n=3, steps=4, features=2, hidden=2, seed=4)
    kwargs = {**kwargs, **options}
    _, grads_in, grads = run(ops, cell, arrays, kwargs)
    numeric = finite_differences(cell, arrays, kwargs, grads_in)
    # the kernel returns dx, the state gradients, then the weights; inputs are
    # x, W_ih, W_hh, b_ih, b_hh, then the states
    n_states = 2 if cell == "lstm" else 1
    reordered = [numeric[0], *numeric[5:5 + n_states], *numeric[1:5]]
    for analytic, (expected, error), name in zip(grads, reordered, grad_names(cell)):
        assert_gradient_close(analytic, expected, error, what=name)


# ------------------------------------------------------------- padded batches
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_padded_positions_output_zero_and_get_exactly_zero_gradient(cell, kwargs, reverse):
    arrays = inputs(cell, steps=6, seed=5)
    lengths = [6, 3, 1, 5]
    kwargs = {**kwargs, "lengths": lengths, "reverse": reverse}
    outputs, grads_in, grads = run(ops, cell, arrays, kwargs)
    padded = np.arange(6)[None, :] >= np.array(lengths)[:, None]
    assert np.all(outputs[0][padded] == 0)
    assert np.all(grads[0][padded] == 0)
    if kwargs.get("nonlinearity") != "relu":  # a relu step can be dead for all units
        assert np.all(grads[0][~padded] != 0)
    # dy at padded positions is ignored
    dy = grads_in[0].copy()
    dy[padded] = 1e3
    *_, cache = getattr(ops, cell)(*arrays, **kwargs)
    again = getattr(ops, cell + "_backward")(dy, cache, *grads_in[1:])
    for a, b in zip(again, grads):
        np.testing.assert_array_equal(a, b)
    # and the padding's content does not matter
    x = arrays[0].copy()
    x[padded] = 7.0
    changed = getattr(ops, cell)(x, *arrays[1:], **kwargs)
    for a, b in zip(changed[:-1], outputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_full_lengths_equal_no_lengths(cell, kwargs):
    arrays = inputs(cell, seed=6)
    outputs, _, grads = run(ops, cell, arrays, kwargs)
    full_outputs, _, full_grads = run(ops, cell, arrays, {**kwargs, "lengths": [5] * 4})
    for a, b in zip([*outputs, *grads], [*full_outputs, *full_grads]):
        if b is not None:
            np.testing.assert_array_equal(a, b)


# --------------------------------------------------------- dtypes and layouts
@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_float32_in_float32_out_and_close_to_float64(cell, kwargs):
    arrays = inputs(cell, np.float32, seed=7)
    kwargs = {**kwargs, "lengths": LENGTHS}
    outputs, grads_in, grads = run(ops, cell, arrays, kwargs)
    for a in [*outputs, *grads]:
        assert a.dtype == np.float32
    wide = [None if a is None else a.astype(np.float64) for a in arrays]
    *wide_out, cache = getattr(ops, cell)(*wide, **kwargs)
    wide_grads = getattr(ops, cell + "_backward")(*[g.astype(np.float64) for g in grads_in[:1]],
                                                  cache, *[g.astype(np.float64)
                                                           for g in grads_in[1:]])
    assert_all_close(cell, arrays, kwargs, grads_in, (outputs, grads), (wide_out, wide_grads),
                     np.float32)


@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_non_contiguous_inputs_give_the_same_results(cell, kwargs):
    arrays = inputs(cell, seed=8)
    kwargs = {**kwargs, "lengths": LENGTHS, "reverse": True}
    outputs, grads_in, grads = run(ops, cell, arrays, kwargs)
    strided = [None if a is None else np.asfortranarray(a) if a.ndim == 2 else
               np.repeat(a, 2, axis=-1)[..., ::2] for a in arrays]
    assert not any(a.flags.c_contiguous for a in strided if a is not None and a.ndim > 1)
    *out2, cache = getattr(ops, cell)(*strided, **kwargs)
    dy = np.repeat(grads_in[0], 2, axis=0)[::2]
    grads2 = getattr(ops, cell + "_backward")(dy, cache, *grads_in[1:])
    for a, b in zip([*outputs, *grads], [*out2, *grads2]):
        if b is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("cell", "kwargs"), CELLS, ids=CELL_IDS)
def test_no_upstream_for_y_and_repeated_backward(cell, kwargs):
    arrays = inputs(cell, seed=9)
    *outputs, cache = getattr(ops, cell)(*arrays, **kwargs)
    finals = upstream(cell, outputs[0])[1:]
    backward = getattr(ops, cell + "_backward")
    without = backward(None, cache, *finals)
    zeros = backward(np.zeros_like(outputs[0]), cache, *finals)
    again = backward(None, cache, *finals)  # the cache is not consumed or changed
    for a, b, c in zip(without, zeros, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    # no upstream gradient at all: every gradient is zero
    for g in backward(None, cache):
        assert not np.any(g)


# ------------------------------------------------------------------ bad inputs
BAD = [
    ("lstm", {0: np.zeros((2, 3, 4))}, {}, ValueError, r"lstm: 'x' has F = 4 features"),
    ("gru", {0: np.zeros((2, 3))}, {}, ValueError, r"gru: 'x' must be a 3-D array \(N, T, F\)"),
    ("rnn", {0: np.zeros((2, 0, 3))}, {}, ValueError, r"rnn: 'x' must have at least one time"),
    ("lstm", {2: np.zeros((2, 6))}, {}, ValueError, r"lstm: 'W_hh' must have shape \(H, 4\*H\)"),
    ("gru", {1: np.zeros((3, 9))}, {}, ValueError, r"gru: 'W_ih' must have shape \(F, 3\*H\)"),
    ("rnn", {3: np.zeros(3)}, {}, ValueError, r"rnn: 'b_ih' must have shape \(2,\)"),
    ("lstm", {4: np.zeros((8, 1))}, {}, ValueError, r"lstm: 'b_hh' must be a 1-D array"),
    ("gru", {5: np.zeros((3, 2))}, {}, ValueError, r"gru: 'h0' must have shape \(N, H\) = "
                                                   r"\(2, 2\); received shape \(3, 2\)"),
    ("lstm", {6: np.zeros((2, 3))}, {}, ValueError, r"lstm: 'c0' must have shape \(N, H\)"),
    ("rnn", {5: np.zeros((2, 2), np.float32)}, {}, TypeError, r"rnn: 'h0' has dtype float32"),
    ("lstm", {0: np.zeros((2, 3, 3), np.int64)}, {}, TypeError, r"lstm: 'x' must have dtype"),
    ("gru", {}, {"lengths": [3, 4]}, ValueError, r"gru: 'lengths' must be .* values in \[1, "
                                                 r"3\].* received values from 3 to 4"),
    ("rnn", {}, {"lengths": [0, 2]}, ValueError, r"rnn: 'lengths' .* received values from 0"),
    ("lstm", {}, {"lengths": [1, 2, 3]}, ValueError, r"lstm: 'lengths' .* received shape \(3,\)"),
    ("gru", {}, {"lengths": np.array([1.0, 2.0])}, TypeError, r"gru: 'lengths' .* dtype float64"),
    ("rnn", {}, {"lengths": [True, 2]}, TypeError, r"rnn: 'lengths' must be an int array"),
    ("lstm", {}, {"lengths": "3"}, TypeError, r"lstm: 'lengths' must be an int array"),
    ("rnn", {}, {"nonlinearity": "sigmoid"}, ValueError, r"rnn: 'nonlinearity' must be 'tanh' "
                                                         r"or 'relu'; received 'sigmoid'"),
    ("gru", {}, {"reverse": 1}, TypeError, r"gru: 'reverse' must be a bool"),
]


@pytest.mark.parametrize(("cell", "changes", "kwargs", "error", "message"), BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
@pytest.mark.parametrize("module", [ops, reference], ids=["ops", "reference"])
def test_bad_forward_inputs_raise_clear_errors(module, cell, changes, kwargs, error, message):
    arrays = inputs(cell, np.float64, n=2, steps=3, features=3, hidden=2)
    for index, value in changes.items():
        arrays[index] = value
    with pytest.raises(error, match=message):
        getattr(module, cell)(*arrays, **kwargs)


def test_bad_backward_inputs_raise_clear_errors():
    arrays = inputs("lstm", n=2, steps=3, features=3, hidden=2)
    y, h_n, c_n, cache = ops.lstm(*arrays)
    with pytest.raises(ValueError, match=r"lstm_backward: 'dy' must have the forward output's "
                                         r"shape \(2, 3, 2\)"):
        ops.lstm_backward(np.zeros((2, 3, 3)), cache)
    with pytest.raises(TypeError, match=r"lstm_backward: 'dy' must have the forward dtype"):
        ops.lstm_backward(y.astype(np.float32), cache)
    with pytest.raises(ValueError, match=r"lstm_backward: 'dh_n' must have shape \(N, H\) = "
                                         r"\(2, 2\); received \(2, 3\)"):
        ops.lstm_backward(y, cache, np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"lstm_backward: 'dc_n' must have the forward dtype"):
        ops.lstm_backward(y, cache, h_n, c_n.astype(np.float32))
    with pytest.raises(TypeError, match=r"gru_backward: 'cache' must be the cache returned by "
                                        r"gru"):
        ops.gru_backward(y, cache)
    *_, ref_cache = reference.lstm(*arrays)
    with pytest.raises(TypeError, match=r"rnn_backward: 'cache' must be the cache returned"):
        reference.rnn_backward(y, ref_cache)
    with pytest.raises(ValueError, match=r"lstm_backward: 'dy' must have the forward output's"):
        reference.lstm_backward(np.zeros((2, 3, 3)), ref_cache)
