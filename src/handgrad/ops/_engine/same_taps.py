"""The depthwise backward of a "same" convolution (unit strides, the output the size of the
input: MobileNet's 3x3 with padding 1) in one pass with every sum in registers (numba).

Per image row h and block of eight channels, one accumulator per tap (eight lanes each)
sums that tap's weight gradient along the row, and per pixel a ninth sums dx as the
correlation of dy with the flipped kernel (with the padded dy ``dy_pad``, tap t' of the
reversed tap list, whose weights ``w_flip[t'] = w[T - 1 - t']``)::

    rows[t, c] += sum_w x_pad[n, h + kh*DH, w + kw*DW, c] dy[n, h, w, c]      (per row h)
    dx[n, h, w, c] = sum_t' dy_pad[n, h + kh'*DH, w + kw'*DW, c] w_flip[t', c]

Each dy value is loaded once for all the taps' gradients, the kernel's weights once per
row, and nothing is stored per tap: the loops of :mod:`.register_taps` load and store a
row of partial sums and a padded dx value at every tap (an add into memory that the next
pixel reads back). One core, (16, 32, 32, 32) 3x3: float32 0.87-1.2 -> 0.50-0.54 ms,
float64 2.4-2.5 -> 1.2-1.5; forward + backward of (32, 32, 32, 32) on the two threads,
interleaved with torch: float32 2.41-2.54 -> 1.97 ms (torch 2.78-2.94 in that process),
float64 5.26 -> 4.61. dx sums the flipped taps in the flipped forward loop's order (its
bits); each tap's gradient is the sum over rows of the row sums.

The accumulators are one variable per tap, so each kernel size's loop is generated from
the template below (straight-line code that LLVM's SLP vectorizer packs, as in
:mod:`.register_taps`); the source is compiled under this file's name, so numba caches it
with the module's other loops. Channels past the last block of eight take scalar loops.
"""

from __future__ import annotations

import functools

import numpy as np

from .register_taps import _into_padding, _steps, slp_compiled

u = np.uint64
LANES = 8


MAX_TAPS = 9
"""The largest kernel (in taps) this loop takes; larger ones keep :mod:`.register_taps`'s.
Its code grows with the taps and so does its compile time (float32 and float64 with dx,
once per machine before numba's cache has it): 3x3 9 s, 5x5 23 s, 7x7 about 110 s, where
the 5x5 backward gained 1.45x (one core, (16, 32, 32, 32) float32 2.7 -> 1.9 ms)."""


def takes(g):
    """Whether this loop takes geometry ``g`` (:func:`.dispatch.geometry_2d`): unit
    strides, the output the input's size, at most :data:`MAX_TAPS` taps."""
    H, W, OH, OW, KH, KW, SH, SW = g[:8]
    return (SH, SW) == (1, 1) and (OH, OW) == (H, W) and KH * KW <= MAX_TAPS


TEMPLATE = '''
def {name}(x, w_flip, dy, g, dx, rows, pad, dy_pad):
    """rows (T, C) += the weight-gradient sums (zero on entry); dx (N, H, W, C) (with dx;
    else not touched); pad and dy_pad: zero-padded scratch images (H + (KH-1)*DH, W +
    (KW-1)*DW, C)."""
    H, W, PH, PW = g[0], g[1], g[10], g[11]
    QH, QW = (g[4] - 1) * g[8] - PH, (g[5] - 1) * g[9] - PW
    C, Wp = dy.shape[3], pad.shape[1]
    pf, qf, rf, wf = pad.reshape(-1), dy_pad.reshape(-1), rows.reshape(-1), w_flip.reshape(-1)
    chans, zero = u(C), np.zeros(1, dy.dtype)[0]
    tap_h, tap_w, step_h, step_w = _steps(g, Wp, C)
{setup}
    for n in range(dy.shape[0]):
        _into_padding(x[n], pf, Wp, PH, PW)
        dyn = dy[n].reshape(-1)
        if WITH_DX:
            _into_padding(dy[n], qf, Wp, QH, QW)
            dxn = dx[n].reshape(-1)
        for h in range(H):
            for block in range(0, C - 7, 8):
                c = u(block)
{row_start}
                for w in range(W):
                    base, at = u(h) * step_h + u(w) * step_w + c, u(h * W + w) * chans + c
{pixel}
{row_end}
            for rest in range(C - C % 8, C):
                c = u(rest)
                for w in range(W):
                    base, at = u(h) * step_h + u(w) * step_w + c, u(h * W + w) * chans + c
                    total = zero
                    for t in range({taps}):
                        tap = u(t // {kernel_w}) * tap_h + u(t % {kernel_w}) * tap_w
                        rf[u(t) * chans + c] += pf[base + tap] * dyn[at]
                        if WITH_DX:
                            total += qf[base + tap] * wf[u(t) * chans + c]
                    if WITH_DX:
                        dxn[at] = total
'''


def _source(kernel_h, kernel_w, with_dx):
    """The template for a kernel_h x kernel_w kernel, in scalar statements: per tap t and
    lane k the accumulator s{t}_{k} and (with dx) the flipped weight w{t}_{k}; the lane
    offsets k{k}, tap offsets o{t} and weight rows r{t} are unsigned variables set once
    (numba types a call per ``u(...)``: written inline, a 3x3 loop took 10 s to compile)."""
    taps, lanes = range(kernel_h * kernel_w), range(LANES)
    lane = ["", *(f" + k{k}" for k in lanes[1:])]
    setup = [f"k{k} = u({k})" for k in lanes[1:]]
    setup += [f"o{t} = u({t // kernel_w}) * tap_h + u({t % kernel_w}) * tap_w" for t in taps]
    setup += [f"r{t} = u({t}) * chans" for t in taps]
    row_start = [f"s{t}_{k} = zero" for t in taps for k in lanes]
    pixel = [f"d{k} = dyn[at{lane[k]}]" for k in lanes]
    for t in taps:
        pixel += [f"i = base + o{t}"] + [f"s{t}_{k} += pf[i{lane[k]}] * d{k}" for k in lanes]
    row_end = [f"rf[r{t} + c{lane[k]}] += s{t}_{k}" for t in taps for k in lanes]
    if with_dx:
        row_start += [f"w{t}_{k} = wf[r{t} + c{lane[k]}]" for t in taps for k in lanes]
        pixel += [f"a{k} = qf[base{lane[k]}] * w0_{k}" for k in lanes]
        for t in taps[1:]:
            pixel += [f"i = base + o{t}"] + [f"a{k} += qf[i{lane[k]}] * w{t}_{k}" for k in lanes]
        pixel += [f"dxn[at{lane[k]}] = a{k}" for k in lanes]

    def block(lines, indent):
        return "\n".join(" " * indent + line for line in lines)

    return TEMPLATE.format(name=_name(kernel_h, kernel_w, with_dx), setup=block(setup, 4),
                           row_start=block(row_start, 16), pixel=block(pixel, 20),
                           row_end=block(row_end, 16), taps=len(taps), kernel_w=kernel_w)


def _name(kernel_h, kernel_w, with_dx):
    """The loop's name, one per variant: numba's cache files are named by it."""
    return f"same_backward_{kernel_h}x{kernel_w}" + ("_dx" if with_dx else "")


@functools.cache
def backward_kernel(kernel_h, kernel_w, with_dx=True):
    """The compiled loop of :data:`TEMPLATE` for a kernel_h x kernel_w kernel: ``(x,
    w_flip, dy, g, dx, rows, pad, dy_pad)`` (without dx, ``dx`` and ``dy_pad`` are not
    touched)."""
    # what the loop reads; ``__name__``: numba's cache rebuilds it in this module
    names = {"__name__": __name__, "np": np, "u": u, "_into_padding": _into_padding,
             "_steps": _steps, "WITH_DX": with_dx}
    exec(compile(_source(kernel_h, kernel_w, with_dx), __file__, "exec"), names)
    return slp_compiled(names[_name(kernel_h, kernel_w, with_dx)], (4, 2, 4, "g", 4, 2, 3, 3))
