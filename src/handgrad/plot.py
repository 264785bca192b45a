"""Figures with matplotlib (an optional dependency): functions return figures and
never show them."""

from __future__ import annotations


def _figure(ncols=1, width=5.0, height=3.6):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width * ncols, height))
    return figure, [figure.add_subplot(1, ncols, i + 1) for i in range(ncols)]


def training_curves(history):
    """Loss and accuracy per epoch (train and validation) from a History or its dict."""
    logs = getattr(history, "history", history)
    metrics = [m for m in ("loss", "accuracy") if m in logs]
    figure, axes = _figure(len(metrics))
    for ax, metric in zip(axes, metrics):
        epochs = range(1, len(logs[metric]) + 1)
        ax.plot(epochs, logs[metric], label="train")
        if f"val_{metric}" in logs:
            ax.plot(epochs, logs[f"val_{metric}"], label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    figure.tight_layout()
    return figure
