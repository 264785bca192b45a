"""``python -m handgrad train --model wgan-gp``: a WGAN-GP (:class:`handgrad.zoo.WGANGP`)
on the training images of a dataset, scaled to [-1, 1] for the generator's Tanh output.

Writes ``model.safetensors`` and ``samples.png`` (a grid of generated examples); the
metrics hold the per-epoch critic loss, Wasserstein estimate, gradient penalty and
generator loss (``history``).
"""

from __future__ import annotations

import inspect
import math
import os

import numpy as np

from ..data import Dataset
from ..training import Callback
from ..zoo import WGANGP
from .errors import UsageError, configured
from .tensorboard_logs import tensorboard_callbacks

NAME = "wgan-gp"
DEFAULT_DATASET = "digits"
DEFAULTS = {key: value.default for key, value in inspect.signature(WGANGP).parameters.items()}
RUN_DEFAULTS = {"epochs": 300, "batch_size": 64}
SAMPLES = 100  # examples in samples.png


def add_arguments(group):
    """``--n-critic`` and ``--gp-weight`` (``--latent-dim`` is shared with vae)."""
    group.add_argument("--n-critic", type=int, metavar="N",
                       help=f"critic updates per generator update (default: "
                       f"{DEFAULTS['n_critic']})")
    group.add_argument("--gp-weight", type=float, metavar="FLOAT",
                       help=f"weight of the gradient penalty (default: "
                       f"{DEFAULTS['gp_weight']:g})")


class _EpochLine(Callback):
    """One line per epoch: the losses, the Wasserstein estimate and the time."""

    def __init__(self, epochs):
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs):
        print(f"epoch {epoch + 1}/{self.epochs}: critic loss {logs['critic_loss']:.4f}, "
              f"wasserstein {logs['wasserstein']:.4f}, penalty {logs['gradient_penalty']:.4f}"
              f", generator loss {logs['generator_loss']:.4f} ({logs['seconds']:.1f} s)",
              flush=True)


def _scaled(x):
    """``(x mapped to [-1, 1], (low, high))``: the training set's range, kept to map
    samples back."""
    low, high = float(x.min()), float(x.max())
    if not high > low:
        raise ValueError(f"the training images are constant ({low:g}); nothing to learn")
    return (2.0 * (x - low) / (high - low) - 1.0).astype(x.dtype), (low, high)


def _grid(samples, low, high, path):
    """A near-square grid of ``samples`` in one picture: images (H, W, C) as pixels (the
    first channel, or RGB), other shapes as curves. None without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        print('note: matplotlib is not installed; skipping samples.png (pip install '
              '"handgrad[data]")')
        return None
    columns = math.ceil(math.sqrt(len(samples)))
    rows = math.ceil(len(samples) / columns)
    unit = (samples - low) / (high - low)  # in [0, 1] (the data's range)
    figure = Figure(figsize=(columns * 0.6, rows * 0.6))
    ax = figure.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    if samples.ndim == 4:  # (n, H, W, C): one canvas, a gray pixel between tiles
        from matplotlib import colormaps

        tiles = np.clip(unit if samples.shape[-1] == 3 else unit[..., :1], 0, 1)
        _, h, w, c = tiles.shape
        canvas = np.full((rows * (h + 1) - 1, columns * (w + 1) - 1, c), np.nan)
        for i, tile in enumerate(tiles):
            r, k = divmod(i, columns)
            canvas[r * (h + 1):r * (h + 1) + h, k * (w + 1):k * (w + 1) + w] = tile
        if c == 3:
            ax.imshow(np.nan_to_num(canvas, nan=0.8), interpolation="nearest")
        else:
            ax.imshow(canvas[..., 0], cmap=colormaps["gray_r"].with_extremes(bad="0.8"),
                      vmin=0, vmax=1, interpolation="nearest")
    else:  # signals: each curve in its cell, scaled to it
        curves = unit.reshape(len(unit), unit.shape[1], -1)
        steps = np.linspace(0.05, 0.95, curves.shape[1])
        for i, curve in enumerate(curves):
            r, k = divmod(i, columns)
            ax.plot(k + steps, rows - 1 - r + 0.05 + 0.9 * np.clip(curve, 0, 1),
                    linewidth=0.6)
        ax.set_xlim(0, columns)
        ax.set_ylim(0, rows)
    figure.savefig(path, dpi=100)
    return path


def _options(args):
    """The model's settings and ``(epochs, batch_size)``: the options given, else the
    defaults; a bad value is a UsageError naming the option."""
    values = {}
    for key in ("latent_dim", "n_critic", "gp_weight", "lr", "epochs", "batch_size"):
        value = getattr(args, key, None)
        values[key] = {**DEFAULTS, **RUN_DEFAULTS}[key] if value is None else value
        zero_ok = key == "gp_weight"  # 0: a plain WGAN without clipping or penalty
        low = ">= 0" if zero_ok else "> 0"
        if not (math.isfinite(values[key]) and (values[key] > 0 or (zero_ok and values[key] == 0))):
            raise UsageError(f"--{key.replace('_', '-')} must be a finite number {low}; "
                             f"received {value:g}")
    return values, values.pop("epochs"), values.pop("batch_size")


def run(args, dataset, out):
    """Train a WGAN-GP on ``dataset.x_train``; write the model and ``samples.png``."""
    settings, epochs, batch_size = _options(args)
    if not isinstance(dataset, Dataset):
        raise UsageError(f"--model {NAME} trains on images or signals (mnist1d, digits, "
                         f"idx:PATH); {args.dataset!r} is a text corpus")
    x, (low, high) = _scaled(dataset.x_train.astype(args.dtype))
    model = configured(WGANGP, x.shape[1:], **settings, seed=args.seed, dtype=args.dtype)
    if not args.quiet:
        print(f"training wgan-gp ({model.count_params():,} parameters) on {len(x)} examples "
              f"of {dataset.name} for {epochs} epochs, batch {batch_size}, {args.dtype}, "
              f"n_critic {model.n_critic}, gp_weight {model.gp_weight:g}, Adam lr "
              f"{model.optimizer.lr:g} betas {model.optimizer.betas}; writing to {out}")
    model_path = os.path.join(out, "model.safetensors")
    try:
        history = model.fit(x, epochs=epochs, batch_size=batch_size, rng=args.seed, verbose=0,
                            callbacks=[*([] if args.quiet else [_EpochLine(epochs)]),
                                       *tensorboard_callbacks(args, out)])
    finally:  # a failed or interrupted run keeps the model trained so far
        model.save(model_path)
    samples = model.sample(SAMPLES, rng=args.seed)
    samples = low + (samples.astype(np.float64) + 1.0) * (high - low) / 2.0
    grid = _grid(samples, low, high, os.path.join(out, "samples.png"))
    paths = [model_path] + ([grid] if grid else [])
    final = {key: history[key][-1] for key in ("critic_loss", "wasserstein",
                                                "gradient_penalty", "generator_loss")}
    metrics = {"settings": {**model.get_config(), "epochs": epochs, "batch_size": batch_size},
               "data_range": [low, high], "parameters": model.count_params(),
               "final": final, "history": history.history}
    return metrics, paths
