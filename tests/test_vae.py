"""The Bernoulli VAE (handgrad.zoo.VAE) and ``train --model vae``: the loss gradient
against finite differences, the documented estimator, training, files, the CLI, errors."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from cli_support import run_main
from handgrad import io as hio
from handgrad import ops
from handgrad.optimizers import Adam
from handgrad.testing import assert_close, assert_gradient_close, gradcheck, numeric_gradient
from handgrad.training import Callback, EarlyStopping, ModelCheckpoint, NonFiniteLossError
from handgrad.zoo import VAE

SHAPE = (2, 3, 1)


def _tiny(dtype="float64", seed=1, latent_dim=3):
    return VAE(latent_dim, (5,), input_shape=SHAPE, dtype=dtype, seed=seed)


def _pixels(n, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).random((n, *SHAPE)).astype(dtype)


# ------------------------------------------------------------------ gradients
def test_loss_gradient_matches_finite_differences():
    """d(mean negative ELBO)/d(every parameter) at a fixed eps, float64."""
    vae, x = _tiny(), _pixels(4)
    eps = np.random.default_rng(2).standard_normal((4, vae.latent_dim))
    vae.zero_grad()
    logs = vae.loss_and_gradients(x, eps)
    assert logs == vae.loss(x, eps)  # the same forward, with and without caches
    assert logs["loss"] == pytest.approx(logs["reconstruction"] + logs["kl"], rel=1e-15)
    grads = vae.named_gradients()
    assert len(grads) == 8
    for name, param in vae.named_parameters().items():
        numeric, error = numeric_gradient(lambda: vae.loss(x, eps)["loss"], param,
                                          with_error=True)
        assert_gradient_close(grads[name], numeric, error, what=name)


def test_the_deterministic_forward_passes_gradcheck():
    """forward(x) = decoder(mu(x)) logits, backward through both networks."""
    result = gradcheck(_tiny(), _pixels(3), rng=0)
    assert result.passed, result.errors


def test_negative_elbo_is_the_single_sample_estimate_it_documents():
    """Per example: KL in closed form + the Bernoulli NLL at z = mu + s * eps, eps the
    standard normal draws of default_rng(seed) in the model's dtype, averaged."""
    vae, x = _tiny(), _pixels(7)
    eps = np.random.default_rng(0).standard_normal((2, 7, 3))
    mu, log_var = vae.encode(x)
    per_draw = []
    for draw in eps:
        z, _ = ops.reparameterize(mu, log_var, draw)
        nll, _ = ops.bernoulli_nll_logits(vae.decoder.forward(z, training=False), x)
        per_draw.append(nll + ops.gaussian_kl(mu, log_var)[0])
    assert_close(vae.negative_elbo(x, batch_size=3), per_draw[0].mean(), terms=24,
                 scale=np.abs(per_draw[0]).max())
    assert_close(vae.negative_elbo(x, samples=2), np.mean(per_draw), terms=48,
                 scale=np.abs(per_draw).max())
    assert vae.negative_elbo(x, rng=5) != vae.negative_elbo(x)


# ------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    from handgrad.data import load_digits

    return load_digits()


def _per_example(vae, x):
    """The single-sample negative ELBO of each example (seed 0)."""
    eps = np.random.default_rng(0).standard_normal((1, len(x), vae.latent_dim),
                                                   dtype=vae.dtype)[0]
    mu, log_var = vae.encode(x)
    z, _ = ops.reparameterize(mu, log_var, eps)
    nll, _ = ops.bernoulli_nll_logits(vae.decoder.forward(z, training=False), x)
    return nll + ops.gaussian_kl(mu, log_var)[0]


def test_a_short_training_lowers_the_test_negative_elbo(digits):
    """After 4 epochs on 400 digits, the test examples' negative ELBO is lower than at the
    start by more than 5 standard errors of the paired per-example differences."""
    vae = VAE(4, (32,), seed=0, input_shape=(8, 8, 1))
    x_test = digits.x_test[:150]
    before = _per_example(vae, x_test)
    vae.compile(Adam(lr=3e-3), loss=None)
    history = vae.fit(digits.x_train[:400], epochs=4, batch_size=32, rng=0,
                      verbose=0, validation_data=(x_test, None))
    after = _per_example(vae, x_test)
    drop = before - after
    assert drop.mean() > 5 * drop.std(ddof=1) / np.sqrt(len(drop)), (before.mean(),
                                                                      after.mean())
    assert_close(history.history["val_loss"][-1], after.mean(), dtype=np.float32,
                 terms=64, scale=np.abs(after).max())
    assert set(history.history) == {"loss", "reconstruction", "kl", "val_loss",
                                    "val_reconstruction", "val_kl", "lr", "seconds"}


def _trained_with_a_nan_bias():
    """A VAE after one epoch, with a NaN decoder bias, and a copy of its parameters."""
    vae = _tiny()
    vae.fit(_pixels(8), epochs=1, batch_size=8, rng=0, verbose=0)
    vae.decoder["logits"].parameters["b"][0] = np.nan
    return vae, copy.deepcopy(vae.named_parameters())


def test_a_nonfinite_loss_stops_before_the_update():
    vae, before = _trained_with_a_nan_bias()
    with pytest.raises(NonFiniteLossError, match="the update was not applied"):
        vae.train_step(_pixels(8))
    for name, value in vae.named_parameters().items():
        np.testing.assert_array_equal(value, before[name])


class Recorder(Callback):
    def __init__(self):
        self.epochs, self.batches = [], 0

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, dict(logs)))

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def test_fit_is_the_loops_with_callbacks_early_stopping_and_checkpoints(tmp_path):
    """fit(x, epochs=..., callbacks=...) returns a History; a callback sees every epoch's
    logs and batch; EarlyStopping on val_loss and ModelCheckpoint work as for any model."""
    vae, x = _tiny(), _pixels(24)
    recorder, path = Recorder(), tmp_path / "best.safetensors"
    history = vae.fit(x, epochs=3, batch_size=8, rng=0, verbose=0,
                      validation_data=(x[:8], None),
                      callbacks=[recorder, ModelCheckpoint(str(path), save_best_only=True)])
    assert [epoch for epoch, _ in recorder.epochs] == [0, 1, 2] and recorder.batches == 9
    assert [logs["val_loss"] for _, logs in recorder.epochs] == history.history["val_loss"]
    assert hio.load(path).optimizer.iterations == 3 * history.history["val_loss"].index(
        min(history.history["val_loss"])) + 3
    stop = EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    assert len(vae.fit(x, epochs=5, batch_size=8, verbose=0, callbacks=[stop]).epoch) == 2


def test_fit_applies_the_nonfinite_policy_before_the_update():
    vae, before = _trained_with_a_nan_bias()
    with pytest.raises(NonFiniteLossError, match="at epoch 1, step 1 of 1; its update was not"):
        vae.fit(_pixels(8), epochs=1, batch_size=8, verbose=0)
    history = vae.fit(_pixels(8), epochs=2, batch_size=8, verbose=0, on_nonfinite="stop")
    assert len(history.epoch) == 1 and np.isnan(history["loss"][0])
    for name, value in vae.named_parameters().items():
        np.testing.assert_array_equal(value, before[name])


# ---------------------------------------------------------------------- files
def test_save_and_load_round_trip_exactly(tmp_path):
    vae, x = _tiny("float32"), _pixels(16, np.float32)
    vae.fit(x, epochs=2, batch_size=8, rng=0, verbose=0)
    path = tmp_path / "vae.safetensors"
    vae.save(path)
    same = hio.load(path)
    assert isinstance(same, VAE) and same.get_config() == vae.get_config()
    for name, value in vae.named_parameters().items():
        np.testing.assert_array_equal(same.named_parameters()[name], value)
    assert same.negative_elbo(x) == vae.negative_elbo(x)
    np.testing.assert_array_equal(same.sample(5, rng=3), vae.sample(5, rng=3))
    resumed = VAE.load(path)  # with the optimizer state and the noise generator
    assert resumed.optimizer.iterations == vae.optimizer.iterations == 4
    resumed.train_step(x[:8])
    vae.train_step(x[:8])
    for name, value in vae.named_parameters().items():
        np.testing.assert_array_equal(resumed.named_parameters()[name], value)


def test_vae_load_refuses_another_model(tmp_path):
    from handgrad import layers as L
    from handgrad.model import Sequential

    path = tmp_path / "dense.safetensors"
    hio.save(Sequential([L.Dense(2)], input_shape=(3,)), path)
    with pytest.raises(ValueError, match=r"VAE.load: .* holds a Sequential, not a VAE"):
        VAE.load(path)


# ------------------------------------------------------------------------ CLI
def test_cli_trains_and_writes_the_run_files(tmp_path, digits):
    out = tmp_path / "run"
    code, _, stderr = run_main(["train", "--model", "vae", "--dataset", "digits",
                                     "--epochs", 1, "--batch-size", 128, "--out", out,
                                     "--quiet", "--latent-dim", 2])
    assert code == 0, stderr
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "metrics.json",
                                               "reconstructions.png", "samples.png",
                                               "latent.png"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["latent_dim"] == 2 and metrics["epochs"] == 1
    assert len(metrics["history"]["loss"]) == len(metrics["history"]["val_loss"]) == 1
    model = VAE.load(out / "model.safetensors")
    x_test = digits.x_test  # digits are in [0, 1] already: the runner leaves them be
    with threadpool_limits(limits=1, user_api="blas"):  # as the run (--blas-threads 1)
        expected = model.negative_elbo(x_test)
    assert metrics["test_negative_elbo"] == pytest.approx(expected, rel=1e-12)
    assert 10 < metrics["test_negative_elbo"] < 64 * np.log(2) + 5


def test_the_latent_picture_is_drawn_only_for_a_2d_latent_space(tmp_path):
    pytest.importorskip("matplotlib")
    from handgrad.cli.run_vae import _pictures

    vae = _tiny("float32")
    x, labels = _pixels(12, np.float32), np.arange(12) % 3
    assert [p.rsplit("/", 1)[-1] for p in _pictures(vae, x, labels, str(tmp_path), 0, True)
            ] == ["reconstructions.png", "samples.png"]


def test_cli_scales_other_inputs_to_unit_range():
    from handgrad.cli.run_vae import scale_to_unit

    train = np.array([[2.0, 4.0], [6.0, 10.0]])
    scaled, test, extremes = scale_to_unit(train, np.array([[0.0, 6.0]]))
    np.testing.assert_array_equal(scaled, [[0.0, 0.25], [0.5, 1.0]])
    np.testing.assert_array_equal(test, [[0.0, 0.5]])  # clipped into [0, 1]
    assert extremes == (2.0, 10.0)
    with pytest.raises(ValueError, match="the training inputs are constant"):
        scale_to_unit(np.ones((2, 2)), np.ones((1, 2)))


# --------------------------------------------------------------------- errors
BAD = [
    (lambda v: VAE(latent_dim=0), ValueError, r"VAE: 'latent_dim' must be an int >= 1"),
    (lambda v: VAE(hidden=(4, 0)), ValueError, r"VAE: 'hidden' must be a tuple of ints >= 1"),
    (lambda v: v.fit(_pixels(4) * 16), ValueError,
     r"VAE.fit: 'x' must hold pixel values in \[0, 1\] .*received values from 0.* to 1[0-9]"),
    (lambda v: v.fit(_pixels(4, np.float32)), TypeError,
     r"VAE.fit: 'x' has dtype float32 but the model's parameters are float64"),
    (lambda v: v.fit(np.zeros((4, 6))), ValueError,
     r"VAE.fit: 'x' must hold examples of shape \(2, 3, 1\)"),
    (lambda v: v.fit(_pixels(4), lr=1e-2), TypeError,
     r"VAE.fit: 'lr' is no longer an option of fit; compile the optimizer: vae.compile"),
    (lambda v: v.fit(_pixels(4), 3), TypeError, r"VAE.fit: 'y' must be None .*fit\(x, epochs"),
    (lambda v: v.fit(_pixels(4), validation_data=(_pixels(2) + 2, None)), ValueError,
     r"VAE.fit: 'validation_data': 'x_val' must hold pixel values in \[0, 1\]"),
    (lambda v: v.loss(_pixels(4), np.zeros((4, 2))), ValueError,
     r"VAE.loss: 'eps' must be standard normal noise of shape \(4, 3\)"),
    (lambda v: v.decode(np.zeros((2, 4))), ValueError, r"VAE.decode: 'z' must have 3 columns"),
    (lambda v: v.sample(2, None), TypeError, r"VAE.sample: 'rng' must be a numpy.random"),
    (lambda v: v.evaluate(_pixels(0)), ValueError, r"VAE.evaluate: 'x' has no examples"),
    (lambda v: VAE().decode(np.zeros((1, 16))), RuntimeError, r"VAE.decode: .* not built"),
]


@pytest.mark.parametrize("call, error, message", BAD)
def test_bad_input_is_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call(_tiny())
