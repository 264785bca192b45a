"""The restricted Boltzmann machine (handgrad.zoo.RBM): its free energy, conditionals and
pseudo-log-likelihood against loop twins and exact enumeration, the CD gradient against
its closed form and finite differences, persistent chains, exact resume from a file,
training on a pattern set, the command line and bad input."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math

import numpy as np
import pytest

from cli_support import run_main
from handgrad import io as hio
from handgrad.cli import run_rbm
from handgrad.testing import (
    assert_close,
    assert_gradient_close,
    gradcheck,
    numeric_gradient,
)
from handgrad.zoo import RBM

DTYPES = [np.float32, np.float64]


def built(n_visible=7, n_hidden=5, dtype=np.float64, seed=0, scale=0.5, **kwargs):
    """An RBM with random W, b, c of size ``scale`` (not the small initial ones)."""
    model = RBM(n_hidden, dtype=dtype, seed=seed, **kwargs).build((n_visible,))
    rng = np.random.default_rng(seed + 100)
    for value in model.parameters.values():
        value[...] = scale * rng.standard_normal(value.shape)
    return model


def bits(shape, dtype=np.float64, seed=1, p=0.5):
    return (np.random.default_rng(seed).random(shape) < p).astype(dtype)


# ------------------------------------------------------------------- loop twins
def softplus(a):
    return max(a, 0.0) + math.log1p(math.exp(-abs(a)))


def sigmoid(a):
    return 1.0 / (1.0 + math.exp(-a)) if a >= 0 else math.exp(a) / (1.0 + math.exp(a))


def pre_hidden_loop(params, v):
    """a[n, j] = c_j + sum_i v[n, i] W[i, j], and the sizes sum_i |v W| + |c| of its terms."""
    w, c = params["W"].astype(np.float64), params["c"].astype(np.float64)
    pre, size = np.zeros((len(v), len(c))), np.zeros((len(v), len(c)))
    for n, j in itertools.product(range(len(v)), range(len(c))):
        terms = [v[n, i] * w[i, j] for i in range(w.shape[0])]
        pre[n, j], size[n, j] = c[j] + sum(terms), abs(c[j]) + sum(map(abs, terms))
    return pre, size


def free_energy_loop(params, v):
    """F(v) = -sum_i v_i b_i - sum_j softplus(a_j), and the size of its terms."""
    pre, size = pre_hidden_loop(params, v)
    b = params["b"].astype(np.float64)
    energy, scale = np.zeros(len(v)), np.zeros(len(v))
    for n in range(len(v)):
        visible = [v[n, i] * b[i] for i in range(len(b))]
        hidden = [softplus(a) for a in pre[n]]
        energy[n] = -sum(visible) - sum(hidden)
        scale[n] = sum(map(abs, visible)) + sum(hidden) + size[n].sum()
    return energy, scale


def statistics_loop(params, v):
    """<v h^T>, <v>, <h> over the rows of v, with h = p(h | v): one example at a time."""
    pre, _ = pre_hidden_loop(params, v)
    vh, v_mean, h_mean = np.zeros(params["W"].shape), np.zeros(v.shape[1]), np.zeros(
        pre.shape[1])
    for n in range(len(v)):
        h = [sigmoid(a) for a in pre[n]]
        for i, j in itertools.product(range(v.shape[1]), range(len(h))):
            vh[i, j] += v[n, i] * h[j] / len(v)
        v_mean += v[n] / len(v)
        h_mean += np.array(h) / len(v)
    return vh, v_mean, h_mean


def gibbs_loop(params, v, steps, rng):
    """Block Gibbs drawing the same uniforms as the model: (N, H), then (N, V), per step."""
    w, b = params["W"].astype(np.float64), params["b"].astype(np.float64)
    dtype = v.dtype
    v = v.astype(np.float64)
    for _ in range(steps):
        pre, _ = pre_hidden_loop(params, v)
        u = rng.random(pre.shape, dtype=dtype)
        h = np.array([[1.0 if u[n, j] < sigmoid(pre[n, j]) else 0.0 for j in range(pre.shape[1])]
                      for n in range(len(v))])
        u = rng.random(v.shape, dtype=dtype)
        v = np.array([[1.0 if u[n, i] < sigmoid(b[i] + sum(w[i, j] * h[n, j]
                                                           for j in range(h.shape[1])))
                       else 0.0 for i in range(v.shape[1])] for n in range(len(v))])
    return v.astype(dtype)


# ------------------------------------------------- the model, against its twins
@pytest.mark.parametrize("dtype", DTYPES)
def test_free_energy_and_conditionals_match_loop_twins(dtype):
    model, v = built(dtype=dtype), bits((6, 7), dtype)
    energy, scale = free_energy_loop(model.parameters, v)
    for n in range(len(v)):
        assert_close(model.free_energy(v)[n], energy[n], dtype=dtype, terms=12, scale=scale[n])
    pre, size = pre_hidden_loop(model.parameters, v)
    hidden = np.vectorize(sigmoid)(pre)
    assert model.hidden_probabilities(v).dtype == dtype
    # sigmoid' <= 1/4: an error e in the pre-activation moves p by at most e / 4
    assert_close(model.hidden_probabilities(v), hidden, dtype=dtype, terms=8, scale=size.max())
    h = bits((6, 5), dtype, seed=2)
    flipped = {"W": model.parameters["W"].T, "c": model.parameters["b"]}
    pre_v, size_v = pre_hidden_loop(flipped, h)
    assert_close(model.visible_probabilities(h), np.vectorize(sigmoid)(pre_v), dtype=dtype,
                 terms=6, scale=size_v.max())
    assert np.array_equal(model.transform(v), model.hidden_probabilities(v))


def test_free_energy_is_the_marginal_and_the_pll_is_exact_by_enumeration():
    """Tiny model: F(v) = -log sum_h exp(-E(v, h)) over all 2^H states h, and the exact PLL
    is sum_i log p(v) / (p(v) + p(v with bit i flipped)) from the energies."""
    model = built(n_visible=4, n_hidden=3, scale=1.0)
    w, b, c = (model.parameters[k] for k in "Wbc")
    states_v = np.array(list(itertools.product([0.0, 1.0], repeat=4)))
    states_h = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    energy = -(states_v @ b)[:, None] - (states_h @ c)[None] - states_v @ w @ states_h.T
    marginal = -np.log(np.exp(-energy).sum(1))
    free = model.free_energy(states_v)
    assert_close(free, marginal, terms=8, scale=np.abs(energy).max() + 1)
    posterior = np.exp(-energy) / np.exp(-energy).sum(1, keepdims=True)
    assert_close(model.hidden_probabilities(states_v), posterior @ states_h, terms=8)
    pll = []
    for v in states_v:
        total = 0.0
        for i in range(4):
            other = v.copy()
            other[i] = 1 - other[i]
            f_v, f_o = (-math.log(np.exp(-energy[int("".join(map(str, s.astype(int))), 2)])
                                  .sum()) for s in (v, other))
            total += -math.log1p(math.exp(f_v - f_o))  # log p(v) / (p(v) + p(other))
        pll.append(total)
    assert_close(model.pseudo_log_likelihood(states_v), np.array(pll), terms=16,
                 scale=4 * (np.abs(energy).max() + 1))


def test_stochastic_pll_is_an_unbiased_estimate_of_the_exact_one():
    model, v = built(n_visible=10, n_hidden=6), bits((40, 10), seed=3)
    exact = model.pseudo_log_likelihood(v).mean()
    draws = np.array([model.pseudo_log_likelihood(v, exact=False, rng=seed).mean()
                      for seed in range(300)])
    error = draws.std(ddof=1) / math.sqrt(len(draws))
    assert abs(draws.mean() - exact) < 5 * error
    assert draws.std() > 0  # really random


@pytest.mark.parametrize("dtype", DTYPES)
def test_gibbs_matches_its_loop_twin_on_the_same_uniforms(dtype):
    model, v = built(dtype=dtype, scale=1.0), bits((5, 7), dtype)
    ours = model.gibbs(v, steps=3, rng=np.random.default_rng(7))
    twin = gibbs_loop(model.parameters, v, 3, np.random.default_rng(7))
    assert ours.dtype == dtype and set(np.unique(ours)) <= {0.0, 1.0}
    assert np.array_equal(ours, twin)


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("persistent", [False, True])
def test_cd_gradient_equals_its_closed_form_on_fixed_samples(persistent):
    """For the negatives drawn, the CD-k gradient is d/dtheta [mean F(data) - mean F(neg)]:
    = -(<v h>_data - <v h>_neg) by a per-example loop, and by finite differences."""
    model, v = built(k=2, persistent=persistent), bits((6, 7))
    before = None if not persistent else model.chains
    grads = model.contrastive_divergence(v, rng=np.random.default_rng(5))
    if persistent:  # the chains started at the batch size and moved on
        assert before is None and model.chains.shape == v.shape
        negatives = model.chains
    else:
        negatives = model.negative_samples(v, rng=np.random.default_rng(5))
        assert np.array_equal(negatives, model.gibbs(v, 2, rng=np.random.default_rng(5)))
    data_stats = statistics_loop(model.parameters, v)
    negative_stats = statistics_loop(model.parameters, negatives)
    pre, size = pre_hidden_loop(model.parameters, np.concatenate([v, negatives]))
    for key, data, negative in zip("Wbc", data_stats, negative_stats):
        # each entry: means of N + M products of magnitude <= 1, from pre-activations
        # that are off by eps sqrt(V) max|terms| (through sigmoid' <= 1/4)
        assert_close(grads[key], negative - data, terms=len(pre) + 7, scale=1 + size.max(),
                     what=key)

    def gap():
        return model.free_energy(v).mean() - model.free_energy(negatives).mean()

    for key, value in model.parameters.items():
        numeric, error = numeric_gradient(gap, value, with_error=True)
        assert_gradient_close(grads[key], numeric, error, what=key)


def test_train_step_is_sgd_on_the_cd_gradient_with_weight_decay_on_w_only():
    model, v = built(lr=0.5, weight_decay=0.1), bits((6, 7))
    before = {key: value.copy() for key, value in model.parameters.items()}
    expected = model.contrastive_divergence(v, rng=np.random.default_rng(4))  # CD: no state
    grads = model.update(v, rng=np.random.default_rng(4))
    expected["W"] = expected["W"] + 0.1 * before["W"]
    for key, value in model.parameters.items():
        assert np.array_equal(grads[key], expected[key])
        # the first momentum step is plain SGD: p - lr g
        assert_close(value, before[key] - 0.5 * grads[key], terms=2,
                     scale=np.abs(before[key]).max() + np.abs(grads[key]).max(), what=key)


def test_layer_backward_passes_gradcheck():
    model = built(n_visible=6, n_hidden=4)
    result = gradcheck(model, np.random.default_rng(0).random((5, 6)), rng=0)
    assert result.passed, result.errors
    assert set(result.errors) == {"x", "W", "b", "c"}


def test_persistent_chains_carry_on_across_batches_and_cd_restarts_at_the_data():
    model = built(persistent=True, scale=1.0)
    first, second = bits((4, 7), seed=1), bits((4, 7), seed=2)
    model.contrastive_divergence(first, rng=0)
    chains = model.chains.copy()
    assert model.n_chains == 4 and model.get_config()["n_chains"] == 4
    negatives = model.negative_samples(second, rng=np.random.default_rng(9))
    assert np.array_equal(negatives, model.gibbs(chains, 1, rng=np.random.default_rng(9)))
    assert np.array_equal(model.chains, negatives)  # the chains moved, not the data
    cd = built(scale=1.0)
    assert cd.negative_samples(second, rng=np.random.default_rng(9)).shape == second.shape
    assert np.array_equal(cd.negative_samples(second, rng=np.random.default_rng(9)),
                          cd.gibbs(second, 1, rng=np.random.default_rng(9)))
    assert cd.chains is None


# ----------------------------------------------------------------- files
def test_save_and_load_resume_training_exactly(tmp_path):
    x = bits((30, 9), np.float32, p=0.3)
    model = RBM(4, k=2, persistent=True, momentum=0.8, weight_decay=1e-3, seed=3)
    model.fit(x, epochs=2, batch_size=8, rng=0, verbose=0)
    model.save(tmp_path / "rbm.safetensors")
    loaded = RBM.load(tmp_path / "rbm.safetensors")
    plain = hio.load(tmp_path / "rbm.safetensors")
    assert type(plain) is RBM and plain.get_config() == model.get_config()
    for other in (loaded, plain):
        assert other.chains.shape == (8, 9)
        assert other.rng.bit_generator.state == model.rng.bit_generator.state
        for key, value in {**model.parameters, "chains": model.chains}.items():
            assert np.array_equal({**other.parameters, "chains": other.chains}[key], value)
    history = model.fit(x, epochs=1, batch_size=8, rng=1, verbose=0)
    resumed = loaded.fit(x, epochs=1, batch_size=8, rng=1, verbose=0)  # with the momentum
    for key in "Wbc":
        assert np.array_equal(loaded.parameters[key], model.parameters[key])
    assert np.array_equal(loaded.chains, model.chains)
    assert resumed.history["pseudo_log_likelihood"] == history.history["pseudo_log_likelihood"]


# -------------------------------------------------------------- training
def bars_and_stripes(n, seed, noise=0.05):
    """4x4 images whose rows (or columns) are each all on or all off, bits flipped with
    probability ``noise``: (n, 16)."""
    patterns = set()
    for on in itertools.product([0.0, 1.0], repeat=4):
        rows = np.repeat(np.array(on)[:, None], 4, axis=1)
        patterns |= {tuple(rows.ravel()), tuple(rows.T.ravel())}
    patterns = np.array(sorted(patterns))
    rng = np.random.default_rng(seed)
    x = patterns[rng.integers(0, len(patterns), n)]
    return np.abs(x - (rng.random(x.shape) < noise)).astype(np.float64)


def test_training_lowers_the_free_energy_of_data_below_noise_and_raises_the_pll():
    x, held_out = bars_and_stripes(600, seed=0), bars_and_stripes(300, seed=1)
    noise = bits(held_out.shape, seed=2)
    model = RBM(16, seed=0, dtype="float64")
    model.fit(x, epochs=1, batch_size=10, verbose=0)
    pll_before = model.pseudo_log_likelihood(held_out)
    history = model.fit(x, epochs=16, initial_epoch=1, batch_size=10, verbose=0,
                        validation_data=(held_out, None)).history
    pll_after = model.pseudo_log_likelihood(held_out)

    def mean_and_error(values):
        return values.mean(), values.std(ddof=1) / math.sqrt(len(values))

    gain, gain_error = mean_and_error(pll_after - pll_before)  # paired, per example
    assert gain > 5 * gain_error
    (f_data, e_data), (f_noise, e_noise) = (mean_and_error(model.free_energy(a))
                                            for a in (held_out, noise))
    assert f_noise - f_data > 5 * math.hypot(e_data, e_noise)
    assert len(history["pseudo_log_likelihood"]) == 15
    assert history["val_pseudo_log_likelihood"][-1] == pytest.approx(pll_after.mean())
    assert history["reconstruction_error"][-1] < history["reconstruction_error"][0]


# ----------------------------------------------------------- command line
@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                    reason="the digits dataset needs scikit-learn")
def test_cli_trains_on_digits_and_writes_its_files(tmp_path):
    code, _, err = run_main(["train", "--model", "rbm", "--dataset", "digits", "--epochs", 1,
                             "--hidden-units", 16, "--cd-k", 2, "--persistent", "--quiet",
                             "--out", tmp_path])
    assert code == 0, err
    pictures = {"filters.png", "samples.png"} if importlib.util.find_spec("matplotlib") else set()
    assert {p.name for p in tmp_path.iterdir()} == {"metrics.json", "model.safetensors",
                                                    *pictures}
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["hidden_units"], metrics["cd_k"], metrics["persistent"]) == (16, 2, True)
    assert len(metrics["history"]["pseudo_log_likelihood"]) == 1
    assert len(metrics["history"]["val_pseudo_log_likelihood"]) == 1
    assert -64 * math.log(2) * 2 < metrics["test_pseudo_log_likelihood"] < 0
    data, noise = metrics["test_free_energy"], metrics["noise_free_energy"]
    assert noise["mean"] - data["mean"] > 5 * math.hypot(data["standard_error"],
                                                         noise["standard_error"])
    model = RBM.load(tmp_path / "model.safetensors")
    assert (model.n_visible, model.n_hidden, model.n_chains) == (64, 16, 10)


def test_cli_reports_a_bad_option_in_one_line(tmp_path):
    code, _, err = run_main(["train", "--model", "rbm", "--dataset", "digits", "--cd-k", 0,
                             "--quiet", "--out", tmp_path])
    assert code == 2 and "Traceback" not in err
    assert "error: RBM: 'k' must be an int >= 1" in err and "received 0" in err


def test_binarize_keeps_half_intensity_and_refuses_other_ranges():
    images = np.array([[[0.0, 0.49], [0.5, 1.0]]], np.float32)
    assert np.array_equal(run_rbm.binarize(images, "float64"), [[0.0, 0.0, 1.0, 1.0]])
    with pytest.raises(run_rbm.UsageError,
                       match=r"values in \[0, 1\].*received values in \[-1, 1\]"):
        run_rbm.binarize(images * 2 - 1, "float32")


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, error, match", [
    ({"n_hidden": 0}, ValueError, "'n_hidden' must be an int >= 1"),
    ({"n_hidden": 2.5}, TypeError, "'n_hidden' must be an int"),
    ({"n_hidden": 3, "k": 0}, ValueError, "'k' must be an int >= 1"),
    ({"n_hidden": 3, "lr": 0.0}, ValueError, "'lr' must be a finite real number > 0"),
    ({"n_hidden": 3, "momentum": 1.0}, ValueError, "'momentum' must be .* < 1"),
    ({"n_hidden": 3, "persistent": 1}, TypeError, "'persistent' must be a bool"),
    ({"n_hidden": 3, "n_chains": 4}, ValueError, "'n_chains' is for persistent=True"),
    ({"n_hidden": 3, "dtype": "int32"}, TypeError, "'dtype' must be float32 or float64"),
])
def test_bad_constructor_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        RBM(**kwargs)


def test_bad_data_is_refused_with_the_argument_named():
    model = RBM(3, dtype="float64")
    with pytest.raises(ValueError, match="not built yet"):
        model.free_energy(bits((2, 4)))
    with pytest.raises(ValueError, match=r"'x' must be a 2-D array \(N, V\)"):
        model.fit(bits((2, 4, 4)))
    model.fit(bits((8, 4)), epochs=1, verbose=0)
    cases = [
        (lambda: model.free_energy(bits((2, 5))), ValueError, "'v' must have 4 columns"),
        (lambda: model.free_energy(bits((2, 4), np.float32)), TypeError, "dtype float64"),
        (lambda: model.free_energy(2 * bits((2, 4))), ValueError, r"values in \[0, 1\]"),
        (lambda: model.visible_probabilities(bits((2, 4))), ValueError, "'h' must have 3"),
        (lambda: model.fit(bits((8, 4)), pll="exact"), TypeError,
         r"RBM.fit: 'pll' is no longer an option of fit; give it to the model: RBM\(..., pll="),
        (lambda: RBM(3, pll="sum"), ValueError, "'pll' must be one of"),
        (lambda: model.fit(bits((8, 4)), 2), TypeError, r"RBM.fit: 'y' must be None"),
        (lambda: model.fit(bits((8, 4)), epochs=-1), ValueError, "'epochs' must be an int"),
        (lambda: model.fit(bits((0, 4))), ValueError, "'x' has no examples"),
        (lambda: model.fit(2 * bits((8, 4))), ValueError, r"RBM.fit: 'x' must hold values in"),
        (lambda: model.gibbs(bits((2, 4)), rng="seed"), TypeError, "'rng' must be"),
        (lambda: model.sample(0), ValueError, "'n' must be an int >= 1"),
        (lambda: model.forward(bits((2, 4, 1))), ValueError, r"2-D array \(N, V\)"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()


def test_a_file_that_is_not_an_rbm_is_refused(tmp_path):
    from handgrad import layers as L
    from handgrad.model import Sequential

    other = Sequential([L.Dense(2)], seed=0, input_shape=(3,))
    hio.save(other, tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="holds a Sequential, not a RBM"):
        RBM.load(tmp_path / "other.safetensors")


def test_fit_is_the_loops_history_callbacks_checkpoints_and_nan_policy(tmp_path):
    """fit returns a History; a callback gets every epoch's logs; ModelCheckpoint writes
    a file that loads; a NaN weight stops the update before it is applied."""
    from handgrad.training import Callback, ModelCheckpoint, NonFiniteLossError

    class Recorder(Callback):
        def __init__(self):
            self.logs = []

        def on_epoch_end(self, epoch, logs=None):
            self.logs.append(dict(logs))

    x, recorder = bits((20, 6), seed=5), Recorder()
    model = RBM(3, seed=0, dtype="float64")
    path = tmp_path / "rbm.safetensors"
    history = model.fit(x, epochs=3, batch_size=5, verbose=0,
                        callbacks=[recorder, ModelCheckpoint(str(path))])
    assert [logs["loss"] for logs in recorder.logs] == history.history["loss"]
    assert {"loss", "pseudo_log_likelihood", "reconstruction_error", "lr"} <= set(history.history)
    assert np.array_equal(hio.load(path).parameters["W"], model.parameters["W"])
    model.parameters["c"][0] = np.nan
    before = {key: value.copy() for key, value in model.parameters.items()}
    with pytest.raises(NonFiniteLossError, match="nan at epoch 1, step 1 of 4; its update was not"):
        model.fit(x, epochs=1, batch_size=5, verbose=0)
    for key, value in model.parameters.items():
        np.testing.assert_array_equal(value, before[key])
