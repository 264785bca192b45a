"""Figures with matplotlib (an optional dependency, in the ``data`` extra).

Every function returns a ``matplotlib.figure.Figure`` built without pyplot: nothing
is shown, no backend is selected and no global state changes. Save one with
``figure.savefig("name.png")``.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import describe, is_int
from ..layers import Layer
from ..layers.symbolic import GraphNetwork
from ..metrics import confusion_counts
from .summary import chain_children, conv_layers


def _figure(width, height):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _grid(count):
    """(rows, columns) of a near-square grid holding ``count`` panels."""
    columns = math.ceil(math.sqrt(count))
    return math.ceil(count / columns), columns


def _mosaic(tiles, columns):
    """Tiles (h, w) laid out row-major ``columns`` wide, one NaN pixel between them."""
    h, w = tiles[0].shape
    rows = math.ceil(len(tiles) / columns)
    canvas = np.full((rows * (h + 1) - 1, columns * (w + 1) - 1), np.nan)
    for n, tile in enumerate(tiles):
        r, c = divmod(n, columns)
        canvas[r * (h + 1):r * (h + 1) + h, c * (w + 1):c * (w + 1) + w] = tile
    return canvas


def _cmap(name):
    from matplotlib import colormaps

    return colormaps[name].with_extremes(bad="white")


def _check_max(op, name, value):
    if not is_int(value) or value < 1:
        raise ValueError(f"{op}: '{name}' must be an int >= 1; received {value!r}")
    return value


def training_curves(history):
    """Loss and accuracy per epoch (train and validation) from a History or its dict."""
    logs = getattr(history, "history", history)
    metrics = [m for m in ("loss", "accuracy") if m in logs]
    figure = _figure(5.0 * max(len(metrics), 1), 3.6)
    for i, metric in enumerate(metrics):
        ax = figure.add_subplot(1, len(metrics), i + 1)
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


def filters(model, max_filters=64):
    """The filters of the first convolution in ``model`` (or of a convolution layer).

    2-D kernels are drawn as one mosaic of images, one per (output channel, input
    channel) pair in row-major order, on a shared symmetric colour scale; 1-D kernels
    as line plots, one panel per output channel with a line per input channel (at most
    8). At most ``max_filters`` kernels.
    A transposed convolution's weight is read as (kernel, out // groups, in).
    """
    from matplotlib.patches import Rectangle

    op = "filters"
    _check_max(op, "max_filters", max_filters)
    convs = conv_layers(model) if isinstance(model, Layer) else []
    if not convs or not convs[0].built:
        raise ValueError(f"{op}: 'model' must be a built convolution layer or a built model "
                         f"holding one; received {describe(model)}")
    conv = convs[0]
    if conv.rank > 2:
        raise ValueError(f"{op}: draws 1-D and 2-D kernels; {conv.label} has 3-D kernels, W "
                         f"{tuple(conv.parameters['W'].shape)}")
    weight = np.asarray(conv.parameters["W"], dtype=np.float64)
    if conv.transposed:
        weight = np.swapaxes(weight, -1, -2)
    *_, c_in, c_out = weight.shape  # c_in is per group
    if conv.rank == 1:
        panels = min(c_out, max_filters)
        rows, columns = _grid(panels)
        figure = _figure(max(1.3 * columns + 0.6, 5.0), 0.9 * rows + 1.0)
        ax = figure.add_subplot(1, 1, 1)  # small multiples drawn into one axes (fast)
        k, scale = weight.shape[0], float(np.abs(weight).max()) or 1.0
        taps = np.arange(k)
        for o in range(panels):
            r, c = divmod(o, columns)
            x0, y0 = c * (k + 1), -r * 2.6 * scale
            ax.add_patch(Rectangle((x0 - 0.4, y0 - 1.2 * scale), k - 0.2, 2.4 * scale,
                                   fill=False, lw=0.5, ec="0.7"))
            ax.plot([x0 - 0.4, x0 + k - 0.6], [y0, y0], color="0.85", lw=0.5)
            for i in range(min(c_in, 8)):
                ax.plot(x0 + taps, y0 + weight[:, i, o], marker=".", ms=3, lw=1,
                        color=f"C{i}")
            ax.text(x0 - 0.3, y0 + 1.15 * scale, f"out {o}", fontsize=6, va="top")
        ax.set_axis_off()
        ax.autoscale_view()
        ax.set_title(f"one panel per output channel, one line per input channel\n"
                     f"(each panel spans +-{1.2 * scale:.2g})", fontsize=8)
    else:
        pairs = [(o, i) for o in range(c_out) for i in range(c_in)][:max_filters]
        rows, columns = _grid(len(pairs))
        figure = _figure(min(0.5 * columns * weight.shape[1] / 3, 11.0) + 1.5,
                         min(0.5 * rows * weight.shape[0] / 3, 11.0) + 0.8)
        ax = figure.add_subplot(1, 1, 1)
        scale = float(np.abs(weight).max()) or 1.0
        image = ax.imshow(_mosaic([weight[:, :, i, o] for o, i in pairs], columns),
                          cmap=_cmap("RdBu_r"), vmin=-scale, vmax=scale,
                          interpolation="nearest")
        figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        ax.set_axis_off()
        order = "output channels" if c_in == 1 else "(output, input) channel pairs"
        ax.set_title(f"{len(pairs)} kernels, {order} in reading order", fontsize=8)
    figure.suptitle(f"filters of {conv.label}, W {tuple(conv.parameters['W'].shape)}",
                    fontsize=9)
    return figure


def feature_maps(model, x, max_channels=16):
    """The output of every convolution of ``model`` for one example ``x``.

    ``x`` has the model's per-example input shape (or is a batch, whose first example is
    used). The model runs layer by layer in inference mode (nested ``Sequential``
    models are entered; other composite layers run as one step). The input comes
    first. A 2-D map is shown as images of its first ``max_channels`` channels, each
    scaled to its own range; a 1-D map as one image of channels by position (as lines
    when it has at most 4 channels).
    """
    op = "feature_maps"
    _check_max(op, "max_channels", max_channels)
    graph = isinstance(model, GraphNetwork) and model.single_input
    if not (isinstance(model, Layer) and model.built and (graph or chain_children(model))):
        raise ValueError(f"{op}: 'model' must be a built Sequential or a graph Model with "
                         f"one input; received {describe(model)}")
    x = np.asarray(x) if isinstance(x, (list, tuple)) else x
    shape = tuple(model.input_shape)
    if not hasattr(x, "shape") or tuple(x.shape[-len(shape):]) != shape \
            or x.ndim not in (len(shape), len(shape) + 1):
        raise ValueError(f"{op}: 'x' must be one example of shape {shape} or a batch "
                         f"(N, *{shape}); received {describe(x)}")
    from matplotlib.ticker import MaxNLocator

    x = x[None] if x.ndim == len(shape) else x[:1]
    maps = [("input", x[0])]
    (_collect_graph if graph else _collect)(model, x, maps)
    if len(maps) == 1:
        raise ValueError(f"{op}: {model.label} has no convolution layer")
    panels = [_panel(label, np.asarray(fmap, dtype=np.float64), max_channels)
              for label, fmap in maps]
    heights = [0.6 + (1.2 if kind != "equal" else
                      min(7.5 * image.shape[0] / image.shape[1], 2.5))
               for _, image, kind in panels]
    figure = _figure(8.0, sum(heights) + 0.3)
    grid = figure.add_gridspec(len(panels), 1, height_ratios=heights)
    for row, (title, image, kind) in enumerate(panels):
        ax = figure.add_subplot(grid[row])
        ax.set_title(title, fontsize=8, loc="left")
        if kind == "equal":
            ax.imshow(image, cmap=_cmap("viridis"), interpolation="nearest")
            ax.set_axis_off()
            continue
        if kind == "lines":  # 1-D, few channels: one line each
            ax.plot(image.T, lw=1)
            ax.set_xlim(-0.5, image.shape[1] - 0.5)
        else:  # 1-D: channels by position
            ax.imshow(image, aspect="auto", cmap="viridis", interpolation="nearest")
            ax.set_ylabel("channel", fontsize=7)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("position", fontsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=6)
    figure.subplots_adjust(left=0.06, right=0.98, top=0.97, bottom=0.03, hspace=0.5)
    return figure


def _panel(label, fmap, max_channels):
    """(title, image, kind) of one feature map: (L, C) -> channels by position, drawn as
    "lines" (C <= 4) or an "auto" image; (H, W, C) -> an "equal" mosaic of the first
    channels, 8 per row, each scaled to [0, 1]."""
    if fmap.ndim > 3:
        raise ValueError(f"feature_maps: draws 1-D and 2-D maps; {label} is a 3-D map of "
                         f"shape {fmap.shape}")
    if fmap.ndim == 2:
        title = f"{label}: {fmap.shape[1]} channels x {fmap.shape[0]} positions"
        return title, fmap.T, "lines" if fmap.shape[1] <= 4 else "auto"
    shown = min(fmap.shape[-1], max_channels)
    low = fmap.min(axis=(0, 1), keepdims=True)
    span = fmap.max(axis=(0, 1), keepdims=True) - low
    scaled = (fmap - low) / np.where(span > 0, span, 1.0)
    title = f"{label}: channels 0-{shown - 1} of {fmap.shape[-1]}, each scaled to its range"
    return title, _mosaic([scaled[:, :, c] for c in range(shown)], min(shown, 8)), "equal"


def _collect(model, x, maps):
    """Run ``model`` step by step (inference mode), keeping conv outputs in ``maps``."""
    convs = {id(layer) for layer in conv_layers(model)}
    for _, layer in chain_children(model):
        if chain_children(layer):
            x = _collect(layer, x, maps)
            continue
        x = layer.forward(x, training=False)
        if id(layer) in convs:
            maps.append((f"{layer.name} ({type(layer).__name__})", x[0]))
    return x


def _collect_graph(model, x, maps):
    """Run a graph model's nodes in order (inference mode), keeping conv outputs."""
    convs = {id(layer) for layer in conv_layers(model)}
    values = {model.inputs[0].uid: x}
    for node in model.nodes:
        out = node.layer.graph_forward([values[t.uid] for t in node.inputs], False)
        outs = out if isinstance(out, (list, tuple)) else [out]
        values.update((t.uid, value) for t, value in zip(node.outputs, outs))
        if id(node.layer) in convs:
            maps.append((f"{node.layer.name} ({type(node.layer).__name__})", outs[0][0]))


def gradient_norms(record):
    """Per-layer gradient norms over training on a log axis: a
    :class:`~handgrad.training.GradientNormLogger` or a dict {layer: [norm, ...]}.
    Curves that fall by orders of magnitude toward the input reveal vanishing
    gradients; growing ones, exploding gradients."""
    op = "gradient_norms"
    norms = getattr(record, "norms", record)
    if not isinstance(norms, dict) or not norms:
        raise ValueError(f"{op}: 'record' must be a GradientNormLogger or a non-empty dict "
                         f"{{layer: [norm, ...]}}; received {describe(record)}")
    length = len(next(iter(norms.values())))
    steps = list(getattr(record, "steps", None) or range(1, length + 1))
    if any(len(v) != len(steps) for v in norms.values()):
        raise ValueError(f"{op}: every layer must have one norm per step ({len(steps)}); "
                         f"received lengths {[len(v) for v in norms.values()]}")
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    figure = _figure(7.5, 4.2)
    ax = figure.add_subplot(1, 1, 1)
    colors = colormaps["viridis"](np.linspace(0.0, 0.9, len(norms)))
    positive = False
    for color, (layer, values) in zip(colors, norms.items()):
        values = np.asarray(values, dtype=np.float64)
        values = np.where(np.isfinite(values) & (values > 0), values, np.nan)
        positive = positive or bool(np.any(values > 0))
        ax.plot(steps, values, color=color, lw=1.2, label=layer)
    if positive:
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(getattr(record, "per", "step"))
    ax.set_ylabel("gradient L2 norm")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("per-layer gradient norms (input layers dark, output layers light)",
                 fontsize=9)
    figure.tight_layout()
    return figure


def confusion_matrix(y_true, y_pred, num_classes, normalize=False):
    """Counts of (true class, predicted class) as an image; ``y_pred`` holds labels or
    scores (arg-max taken). ``normalize=True`` divides each row by its total (recall
    on the diagonal). Cells are annotated up to 20 classes."""
    counts = confusion_counts(y_true, y_pred, num_classes)
    values = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1) if normalize \
        else counts
    size = min(3.0 + 0.45 * num_classes, 12.0)
    figure = _figure(size + 1.0, size)
    ax = figure.add_subplot(1, 1, 1)
    image = ax.imshow(values, cmap="Blues", interpolation="nearest")
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if num_classes <= 20:
        top = values.max() or 1
        for (r, c), value in np.ndenumerate(values):
            text = f"{value:.2f}" if normalize else str(value)
            ax.text(c, r, text, ha="center", va="center", fontsize=7,
                    color="white" if value > top / 2 else "black")
    accuracy = np.trace(counts) / max(counts.sum(), 1)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"confusion matrix ({counts.sum()} examples, accuracy {accuracy:.3f})",
                 fontsize=9)
    ticks = range(num_classes) if num_classes <= 20 else range(0, num_classes, 5)
    ax.set_xticks(list(ticks))
    ax.set_yticks(list(ticks))
    figure.tight_layout()
    return figure
