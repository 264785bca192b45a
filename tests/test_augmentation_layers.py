"""Keras's augmentation layers against NumPy and SciPy references (the float contract,
finite differences included, runs in test_layers_contract.py).

Keras semantics relied on (Keras is not a dependency):
- the layers are random only in training, the identity in inference;
- a factor f means the range (-f, f), a pair (lower, upper) the range itself; each image
  draws its own value in it;
- RandomRotation: angle = draw * 2 pi, positive counter-clockwise as displayed, about the
  image centre; RandomTranslation: draw * H rows (positive: down), draw * W columns
  (positive: right); RandomZoom: zoom 1 + draw (positive: zoom out), the height's draw for
  both axes when width_factor is None;
- fill_mode "reflect" = (d c b a | a b c d | d c b a), "nearest" = the edge, "wrap" =
  (a b c d | a b c d), "constant" = fill_value; bilinear interpolation at pixel centres;
- RandomContrast(factor): f in [1 - lower, 1 + upper], y = (x - mean) f + mean per image
  per channel (the mean over height and width); Keras's value-range clip is not applied.
"""

import numpy as np
import pytest
from scipy import ndimage

from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

RNG = np.random.default_rng(7)
SCIPY_MODE = {"reflect": "reflect", "nearest": "nearest", "wrap": "grid-wrap",
              "constant": "grid-constant"}
LAYERS = [lambda: L.RandomFlip(seed=1), lambda: L.RandomRotation(0.2, seed=1),
          lambda: L.RandomTranslation(0.2, 0.3, seed=1), lambda: L.RandomZoom(0.3, seed=1),
          lambda: L.RandomContrast(0.5, seed=1)]


def images(n=3, h=7, w=9, c=2):
    return RNG.standard_normal((n, h, w, c))


@pytest.mark.parametrize("make", LAYERS)
def test_identity_in_inference_without_a_cache(make):
    layer, x = make(), images().astype(np.float32)
    np.testing.assert_array_equal(layer.forward(x, training=False), x)
    assert layer.pending_backwards == 0
    with pytest.raises(RuntimeError, match="backward"):
        layer.backward(x)
    assert np.any(layer.forward(x) != x)  # training: augmented


@pytest.mark.parametrize("make", LAYERS)
def test_seeded_draws_are_reproducible_and_follow_the_model_seed(make):
    x = images(8)
    np.testing.assert_array_equal(make().forward(x), make().forward(x))
    config = make().get_config()
    del config["seed"]
    runs = [Sequential([type(make()).from_config(config)], seed=s).forward(x)
            for s in (3, 3, 4)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert np.any(runs[0] != runs[2])


@pytest.mark.parametrize(("mode", "axes"), [("horizontal", [2]), ("vertical", [1]),
                                            ("horizontal_and_vertical", [1, 2])])
def test_flip_equals_np_flip_per_image(mode, axes):
    x, dy = images(64), images(64)
    layer = L.RandomFlip(mode, seed=0, dtype="float64")
    y, dx = layer.forward(x), None
    dx = layer.backward(dy)
    seen = set()
    for i in range(len(x)):
        options = {flips: np.flip(x[i], [a - 1 for a in flips]) for flips in
                   [()] + [(a,) for a in axes] + ([tuple(axes)] if len(axes) == 2 else [])}
        match = [f for f, image in options.items() if np.array_equal(y[i], image)]
        assert match, f"image {i} is no flip of the input"
        seen.add(match[0])
        np.testing.assert_array_equal(dx[i], np.flip(dy[i], [a - 1 for a in match[0]]))
    assert len(seen) == 2 ** len(axes)  # each combination drawn among 64 images


@pytest.mark.parametrize("fill_mode", ["reflect", "nearest", "wrap", "constant"])
def test_rotation_by_a_fixed_angle_matches_scipy(fill_mode):
    x = images()
    layer = L.RandomRotation((0.07, 0.07), fill_mode=fill_mode, fill_value=0.3, dtype="float64")
    expected = ndimage.rotate(x, 0.07 * 360, axes=(2, 1), reshape=False, order=1,
                              mode=SCIPY_MODE[fill_mode], cval=0.3)
    assert_close(layer.forward(x), expected, dtype=np.float64, scale=np.abs(x).max())


def test_quarter_turn_is_np_rot90_counter_clockwise():
    x = images(h=6, w=6)
    layer = L.RandomRotation((0.25, 0.25), dtype="float64")
    assert_close(layer.forward(x), np.rot90(x, 1, axes=(1, 2)), dtype=np.float64, scale=4.0)


@pytest.mark.parametrize("fill_mode", ["reflect", "nearest", "wrap", "constant"])
def test_translation_and_zoom_match_scipy_affine_transform(fill_mode):
    x = images(h=8, w=10)
    down, right, zoom_h, zoom_w = 0.25, -0.3, 1.4, 0.8
    shifted = L.RandomTranslation((down, down), (right, right), fill_mode=fill_mode,
                                  fill_value=-1.0, dtype="float64").forward(x)
    zoomed = L.RandomZoom((zoom_h - 1,) * 2, (zoom_w - 1,) * 2, fill_mode=fill_mode,
                          fill_value=-1.0, dtype="float64").forward(x)
    centre = np.array([3.5, 4.5])  # (rows, columns)
    for y, matrix, offset in [(shifted, np.eye(2), -np.array([down * 8, right * 10])),
                              (zoomed, np.diag([zoom_h, zoom_w]),
                               centre - np.array([zoom_h, zoom_w]) * centre)]:
        for i in range(len(x)):
            for c in range(x.shape[-1]):
                expected = ndimage.affine_transform(x[i, ..., c], matrix, offset, order=1,
                                                    mode=SCIPY_MODE[fill_mode], cval=-1.0)
                assert_close(y[i, ..., c], expected, dtype=np.float64, scale=4.0)


@pytest.mark.parametrize("width_factor", [None, (-0.4, -0.1)])
def test_zoom_without_width_factor_keeps_the_aspect_ratio(width_factor):
    rows, cols = np.meshgrid(np.arange(7.0), np.arange(9.0), indexing="ij")
    ramps = np.tile(np.stack([rows, cols], -1), (16, 1, 1, 1))  # pixel (r, c) holds (r, c)
    # zooming in (z <= 1) reads inside the image, where bilinear reads the ramps exactly:
    # the output holds the source coordinates z (p - centre) + centre
    y = L.RandomZoom((-0.4, -0.1), width_factor, seed=5, dtype="float64").forward(ramps)
    zoom_h = (y[:, 6, 4, 0] - y[:, 0, 4, 0]) / 6
    zoom_w = (y[:, 3, 8, 1] - y[:, 3, 0, 1]) / 8
    assert np.all((zoom_h >= 0.6) & (zoom_h <= 0.9)) and np.ptp(zoom_h) > 0
    assert_close(y[..., 0], (rows - 3) * zoom_h[:, None, None] + 3, dtype=np.float64, scale=9.0)
    if width_factor is None:
        assert_close(zoom_w, zoom_h, dtype=np.float64, scale=9.0)
    else:
        assert np.all((zoom_w >= 0.6) & (zoom_w <= 0.9)) and np.any(
            np.abs(zoom_w - zoom_h) > 1e-3)


def test_contrast_formula_per_image_per_channel():
    x = images(n=6)
    layer = L.RandomContrast((0.2, 0.6), dtype="float64", seed=2)
    y = layer.forward(x)
    mean = x.mean(axis=(1, 2), keepdims=True)
    centred = x - mean
    f = (np.sum((y - mean) * centred, axis=(1, 2), keepdims=True)
         / np.sum(centred ** 2, axis=(1, 2), keepdims=True))
    assert_close(y, centred * f + mean, dtype=np.float64, scale=np.abs(x).max() * 2)
    assert np.ptp(f, axis=-1).max() < 1e-12  # one factor per image, every channel
    assert np.all((f >= 0.8) & (f <= 1.6)) and np.ptp(f) > 0  # per image in [1 - .2, 1 + .6]


@pytest.mark.parametrize("make", [
    lambda: L.RandomRotation(0.3, fill_mode="wrap", seed=4, dtype="float64"),
    lambda: L.RandomZoom((-0.3, 0.5), fill_mode="constant", fill_value=2.0, seed=4,
                         dtype="float64"),
    lambda: L.RandomTranslation(0.4, 0.4, fill_mode="reflect", seed=4, dtype="float64"),
    lambda: L.RandomContrast(0.7, seed=4, dtype="float64"),
    lambda: L.RandomFlip(seed=4, dtype="float64")])
def test_gradients_by_finite_differences(make):
    layer, x, dy = make(), images(n=2, h=5, w=6), images(n=2, h=5, w=6)
    layer.ensure_built(x.shape[1:])
    state = layer.extra_state()
    layer.forward(x)
    dx = layer.backward(dy)

    def loss():
        layer.load_extra_state(state)  # the same draws at every evaluation
        return float(np.sum(layer.forward(x, grad=False) * dy))

    numeric, error = numeric_gradient(loss, x, with_error=True)
    assert_gradient_close(dx, numeric, error, what="x")


def test_augmentation_inside_a_model_backpropagates():
    model = Sequential([L.RandomFlip(), L.RandomRotation(0.1), L.Conv2D(3, 3), L.Flatten(),
                        L.Dense(2)], seed=0, dtype="float64")
    x = images(n=4, h=8, w=8)
    y = model.forward(x)
    dx = model.backward(np.ones_like(y))
    assert dx.shape == x.shape and np.any(dx)
    assert all(np.any(g) for g in model.named_gradients().values())


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="'mode'"):
        L.RandomFlip("diagonal")
    with pytest.raises(ValueError, match="lower <= upper"):
        L.RandomRotation((0.2, 0.1))
    with pytest.raises(ValueError, match="'height_factor'"):
        L.RandomTranslation(1.5, 0.1)
    with pytest.raises(ValueError, match="'factor'"):
        L.RandomContrast(1.5)
    with pytest.raises(ValueError, match="'fill_mode'"):
        L.RandomZoom(0.1, fill_mode="mirror")
    with pytest.raises(ValueError, match="a pair"):
        L.RandomRotation((0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match=r"\(N, H, W, C\)"):
        L.RandomFlip().forward(np.zeros((2, 4, 3)))
