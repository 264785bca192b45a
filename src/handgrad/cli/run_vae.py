"""``python -m handgrad train --model vae``: a Bernoulli VAE (:class:`handgrad.zoo.VAE`).

The inputs are scaled to [0, 1] by the training set's minimum and maximum (digits are
already there: pixel values 0..16 divided by 16, left as they are), the last
``--validation-split`` of the training set is held out to validate after each epoch, and
the rest trains the VAE with Adam (defaults: 60 epochs, batch 64, lr 1e-3, latent size
16, hidden layers 256 and 256). Writes ``model.safetensors`` (``VAE.load`` or
``handgrad.io.load`` reads it), ``reconstructions.png`` (test images over their
reconstructions), ``samples.png`` (decoded draws from the prior) and, for a 2-D latent
space, ``latent.png`` (the test set's posterior means, coloured by class). The test
negative ELBO is the single-sample estimate of :meth:`handgrad.zoo.VAE.negative_elbo`,
in nats per example.
"""

from __future__ import annotations

import os

import numpy as np

from ..optimizers import Adam
from ..zoo import VAE
from .errors import configured
from .tensorboard_logs import tensorboard_callbacks

NAME = "vae"
DEFAULT_DATASET = "digits"
EPOCHS, BATCH_SIZE, LR, LATENT_DIM = 60, 64, 1e-3, 16


def add_arguments(group):
    """This model's options: none beyond the shared ``--latent-dim``."""


def scale_to_unit(train, test):
    """``(train, test, (low, high))``: both mapped by ``(x - low) / (high - low)`` with the
    training set's extremes, the test set clipped into [0, 1]."""
    low, high = float(train.min()), float(train.max())
    if not high > low:
        raise ValueError(f"the training inputs are constant ({low:g}); a VAE needs pixels "
                         f"that vary")
    if (low, high) == (0.0, 1.0):
        return train, test, (low, high)
    span = high - low
    return (train - low) / span, np.clip((test - low) / span, 0.0, 1.0), (low, high)


def _tile(example):
    """One example as a 2-D picture: an image's only channel, or a signal (L, C) as C rows."""
    if example.ndim == 3 and example.shape[-1] == 1:
        return example[..., 0]
    if example.ndim == 1:
        return example[None, :]
    return example.reshape(example.shape[0], -1).T


def _grid_figure(rows, title):
    """One picture of rows of examples (a list of lists), grey on white, a blank pixel
    between tiles."""
    from matplotlib.figure import Figure

    tiles = [[_tile(np.asarray(example, dtype=np.float64)) for example in row] for row in rows]
    h, w = tiles[0][0].shape
    columns = max(len(row) for row in tiles)
    canvas = np.full((len(tiles) * (h + 1) - 1, columns * (w + 1) - 1), np.nan)
    for r, row in enumerate(tiles):
        for c, tile in enumerate(row):
            canvas[r * (h + 1):r * (h + 1) + h, c * (w + 1):c * (w + 1) + w] = tile
    figure = Figure(figsize=(0.5 + 0.06 * canvas.shape[1], 0.7 + 0.06 * canvas.shape[0]))
    ax = figure.add_subplot(1, 1, 1)
    ax.imshow(canvas, cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
    return figure


def _latent_figure(mu, labels):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 4.5))
    ax = figure.add_subplot(1, 1, 1)
    points = ax.scatter(mu[:, 0], mu[:, 1], c=labels, cmap="tab10", s=8)
    figure.colorbar(points, ax=ax, label="class")
    ax.set_xlabel("z[0] (posterior mean)")
    ax.set_ylabel("z[1] (posterior mean)")
    ax.set_title("test set in the latent space")
    figure.tight_layout()
    return figure


def _draw(make, path, quiet):
    """``make()``'s figure saved to ``path``; None (with a note) when it cannot be drawn."""
    try:
        make().savefig(path, dpi=100)
    except ImportError:
        if not quiet:
            print(f"note: matplotlib is not installed; skipping {os.path.basename(path)}")
        return None
    return path


def _pictures(vae, x_test, y_test, out, seed, quiet):
    """The reconstructions, samples and (2-D latent) latent-space pictures written."""
    recon = vae.reconstruct(x_test[:20])
    rows = [list(part[start:start + 10]) for start in (0, 10)
            for part in (x_test, recon) if len(part) > start]
    samples = vae.sample(64, np.random.default_rng(seed))
    drawings = [
        (lambda: _grid_figure(rows, "test images (rows 1, 3) over their reconstructions "
                                    "(rows 2, 4)"), "reconstructions.png"),
        (lambda: _grid_figure([list(samples[i:i + 8]) for i in range(0, 64, 8)],
                              "samples from the prior"), "samples.png"),
    ]
    if vae.latent_dim == 2:
        mu = vae.encode(x_test)[0]
        drawings.append((lambda: _latent_figure(mu, y_test), "latent.png"))
    written = [_draw(make, os.path.join(out, name), quiet) for make, name in drawings]
    return [path for path in written if path]


def run(args, dataset, out):
    """Train the VAE on ``dataset`` and write its files into ``out``."""
    epochs = EPOCHS if args.epochs is None else args.epochs
    batch_size = BATCH_SIZE if args.batch_size is None else args.batch_size
    lr = LR if args.lr is None else args.lr
    latent_dim = getattr(args, "latent_dim", None) or LATENT_DIM
    split = getattr(args, "validation_split", 0.0) or None
    x_train, x_test, (low, high) = scale_to_unit(dataset.x_train, dataset.x_test)
    x_train, x_test = x_train.astype(args.dtype), x_test.astype(args.dtype)
    vae = configured(VAE, latent_dim, seed=args.seed, dtype=args.dtype,
                     input_shape=dataset.input_shape)
    path = os.path.join(out, "model.safetensors")
    try:
        vae.compile(Adam(lr=lr), loss=None)
        history = vae.fit(x_train, epochs=epochs, batch_size=batch_size,
                          validation_split=split, rng=args.seed, verbose=0 if args.quiet else 1,
                          callbacks=tensorboard_callbacks(args, out, batch=x_test[:8]))
    finally:  # a run that fails or is interrupted keeps the model trained so far
        vae.save(path)
    test = vae.evaluate(x_test, return_dict=True)
    if not args.quiet:
        print(f"test negative ELBO: {test['loss']:.3f} nats per example "
              f"(reconstruction {test['reconstruction']:.3f}, KL {test['kl']:.3f})")
    paths = [path, *_pictures(vae, x_test, dataset.y_test, out, args.seed, args.quiet)]
    metrics = {
        "test_negative_elbo": test["loss"], "test_reconstruction": test["reconstruction"],
        "test_kl": test["kl"],
        "estimator": "single-sample ELBO (closed-form KL, one noise draw per example from "
                     "seed 0), nats per example",
        "latent_dim": latent_dim, "hidden": list(vae.hidden), "epochs": epochs,
        "batch_size": batch_size, "lr": lr, "optimizer": "adam",
        "validation_split": split or 0.0, "input_range": [low, high],
        "parameters": vae.count_params(),
        "history": {key: list(values) for key, values in history.history.items()},
    }
    return metrics, paths
