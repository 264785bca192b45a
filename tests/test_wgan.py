"""WGAN-GP (handgrad.zoo.WGANGP): the critic and generator objectives against finite
differences, one step's Adam updates and the n_critic schedule, the paper's defaults, a
short run on a 2-D Gaussian, save/load and resume, and ``train --model wgan-gp``."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from cli_support import HAS_MATPLOTLIB, assert_one_line_error, run_main
from handgrad import io as hio
from handgrad import optimizers
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient
from handgrad.training import Callback, EarlyStopping, NonFiniteLossError
from handgrad.zoo import WGANGP


def small(**kwargs):
    """A tiny float64 model on 3-feature data."""
    config = {"latent_dim": 2, "hidden": (5,), "output": "linear", "seed": 0,
              "dtype": "float64", **kwargs}
    return WGANGP((3,), **config)


def copy_params(model):
    return {k: v.copy() for k, v in model.named_parameters().items()}


def changed(before, model, prefix):
    """Names under ``prefix`` whose parameter differs from ``before``."""
    return {k for k, v in model.named_parameters().items()
            if k.startswith(prefix) and not np.array_equal(v, before[k])}


# ------------------------------------------------------------ objectives and their gradients


def test_the_critic_objective_gradient_matches_finite_differences():
    model = small(gp_weight=3.0)
    rng = np.random.default_rng(1)
    real, fake = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    eps = rng.random((6, 1))
    logs = model.critic_objective(real, fake, eps)
    analytic = {k: g.copy() for k, g in model.critic.named_gradients().items()}
    assert logs["gradient_penalty"] > 0  # the penalty's gradient is part of what is checked
    assert logs["critic_loss"] == pytest.approx(logs["gradient_penalty"] - logs["wasserstein"])

    def loss():
        return model.critic_objective(real, fake, eps)["critic_loss"]

    for name, param in model.critic.named_parameters().items():
        numeric, error = numeric_gradient(loss, param, with_error=True)
        assert_gradient_close(analytic[name], numeric, error, what=name)


def test_the_generator_objective_gradient_matches_finite_differences():
    model = small()
    z = np.random.default_rng(2).standard_normal((6, 2))
    value = model.generator_objective(z)
    analytic = {k: g.copy() for k, g in model.generator.named_gradients().items()}
    assert value == pytest.approx(-model.critic.predict(model.generator.predict(z)).mean())

    def loss():
        return model.generator_objective(z)

    for name, param in model.generator.named_parameters().items():
        numeric, error = numeric_gradient(loss, param, with_error=True)
        assert_gradient_close(analytic[name], numeric, error, what=name)


# ------------------------------------------------------------- steps, schedule, defaults


def test_the_paper_adam_settings_and_schedule_are_the_defaults():
    defaults = {k: p.default for k, p in inspect.signature(WGANGP).parameters.items()}
    assert (defaults["n_critic"], defaults["gp_weight"]) == (5, 10.0)
    assert (defaults["lr"], defaults["betas"]) == (1e-4, (0.5, 0.9))
    model = WGANGP((4,), seed=0)
    assert type(model.optimizer) is optimizers.Adam
    assert model.optimizer.lr == 1e-4 and model.optimizer.betas == (0.5, 0.9)
    assert model.n_critic == 5 and model.gp_weight == 10.0


def test_a_step_updates_the_critic_by_adam_and_the_generator_every_n_critic_steps():
    model, twin = small(n_critic=3, lr=1e-3), small(n_critic=3, lr=1e-3)
    x = np.random.default_rng(3).standard_normal((8, 3))
    before = copy_params(model)
    twin.critic_objective(x, *twin.draw(8))  # the same noise as the model's first step
    grads = {k: g.copy() for k, g in twin.named_gradients().items() if k.startswith("critic.")}
    model.train_step(x)
    assert changed(before, model, "generator.") == set()
    for name, g in grads.items():  # Adam's first step: -lr g / (|g| + eps)
        delta = model.named_parameters()[name] - before[name]
        assert_close(delta, -1e-3 * g / (np.abs(g) + 1e-8), dtype=np.float64, terms=4,
                     scale=np.abs(before[name]).max() + 1e-3, what=name)
    model.train_step(x)
    assert changed(before, model, "generator.") == set() and model.critic_steps == 2
    model.train_step(x)  # the third critic step is followed by a generator step
    generator = {k for k in before if k.startswith("generator.")}
    assert changed(before, model, "generator.") == generator and model.critic_steps == 0
    steps = model.optimizer.state["step"]
    assert {steps[k] for k in before if k.startswith("critic.")} == {3}
    assert {steps[k] for k in generator} == {1}


def test_a_nan_critic_loss_stops_fit_before_the_update():
    model = small()
    x = np.random.default_rng(4).standard_normal((8, 3))
    x[0, 0] = np.nan
    before = copy_params(model)
    with pytest.raises(NonFiniteLossError, match=r"loss is nan.*update was not applied"):
        model.fit(x, epochs=1, batch_size=8, verbose=0)
    assert changed(before, model, "") == set()


class EpochLogs(Callback):
    def __init__(self):
        self.logs = []

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append((epoch, dict(logs)))


def test_fit_is_the_loops_with_callbacks_validation_and_early_stopping():
    """A callback gets every epoch's logs; validation runs test_step, which updates
    nothing and leaves the model's noise alone; EarlyStopping monitors any key."""
    model, x = small(), np.random.default_rng(4).standard_normal((12, 3))
    recorder = EpochLogs()
    history = model.fit(x, epochs=2, batch_size=4, rng=0, verbose=0, callbacks=[recorder],
                        validation_data=(x[:4], None))
    assert [epoch for epoch, _ in recorder.logs] == [0, 1]
    assert [logs["val_wasserstein"] for _, logs in recorder.logs] == history["val_wasserstein"]
    before, noise = copy_params(model), model.noise.bit_generator.state
    first = model.evaluate(x[:4], None, return_dict=True)
    assert model.evaluate(x[:4], None, return_dict=True) == first
    assert changed(before, model, "") == set() and model.noise.bit_generator.state == noise
    stop = EarlyStopping(monitor="critic_loss", patience=0, min_delta=1e9)
    assert len(model.fit(x, epochs=4, batch_size=4, verbose=0, callbacks=[stop]).epoch) == 2


def test_fit_takes_no_targets_and_names_the_keyword_spelling():
    with pytest.raises(TypeError, match=r"WGANGP.fit: 'y' must be None .*fit\(x, epochs=10\)"):
        small().fit(np.zeros((4, 3)), 2)


# --------------------------------------------------------------- it learns a distribution


def sliced_w1(a, b, projections=16):
    """Mean over random directions of the 1-D Wasserstein-1 distance of the projections
    (equal sample sizes: the mean gap of the sorted values)."""
    directions = np.random.default_rng(0).standard_normal((a.shape[1], projections))
    directions /= np.linalg.norm(directions, axis=0)
    return float(np.abs(np.sort(a @ directions, 0) - np.sort(b @ directions, 0)).mean())


def test_training_on_a_2d_gaussian_moves_the_samples_to_the_data():
    rng = np.random.default_rng(0)
    center, std = np.array([2.0, -1.0]), 0.3

    def data(n):
        return center + std * rng.standard_normal((n, 2))

    model = WGANGP((2,), latent_dim=2, hidden=(32, 32), lr=1e-3, output="linear", seed=0,
                   dtype="float64")
    reference = data(4000)
    floor = sliced_w1(data(4000), reference)  # two samples of the data itself
    start = sliced_w1(model.sample(4000, rng=1), reference)
    history = model.fit(data(512), epochs=120, batch_size=64, rng=0, verbose=0)
    end = sliced_w1(model.sample(4000, rng=1), reference)
    # The estimate's own sampling noise (the floor, ~0.01) is far below the margin: the
    # generator starts near the origin, ~1.2 away, and must close more than half of it
    # (seeds 0-7 all end below 0.3 of the start).
    assert floor < 0.05 and start > 1.0
    assert end < 0.5 * start
    assert len(history["wasserstein"]) == 120
    assert all(np.isfinite(history[key]).all() for key in ("critic_loss", "wasserstein",
                                                           "gradient_penalty"))


# -------------------------------------------------------------------------- save and load


def test_save_and_load_round_trip_and_resume_exactly(tmp_path):
    model = small(n_critic=2, lr=1e-3)
    x = np.random.default_rng(5).standard_normal((16, 3))
    model.fit(x, epochs=1, batch_size=5, rng=0, verbose=0)  # 4 steps: mid-schedule noise
    model.train_step(x[:4])
    path = tmp_path / "wgan.safetensors"
    model.save(path)
    loaded = hio.load(path)
    assert type(loaded) is WGANGP and loaded.get_config() == model.get_config()
    for name, value in model.named_parameters().items():
        np.testing.assert_array_equal(loaded.named_parameters()[name], value)
    np.testing.assert_array_equal(loaded.sample(7, rng=3), model.sample(7, rng=3))
    resumed = WGANGP.load(path)  # with Adam's state, the noise and the critic-step count
    assert resumed.critic_steps == model.critic_steps == 1
    for twin in (model, resumed):
        twin.fit(x, epochs=1, batch_size=5, rng=1, verbose=0)
    for name, value in model.named_parameters().items():
        np.testing.assert_array_equal(resumed.named_parameters()[name], value)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"data_shape": 3}, TypeError, "'data_shape'"),
    ({"data_shape": (3, 0)}, ValueError, "'data_shape'"),
    ({"data_shape": (3,), "hidden": (0,)}, ValueError, "'hidden'"),
    ({"data_shape": (3,), "hidden": 8}, TypeError, "'hidden'"),
    ({"data_shape": (3,), "seed": -1}, ValueError, "'seed'"),
    ({"data_shape": (3,), "n_critic": 0}, ValueError, "'n_critic'"),
    ({"data_shape": (3,), "gp_weight": -1.0}, ValueError, "'gp_weight'"),
    ({"data_shape": (3,), "output": "relu"}, ValueError, "'output'"),
    ({"data_shape": (3,), "betas": (0.5, 1.0)}, ValueError, "betas[1]"),
])
def test_bad_settings_raise_naming_the_argument(kwargs, error, fragment):
    with pytest.raises(error, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        WGANGP(**kwargs)


def test_bad_data_raises_naming_the_argument_and_the_fix():
    model = WGANGP((3,), hidden=(4,), seed=0)
    with pytest.raises(ValueError, match=r"must lie in \[-1, 1\].*received values in \[0, 5\]"):
        model.fit(np.float32([[0, 1, 5]]), verbose=0)
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        model.fit(np.zeros((4, 2), np.float32), verbose=0)
    with pytest.raises(TypeError, match="astype"):
        model.fit(np.zeros((4, 3)), verbose=0)
    with pytest.raises(ValueError, match="'n'"):
        model.sample(0)


# -------------------------------------------------------------------------- command line


def test_train_wgan_gp_on_digits_writes_samples_model_and_metrics(tmp_path):
    out = tmp_path / "run"
    code, stdout, err = run_main(["train", "--model", "wgan-gp", "--dataset", "digits",
                                  "--epochs", 1, "--batch-size", 720, "--n-critic", 2,
                                  "--gp-weight", 5, "--latent-dim", 8, "--out", out])
    assert code == 0, err
    assert "epoch 1/1: critic loss" in stdout and "wasserstein" in stdout
    assert (out / "samples.png").is_file() == HAS_MATPLOTLIB
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("critic_loss", "wasserstein", "gradient_penalty", "generator_loss"):
        assert len(metrics["history"][key]) == 1 and np.isfinite(metrics["history"][key][0])
    settings = metrics["settings"]
    assert (settings["n_critic"], settings["gp_weight"], settings["latent_dim"]) == (2, 5, 8)
    assert (settings["lr"], settings["betas"]) == (1e-4, [0.5, 0.9])
    model = hio.load(out / "model.safetensors")
    assert type(model) is WGANGP and model.data_shape == (8, 8, 1)
    assert model.sample(4, rng=0).shape == (4, 8, 8, 1)


@pytest.mark.parametrize("option, fragment", [
    (["--n-critic", 0], "--n-critic"),
    (["--gp-weight", -1], "--gp-weight"),
    (["--gp-weight", "nan"], "--gp-weight"),
    (["--latent-dim", 0], "--latent-dim"),
    (["--dataset", "planted"], "text corpus"),
])
def test_bad_options_fail_in_one_line(tmp_path, option, fragment):
    code, stdout, err = run_main(["train", "--model", "wgan-gp", "--quiet", "--out",
                                  tmp_path / "run", *option])
    assert_one_line_error(code, stdout, err, fragment, status=2)
