"""``padding_mode`` of the convolution layers (PyTorch's): the input padded explicitly
with reflected, replicated or circular values, then convolved without padding.

Per spatial axis of size ``S`` with ``(before, after)`` padding, padded position ``j``
reads input position (``i = j - before``)::

    reflect    (np.pad "reflect")  |i| mirrored about 0 and S - 1, edges not repeated
    replicate  (np.pad "edge")     clip(i, 0, S - 1)
    circular   (np.pad "wrap")     i mod S

The backward folds the padded gradient back: every padded position adds its gradient
to the input position it read (the adjoint of the pad, one axis at a time). PyTorch's
limits hold: reflect needs each pad < S, circular each pad <= S.
"""

from __future__ import annotations

from .._checks import array_module

#: handgrad/torch's mode -> np.pad's; "zeros" is the convolution's own padding
MODES = {"zeros": None, "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def check_padding_mode(owner, mode, transposed):
    """The mode, validated: one of ``MODES``; a transposed convolution takes "zeros" only
    (as PyTorch)."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"{owner}: 'padding_mode' must be one of {', '.join(map(repr, MODES))};"
                         f" received {mode!r}")
    if transposed and mode != "zeros":
        raise ValueError(f"{owner}: 'padding_mode' must be 'zeros' for a transposed "
                         f"convolution (as PyTorch); received {mode!r}")
    return mode


def pad_by_mode(owner, x, pads, mode):
    """x (N, *S, C) padded per spatial axis by ``pads`` ((before, after), ...) in ``mode``
    -> (N, *(S + before + after), C)."""
    for axis, (size, (before, after)) in enumerate(zip(x.shape[1:-1], pads)):
        limit = size - 1 if mode == "reflect" else size
        if mode != "replicate" and max(before, after) > limit:
            rule = "smaller than" if mode == "reflect" else "at most"
            raise ValueError(f"{owner}: padding_mode={mode!r} needs each padding {rule} the "
                             f"input size; spatial axis {axis} has size {size} and padding "
                             f"{(before, after)}")
    return array_module(x).pad(x, [(0, 0), *pads, (0, 0)], mode=MODES[mode])


def _fold_axis(g, axis, size, before, after, mode):
    """The adjoint of padding axis ``axis`` of ``g`` (size ``before + size + after``)."""
    xp = array_module(g)
    g = xp.moveaxis(g, axis, 0)
    dx = g[before:before + size].copy()
    head, tail = g[:before], g[before + size:]
    if mode == "replicate":
        dx[0] += head.sum(axis=0)
        dx[-1] += tail.sum(axis=0)
    elif mode == "reflect":  # padded j < before read before - j; tail k read size - 2 - k
        dx[1:before + 1] += head[::-1]
        dx[size - 1 - after:size - 1] += tail[::-1]
    else:  # circular: the head read the last `before` entries, the tail the first `after`
        dx[size - before:] += head
        dx[:after] += tail
    return xp.moveaxis(dx, 0, axis)


def fold_by_mode(dx_pad, x_shape, pads, mode):
    """The gradient of :func:`pad_by_mode`: dx_pad (N, *(S + pads), C) -> dx (N, *S, C)."""
    for i, (size, (before, after)) in enumerate(zip(x_shape[1:-1], pads)):
        dx_pad = _fold_axis(dx_pad, i + 1, size, before, after, mode)
    return array_module(dx_pad).ascontiguousarray(dx_pad)
