"""The TensorBoard callback: its event files read back with TensorBoard's own reader
(EventAccumulator) against History, the parameters and the pictures."""

from __future__ import annotations

import io as stdio
import sys

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.training import TensorBoard
from handgrad.zoo import RBM, VAE, WGANGP

pytest.importorskip("tensorboard")
import itertools

from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)
from tensorboard.util import tensor_util

KEEP_ALL = {"tensors": 0, "histograms": 0, "images": 0, "scalars": 0}


def read(log_dir, run="train"):
    accumulator = EventAccumulator(str(log_dir / run), size_guidance=KEEP_ALL)
    accumulator.Reload()
    return accumulator


def scalars(accumulator, tag):
    """``[(step, value)]`` of a scalar tag, values as written (float64)."""
    return [(e.step, tensor_util.make_ndarray(e.tensor_proto).item())
            for e in accumulator.Tensors(tag)]


def data(n=40, features=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, features)).astype(np.float32),
            rng.integers(0, classes, n))


def mlp(seed=0):
    net = Sequential([L.Dense(5), L.ReLU(), L.Dense(3)], seed=seed, input_shape=(6,))
    return net.compile("adam", "cross_entropy")


def test_epoch_and_batch_scalars_equal_history(tmp_path):
    x, y = data()
    board = TensorBoard(tmp_path, histogram_freq=0, update_freq=2)
    history = mlp().fit(x, y, epochs=3, batch_size=8, validation_split=0.2,
                        callbacks=[board], verbose=0)
    train, validation = read(tmp_path), read(tmp_path, "validation")
    for key, values in history.history.items():
        run, tag = (validation, key[4:]) if key.startswith("val_") else (train, key)
        assert scalars(run, f"epoch_{tag}") == list(enumerate(values)), key
    assert {"epoch_lr", "epoch_seconds", "epoch_val_loss"} - set(train.Tags()["tensors"]) \
        == {"epoch_val_loss"}  # val_* live in the validation run
    speeds = [value for _, value in scalars(train, "epoch_examples_per_second")]
    assert len(speeds) == 3 and all(s > 0 for s in speeds)
    # 32 training examples in batches of 8: 4 steps an epoch, 12 in all, every 2nd logged
    assert [step for step, _ in scalars(train, "batch_loss")] == [2, 4, 6, 8, 10, 12]
    assert not train.Tags()["histograms"]  # histogram_freq=0


def test_histograms_count_every_parameter_gradient_and_output(tmp_path):
    x, y = data()
    net = mlp()
    fixed = x[:7]
    board = TensorBoard(tmp_path, histogram_freq=2, batch=fixed)
    net.fit(x, y, epochs=3, batch_size=8, callbacks=[board], verbose=0)
    train = read(tmp_path)
    for key, value in net.named_parameters().items():
        for kind in ("parameters", "gradients"):
            events = train.Histograms(f"{kind}/{key}")
            assert [e.step for e in events] == [0, 2]  # epochs 0, 2: every 2nd
            assert all(e.histogram_value.num == value.size for e in events)
            assert all(sum(e.histogram_value.bucket) == value.size for e in events)
    final = train.Histograms(f"parameters/{next(iter(net.named_parameters()))}")[-1]
    first = next(iter(net.named_parameters().values()))
    assert final.histogram_value.min == first.min() and final.histogram_value.max == first.max()
    for path, width in {"dense_0": 5, "relu_1": 5, "dense_2": 3}.items():
        assert train.Histograms(f"outputs/{path}")[-1].histogram_value.num == len(fixed) * width
    assert set(train.Tags()["tensors"]) >= {f"gradient_norm/{p}" for p in ("dense_0", "dense_2")}


def test_outputs_default_to_the_first_validation_batch(tmp_path):
    x, y = data(n=100)
    net = mlp()
    net.fit(x, y, epochs=1, batch_size=8, validation_split=0.2,
            callbacks=[board := TensorBoard(tmp_path)], verbose=0)
    assert np.array_equal(board.fixed_batch(), x[80:100])  # the held-out 20, one batch
    assert read(tmp_path).Histograms("outputs/dense_2")[0].histogram_value.num == 20 * 3


def test_gradient_norms_vanish_through_ten_sigmoid_layers(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = rng.integers(0, 4, 64)
    stack = [layer for _ in range(10) for layer in (L.Dense(16), L.Sigmoid())]
    net = Sequential([*stack, L.Dense(4)], seed=0, input_shape=(16,))
    net.compile("sgd", "cross_entropy")
    net.fit(x, y, epochs=1, batch_size=64, callbacks=[TensorBoard(tmp_path)], verbose=0)
    train = read(tmp_path)
    dense = [path for path, layer in net.walk() if isinstance(layer, L.Dense)]
    norms = [scalars(train, f"gradient_norm/{path}")[0][1] for path in dense]
    assert all(later > earlier for earlier, later in itertools.pairwise(norms)), norms
    assert norms[-1] / norms[0] > 1e6, norms  # six orders of magnitude, last to first


def png_pixels(encoded):
    image = pytest.importorskip("PIL.Image")
    return np.asarray(image.open(stdio.BytesIO(encoded)))


def test_first_convolution_filters_as_an_image(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 6, 6, 1)).astype(np.float32)
    net = Sequential([L.Conv2D(5, 3), L.ReLU(), L.Conv2D(2, 3), L.Flatten(), L.Dense(2)],
                     seed=0, input_shape=(6, 6, 1))
    net.compile("adam", "cross_entropy")
    net.fit(x, rng.integers(0, 2, 16), epochs=1, batch_size=8,
            callbacks=[TensorBoard(tmp_path, write_images=True)], verbose=0)
    (tag,) = read(tmp_path).Tags()["images"]
    assert tag == "filters/conv2d_0"
    image = read(tmp_path).Images(tag)[0]
    # five 3x3 filters, 3 to a row (ceil(sqrt(5))), a pixel between: 2 rows
    assert (image.height, image.width) == (2 * 3 + 1, 3 * 3 + 2)
    pixels = png_pixels(image.encoded_image_string)
    assert pixels.shape == (7, 11)
    kernel = net.layers[0].parameters["W"].astype(np.float64)
    scaled = np.round((0.5 + kernel / (2 * np.abs(kernel).max())) * 255)
    assert np.array_equal(pixels[4:7, 4:7], scaled[:, :, 0, 4])  # the fifth filter
    assert np.array_equal(pixels[3, :], np.zeros(11))  # the gap between the rows


def test_vae_writes_reconstructions_and_samples(tmp_path):
    rng = np.random.default_rng(0)
    x = (rng.random((24, 4, 4, 1)) < 0.5).astype(np.float32)
    vae = VAE(latent_dim=2, hidden=(8,), seed=0, input_shape=(4, 4, 1))
    board = TensorBoard(tmp_path, write_images=True, batch=x[:10])
    history = vae.fit(x, epochs=1, batch_size=8, callbacks=[board], verbose=0)
    train = read(tmp_path)
    assert scalars(train, "epoch_kl") == [(0, history["kl"][0])]
    recon = train.Images("reconstructions")[0]
    # 8 examples over their reconstructions: 2 rows of 8 4x4 tiles
    assert (recon.height, recon.width) == (2 * 4 + 1, 8 * 4 + 7)
    pixels = png_pixels(recon.encoded_image_string)
    assert np.array_equal(pixels[:4, :4], x[0, :, :, 0] * 255)
    assert np.array_equal(pixels[5:, :4], np.round(vae.reconstruct(x[:1])[0, :, :, 0] * 255))
    assert (train.Images("samples")[0].height, train.Images("samples")[0].width) == (19, 19)
    assert train.Histograms("outputs/decoder.logits")[0].histogram_value.num == 10 * 16


def test_wgan_samples_and_rbm_without_gradients(tmp_path):
    rng = np.random.default_rng(0)
    real = rng.uniform(-1, 1, (16, 9)).astype(np.float32)
    gan = WGANGP((9,), latent_dim=2, hidden=(4,), n_critic=1, seed=0)
    gan.fit(real, epochs=1, batch_size=8, verbose=0,
            callbacks=[TensorBoard(tmp_path / "gan", write_images=True)])
    train = read(tmp_path / "gan")
    assert train.Images("samples")[0].width == 4 * 3 + 3  # 16 3x3 samples, 4 to a row
    assert "gradients/critic.dense_0.W" in train.Tags()["histograms"]
    assert "outputs/critic.dense_0" in train.Tags()["histograms"]  # from G's batch of z
    bits = (rng.random((16, 9)) < 0.5).astype(np.float32)
    rbm = RBM(3, seed=0)
    rbm.fit(bits, epochs=1, batch_size=8, verbose=0,
            callbacks=[TensorBoard(tmp_path / "rbm", write_images=True)])
    train = read(tmp_path / "rbm")
    assert train.Images("samples")[0].width == 4 * 3 + 3
    assert sorted(train.Tags()["histograms"]) == ["parameters/W", "parameters/b",
                                                  "parameters/c"]  # no gradients kept


def test_fits_continue_the_files_and_close_them(tmp_path):
    x, y = data()
    net, board = mlp(), TensorBoard(tmp_path, histogram_freq=0, update_freq="batch")
    net.fit(x, y, epochs=1, batch_size=20, callbacks=[board], verbose=0)
    net.fit(x, y, epochs=2, initial_epoch=1, batch_size=20, callbacks=[board], verbose=0)
    assert board._writers == {}  # closed by on_train_end
    train = read(tmp_path)
    assert [step for step, _ in scalars(train, "epoch_loss")] == [0, 1]
    assert [step for step, _ in scalars(train, "batch_loss")] == [1, 2, 3, 4]


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"log_dir": 3}, TypeError, "'log_dir' must be a non-empty str or path; received 3 \\(int\\)"),
    ({"histogram_freq": -1}, ValueError, "'histogram_freq' must be an int >= 0"),
    ({"histogram_freq": 1.5}, ValueError, "'histogram_freq' must be an int >= 0"),
    ({"update_freq": "step"}, ValueError, "'update_freq' must be 'epoch', 'batch' or an int"),
    ({"update_freq": 0}, ValueError, "'update_freq' must be 'epoch', 'batch' or an int"),
    ({"update_freq": True}, ValueError, "'update_freq' must be 'epoch', 'batch' or an int"),
    ({"write_images": 1}, TypeError, "'write_images' must be a bool"),
    ({"write_images": True, "histogram_freq": 0}, ValueError, "histogram_freq >= 1"),
])
def test_bad_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        TensorBoard(**{"log_dir": tmp_path, **kwargs})


def test_without_the_package_the_error_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    with pytest.raises(ImportError, match=r'pip install "handgrad\[tensorboard\]"'):
        TensorBoard(tmp_path)


def test_only_rank_zero_writes(tmp_path, monkeypatch):
    from handgrad.training import History, parallel

    board, history = TensorBoard(tmp_path), History()
    monkeypatch.setattr(parallel.dist, "rank", lambda: 1)
    assert parallel.wiring(mlp(), None, [history, board], 1)["callbacks"] == [history]
    monkeypatch.setattr(parallel.dist, "rank", lambda: 0)
    assert parallel.wiring(mlp(), None, [history, board], 1)["callbacks"] == [history, board]


@pytest.mark.parametrize("validation", [0.0, 0.2])
def test_gradient_histograms_are_the_last_training_steps(tmp_path, validation):
    """Taken once an epoch (before validation, or at its end), not copied every step:
    the histogram is the gradient the last training step left."""
    x, y = data()
    net = mlp()
    net.fit(x, y, epochs=2, batch_size=8, validation_split=validation,
            callbacks=[TensorBoard(tmp_path)], verbose=0)
    train = read(tmp_path)
    for key, grad in net.named_gradients(trainable_only=True).items():
        histograms = train.Histograms(f"gradients/{key}")
        assert len(histograms) == 2  # one per epoch
        last = histograms[-1].histogram_value
        assert (last.min, last.max) == (grad.min(), grad.max())


def test_a_host_batch_reaches_a_model_on_the_device(tmp_path, numpy_as_cupy):
    from handgrad._device import to_device

    x, y = data()
    net = mlp().to("cuda")
    board = TensorBoard(tmp_path, batch=x[:5])  # a host array
    net.fit(to_device(x, "cuda"), to_device(y, "cuda"), epochs=1, batch_size=8,
            callbacks=[board], verbose=0)
    assert read(tmp_path).Histograms("outputs/dense_2")[0].histogram_value.num == 5 * 3
