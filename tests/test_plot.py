"""``handgrad.plot``: every figure renders to a non-blank PNG without pyplot, and shows
the numbers it claims to show."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.inspect import plots as plot
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training.callbacks import GradientNormLogger

pytest.importorskip("matplotlib")


@pytest.fixture(autouse=True)
def no_pyplot():
    """The figures are built without pyplot (no backend switch, no global figures)."""
    loaded = "matplotlib.pyplot" in sys.modules
    yield
    assert loaded or "matplotlib.pyplot" not in sys.modules


def save(figure, tmp_path, name="figure.png"):
    """Render with Agg to a PNG, read it back and check it is not blank."""
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    assert isinstance(figure, Figure)
    path = tmp_path / name
    figure.savefig(path, dpi=60)
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert not np.all(pixels == pixels[0, 0])
    return path


def cnn_2d(seed=0):
    return Sequential([L.Conv2D(4, 3, padding=1, name="c1"), L.ReLU(),
                       Sequential([L.Conv2D(3, 3, name="c2")], name="inner"),
                       L.GlobalAvgPool2D(), L.Dense(3)], input_shape=(6, 6, 2), seed=seed)


def cnn_1d(seed=0):
    return Sequential([L.Conv1D(5, 3, name="c1"), L.Tanh(), L.Conv1D(2, 3, name="c2"),
                       L.Flatten(), L.Dense(3)], input_shape=(12, 3), seed=seed)


def images(ax):
    return [np.ma.getdata(image.get_array()) for image in ax.images]


def test_training_curves(tmp_path):
    history = {"loss": [1.0, 0.6, 0.4], "val_loss": [1.1, 0.8, 0.7],
               "accuracy": [0.3, 0.6, 0.8], "lr": [0.1, 0.1, 0.1]}
    figure = plot.training_curves(history)
    assert len(figure.axes) == 2
    np.testing.assert_array_equal(figure.axes[0].lines[1].get_ydata(), history["val_loss"])
    save(figure, tmp_path)


def test_filters_2d_mosaic_holds_each_kernel(tmp_path):
    model = cnn_2d()
    figure = plot.filters(model)
    (mosaic,) = images(figure.axes[0])
    w = model["c1"].parameters["W"]  # (3, 3, 2, 4): 8 (out, in) kernels in a 3x3 grid
    columns = 3
    for n, (o, i) in enumerate((o, i) for o in range(4) for i in range(2)):
        r, c = divmod(n, columns)
        np.testing.assert_array_equal(mosaic[4 * r:4 * r + 3, 4 * c:4 * c + 3], w[:, :, i, o])
    assert np.isnan(mosaic[3, 0]) and np.isnan(mosaic[0, 3])  # gaps between tiles
    save(figure, tmp_path)
    limited = plot.filters(model["c1"], max_filters=3)  # a layer works too
    assert images(limited.axes[0])[0].shape == (7, 7)  # 2 x 2 grid of 3x3 kernels


def test_filters_1d_draws_one_line_per_input_channel(tmp_path):
    model = cnn_1d()
    figure = plot.filters(model)
    ax = figure.axes[0]
    w = model["c1"].parameters["W"]  # (3, 3, 5)
    curves = [line.get_ydata() for line in ax.lines if len(line.get_ydata()) == 3]
    assert len(curves) == 5 * 3
    # Panel 0 sits at height 0: its lines are the raw taps of output channel 0.
    for i in range(3):  # drawn at height 0 + the taps: exactly the taps
        np.testing.assert_array_equal(curves[i], w[:, i, 0])
    save(figure, tmp_path)


def test_filters_of_a_transposed_convolution(tmp_path):
    layer = L.ConvTranspose2D(3, 2, stride=2)
    layer.build((4, 4, 2))
    figure = plot.filters(layer)
    (mosaic,) = images(figure.axes[0])
    np.testing.assert_array_equal(mosaic[:2, :2], layer.parameters["W"][:, :, 0, 0])
    save(figure, tmp_path)


def test_filters_bad_inputs():
    with pytest.raises(ValueError, match="filters: 'model' must be a built convolution layer"):
        plot.filters(Sequential([L.Dense(2)], input_shape=(3,)))
    with pytest.raises(ValueError, match="filters: 'model' must be a built convolution layer"):
        plot.filters(L.Conv2D(2, 3))  # not built
    with pytest.raises(ValueError, match="filters: 'model' must be"):
        plot.filters("model")
    with pytest.raises(ValueError, match="filters: 'max_filters' must be an int >= 1"):
        plot.filters(cnn_2d(), max_filters=0)
    volume = Sequential([L.Conv3D(2, 3)], input_shape=(4, 4, 4, 1))
    with pytest.raises(ValueError, match=r"filters: draws 1-D and 2-D kernels; Conv3D .* "
                                         r"3-D kernels, W \(3, 3, 3, 1, 2\)"):
        plot.filters(volume)


def test_feature_maps_2d_show_the_input_and_every_conv_output(tmp_path):
    model = cnn_2d()
    x = np.random.default_rng(0).standard_normal((6, 6, 2)).astype(np.float32)
    figure = plot.feature_maps(model, x)
    assert len(figure.axes) == 3  # input, c1, inner.c2
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert titles[0].startswith("input") and "c1 (Conv2D)" in titles[1]
    assert "c2 (Conv2D)" in titles[2] and "of 3" in titles[2]
    # c1's first channel, scaled to [0, 1], is the first tile of its mosaic.
    c1 = model["c1"].forward(x[None], training=False)[0, :, :, 0]
    expected = (c1 - c1.min()) / (c1.max() - c1.min())
    # (c - min) / (max - min) rounds three times, with terms of size |c| + |min|
    scale = (np.abs(c1).max() + abs(c1.min())) / (c1.max() - c1.min())
    assert_close(images(figure.axes[1])[0][:6, :6], expected, dtype=c1.dtype, terms=3,
                 scale=scale, what="scaled map")
    with pytest.raises(RuntimeError):  # ran in inference mode: no cache kept
        model["c1"].backward(np.ones((1, 6, 6, 4), np.float32))
    save(figure, tmp_path)
    batch = np.stack([x, -x])
    np.testing.assert_array_equal(images(plot.feature_maps(model, batch).axes[1])[0],
                                  images(figure.axes[1])[0])  # the first example is used


def test_feature_maps_1d(tmp_path):
    model = cnn_1d()
    x = np.random.default_rng(0).standard_normal((12, 3)).astype(np.float32)
    figure = plot.feature_maps(model, x)
    assert len(figure.axes) == 3
    assert [len(ax.lines) for ax in figure.axes] == [3, 0, 2]  # <= 4 channels: lines
    (c1_image,) = images(figure.axes[1])  # 5 channels: an image of channels x positions
    # the same layer on the same input
    np.testing.assert_array_equal(c1_image, model["c1"].forward(x[None], training=False)[0].T)
    save(figure, tmp_path)


def test_feature_maps_bad_inputs():
    model = cnn_2d()
    with pytest.raises(ValueError, match=r"feature_maps: 'x' must be one example of shape "
                                         r"\(6, 6, 2\)"):
        plot.feature_maps(model, np.zeros((5, 6, 2), np.float32))
    with pytest.raises(ValueError, match="feature_maps: 'x' must be one example"):
        plot.feature_maps(model, np.zeros((1, 1, 6, 6, 2), np.float32))
    with pytest.raises(ValueError, match="feature_maps: 'model' must be a built Sequential"):
        plot.feature_maps(Sequential([L.Conv2D(2, 3)]), np.zeros((6, 6, 2), np.float32))
    with pytest.raises(ValueError, match="has no convolution layer"):
        plot.feature_maps(Sequential([L.Flatten(), L.Dense(2)], input_shape=(4, 2)),
                          np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="feature_maps: 'max_channels' must be an int >= 1"):
        plot.feature_maps(model, np.zeros((6, 6, 2), np.float32), max_channels=0)
    volume = Sequential([L.Conv3D(2, 3)], input_shape=(4, 4, 4, 1))
    with pytest.raises(ValueError, match=r"feature_maps: draws 1-D and 2-D maps; input is a "
                                         r"3-D map of shape \(4, 4, 4, 1\)"):
        plot.feature_maps(volume, np.zeros((4, 4, 4, 1), np.float32))


def test_gradient_norms_from_a_logger(tmp_path):
    model = cnn_1d().compile("sgd", "cross_entropy")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 12, 3)).astype(np.float32), rng.integers(0, 3, 16)
    logger = GradientNormLogger()
    model.fit(x, y, epochs=2, batch_size=8, rng=0, callbacks=[logger], verbose=0)
    figure = plot.gradient_norms(logger)
    ax = figure.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "step"
    assert [line.get_label() for line in ax.lines] == ["c1", "c2", "dense_4"]
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), [1, 2, 3, 4])
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), logger.norms["c2"])
    save(figure, tmp_path)


def test_gradient_norms_from_a_dict_with_zeros_and_nans(tmp_path):
    figure = plot.gradient_norms({"a": [1.0, 0.1, 0.01], "b": [0.0, np.nan, 2.0]})
    ax = figure.axes[0]
    assert ax.get_yscale() == "log"
    assert np.isnan(ax.lines[1].get_ydata()[:2]).all()  # not drawable on a log axis
    save(figure, tmp_path)
    flat = plot.gradient_norms({"frozen": [0.0, 0.0]})  # nothing positive: linear axis
    assert flat.axes[0].get_yscale() == "linear"


def test_gradient_norms_bad_inputs():
    with pytest.raises(ValueError, match="gradient_norms: 'record' must be a "
                                         "GradientNormLogger or a non-empty dict"):
        plot.gradient_norms({})
    with pytest.raises(ValueError, match="gradient_norms: 'record' must be"):
        plot.gradient_norms([1.0, 2.0])
    with pytest.raises(ValueError, match="one norm per step"):
        plot.gradient_norms({"a": [1.0, 2.0], "b": [1.0]})


def test_confusion_matrix_annotates_counts(tmp_path):
    y_true = np.array([0, 0, 1, 1, 1, 2])
    y_pred = np.array([0, 1, 1, 1, 2, 2])
    figure = plot.confusion_matrix(y_true, y_pred, 3)
    ax = figure.axes[0]
    np.testing.assert_array_equal(images(ax)[0], [[1, 1, 0], [0, 2, 1], [0, 0, 1]])
    assert [t.get_text() for t in ax.texts] == ["1", "1", "0", "0", "2", "1", "0", "0", "1"]
    assert "accuracy 0.667" in ax.get_title()
    save(figure, tmp_path)
    normalized = plot.confusion_matrix(y_true, np.eye(3)[y_pred], 3, normalize=True)
    rows = images(normalized.axes[0])[0]  # each row: counts / their total, then summed
    assert_close(rows.sum(axis=1), np.ones(3), dtype=rows.dtype, terms=2 * rows.shape[1],
                 scale=1.0, what="row sums")
    many = plot.confusion_matrix(np.arange(30) % 25, np.arange(30) % 25, 25)
    assert len(many.axes[0].texts) == 0  # too many classes to annotate
    with pytest.raises(ValueError, match="confusion_counts: 'y_pred' labels must lie"):
        plot.confusion_matrix(y_true, y_pred + 1, 3)
