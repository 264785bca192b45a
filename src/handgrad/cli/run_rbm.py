"""``train --model rbm``: a Bernoulli-Bernoulli RBM (:class:`handgrad.zoo.RBM`) on
binarized images: a pixel is 1 when its value in [0, 1] is at least 0.5 (digits: at
least 8 of 16, half intensity), else 0.

CD-k (or PCD-k with ``--persistent``) with SGD, momentum 0.5, at a constant learning
rate (``--schedule`` does not apply). Each epoch records the exact pseudo-log-likelihood
(the sum over all pixels of log p(v_i | v_-i)) and the reconstruction error of the
training batches (each measured before its update) and of the validation split; the
test set is scored once at the end, with the mean free energy of test images against
uniform noise images.
Writes model.safetensors (:meth:`RBM.load` reads it), filters.png (each hidden unit's
weights as an image) and samples.png (1000-step Gibbs chains from noise).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from ..training.data import split_validation
from ..zoo import RBM
from .errors import UsageError, configured
from .tensorboard_logs import tensorboard_callbacks

NAME = "rbm"
DEFAULT_DATASET = "digits"
EPOCHS, BATCH_SIZE, LR, HIDDEN_UNITS = 20, 10, 0.1, 64
THRESHOLD = 0.5  # a pixel in [0, 1] at least this bright is 1
SAMPLES, SAMPLE_STEPS = 36, 1000


def add_arguments(group):
    """--hidden-units, --cd-k and --persistent."""
    group.add_argument("--hidden-units", type=int, default=HIDDEN_UNITS, metavar="N",
                       help=f"hidden units of the RBM; --model rbm trains {EPOCHS} epochs "
                       f"of batches of {BATCH_SIZE} at --lr {LR:g} unless told otherwise")
    group.add_argument("--cd-k", type=int, default=1, metavar="K",
                       help="Gibbs steps per update (CD-k, or PCD-k with --persistent)")
    group.add_argument("--persistent", action="store_true",
                       help="persistent contrastive divergence: the negative chains (one "
                       "per example of a batch) carry on from update to update")


def binarize(x, dtype):
    """Images (N, ...) with values in [0, 1] -> (N, pixels) of 0 and 1 in ``dtype``."""
    flat = np.asarray(x).reshape(len(x), -1)
    low, high = float(flat.min()), float(flat.max())
    if not (0.0 <= low and high <= 1.0):
        raise UsageError(f"rbm: the dataset's inputs must be images with values in [0, 1] "
                         f"(binarized at {THRESHOLD}); received values in [{low:g}, {high:g}]")
    return (flat >= THRESHOLD).astype(dtype)


def mean_and_error(values) -> dict:
    """The mean of ``values`` and its standard error."""
    values = np.asarray(values, dtype=np.float64)
    error = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return {"mean": float(values.mean()), "standard_error": float(error)}


def _mosaic(images, columns):
    """(n, h, w) images in one (rows (h+1) - 1, columns (w+1) - 1) canvas, NaN between."""
    n, h, w = images.shape
    rows = -(-n // columns)
    tiles = np.full((rows * columns, h + 1, w + 1), np.nan)
    tiles[:n, :h, :w] = images
    canvas = tiles.reshape(rows, columns, h + 1, w + 1).transpose(0, 2, 1, 3)
    return canvas.reshape(rows * (h + 1), columns * (w + 1))[:-1, :-1]


def _picture(path, images, title, symmetric):
    """A grid of ``images`` (n, h, w) saved as a PNG: weights on a symmetric blue-red
    scale, probabilities in grey from 0 (white) to 1 (black)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    columns = int(np.ceil(np.sqrt(len(images))))
    figure = Figure(figsize=(6.0, 6.4))
    ax = figure.add_subplot(1, 1, 1)
    scale = float(np.abs(images).max()) or 1.0
    limits = (-scale, scale) if symmetric else (0.0, 1.0)
    cmap = colormaps["RdBu_r" if symmetric else "gray_r"].with_extremes(bad="white")
    shown = ax.imshow(_mosaic(images, columns), cmap=cmap, vmin=limits[0], vmax=limits[1],
                      interpolation="nearest")
    figure.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)
    figure.savefig(path, dpi=100)
    return path


def _pictures(model, shape, out, seed):
    """filters.png and samples.png, when matplotlib is installed."""
    if importlib.util.find_spec("matplotlib") is None or len(shape) < 2:
        return []
    height, width = shape[0], int(np.prod(shape[1:]))
    weights = model.parameters["W"].T.reshape(-1, height, width)
    samples = model.sample(SAMPLES, SAMPLE_STEPS, rng=seed, probabilities=True)
    return [
        _picture(os.path.join(out, "filters.png"), weights,
                 f"weights of the {len(weights)} hidden units, W[:, j] as an image", True),
        _picture(os.path.join(out, "samples.png"), samples.reshape(-1, height, width),
                 f"p(v | h) after {SAMPLE_STEPS} Gibbs steps from noise", False),
    ]


def run(args, dataset, out):
    """Train the RBM; returns ``(metrics, paths)``."""
    epochs = EPOCHS if args.epochs is None else args.epochs
    batch_size = BATCH_SIZE if args.batch_size is None else args.batch_size
    lr = LR if args.lr is None else args.lr
    x = binarize(dataset.x_train, args.dtype)
    x_test = binarize(dataset.x_test, args.dtype)
    x_train, _, validation = split_validation("rbm", x, None, args.validation_split, None)
    model = configured(RBM, args.hidden_units, k=args.cd_k, persistent=args.persistent, lr=lr,
                       seed=args.seed, dtype=args.dtype)
    x_val = None if validation is None else validation[0]
    history = model.fit(x_train, epochs=epochs, batch_size=batch_size, rng=args.seed,
                        validation_data=validation, verbose=0 if args.quiet else 1,
                        callbacks=tensorboard_callbacks(args, out)).history
    path = os.path.join(out, "model.safetensors")
    model.save(path)
    noise_rng = np.random.default_rng(args.seed)
    noise = (noise_rng.random(x_test.shape) < 0.5).astype(x_test.dtype)
    metrics = {
        "hidden_units": model.n_hidden, "cd_k": model.k, "persistent": model.persistent,
        "epochs": epochs, "batch_size": batch_size, "lr": lr, "momentum": model.momentum,
        "binarize_threshold": THRESHOLD, "train_examples": len(x_train),
        "validation_examples": 0 if x_val is None else len(x_val),
        "pseudo_log_likelihood_kind": "exact: sum over all pixels of log p(v_i | v_-i), mean over "
                                      "examples",
        "history": history,
        "test_pseudo_log_likelihood": float(model.pseudo_log_likelihood(x_test).mean()),
        "test_reconstruction_error": model.reconstruction_error(x_test),
        "test_free_energy": mean_and_error(model.free_energy(x_test)),
        "noise_free_energy": mean_and_error(model.free_energy(noise)),
    }
    if not args.quiet:
        print(f"test pseudo-log-likelihood {metrics['test_pseudo_log_likelihood']:.3f}; "
              f"mean free energy: test images {metrics['test_free_energy']['mean']:.2f}, "
              f"uniform noise {metrics['noise_free_energy']['mean']:.2f}")
    return metrics, [path, *_pictures(model, dataset.x_train.shape[1:], out, args.seed)]
