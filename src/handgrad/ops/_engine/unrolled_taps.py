"""Depthwise loops of up to 9 taps written out per kernel size (numba): the kernel's
weights, and the backward's per-tap sums, stay in registers along an image row.

The forward, per output row and block of eight channels: the taps' weights are loaded
once, then per pixel eight accumulators start at the bias and take every tap in (kh, kw)
order (the loops of :mod:`.register_taps` reload each weight at every pixel)::

    y[n, oh, ow, c] = b[c] + sum_{kh, kw} x_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, c] w[kh, kw, c]

The same sums in the same order as those loops, so the same bits; one core, (16, 32, 32,
32) float32 3x3: 0.32 -> 0.20 ms.

The backward of a "same" convolution (unit strides, the output the input's size:
MobileNet's 3x3 with padding 1) in one pass: per image row and block, one accumulator per
tap sums that tap's weight gradient along the row, and per pixel one more sums dx as the
correlation of dy with the flipped kernel (``dy_pad``: dy zero-padded, tap t' of the
reversed tap list, ``w_flip[t'] = w[T - 1 - t']``)::

    rows[t, c] += sum_w x_pad[n, h + kh*DH, w + kw*DW, c] dy[n, h, w, c]      (per row h)
    dx[n, h, w, c] = sum_t' dy_pad[n, h + kh'*DH, w + kw'*DW, c] w_flip[t', c]

Each dy value is loaded once for all the taps' gradients and nothing is stored per tap:
:mod:`.register_taps`'s backward loads and stores a row of partial sums and a padded dx
value at every tap (an add into memory that the next pixel reads back). One core, (16,
32, 32, 32) 3x3: float32 0.87-1.2 -> 0.50-0.54 ms, float64 2.4-2.5 -> 1.2-1.5; forward +
backward of (32, 32, 32, 32) on the two threads, interleaved with torch: float32
2.41-2.54 -> 1.97 ms (torch 2.78-2.94 in that process), float64 5.26 -> 4.61. dx sums the
flipped taps in the flipped forward's order (its bits); each tap's gradient is the sum
over rows of the row sums.

An accumulator or a weight is one variable per tap and lane, so each kernel size's loop
is generated from a template (straight-line code that LLVM's SLP vectorizer packs, see
:func:`.register_taps.slp_compiled`); the source is compiled under this file's name, so
numba caches it with the module's other loops. Channels past the last block of eight
take scalar loops.
"""

from __future__ import annotations

import functools

import numpy as np

from .register_taps import _into_padding, _steps, slp_compiled

u = np.uint64
LANES = 8


MAX_TAPS = 9
"""The largest kernel (in taps) these loops take; larger ones keep :mod:`.register_taps`'s.
The code grows with the taps and so does its compile time (float32 and float64, once per
machine before numba's cache has it): the backward with dx, 3x3 9 s, 5x5 23 s, 7x7 about
110 s, where the 5x5 backward gained 1.45x (one core, (16, 32, 32, 32) float32 2.7 -> 1.9
ms)."""


def takes_forward(g):
    """Whether the forward loop takes geometry ``g`` (:func:`.dispatch.geometry_2d`): at
    most :data:`MAX_TAPS` taps."""
    return g[4] * g[5] <= MAX_TAPS


def takes(g):
    """Whether the one-pass backward takes geometry ``g``: unit strides, the output the
    input's size, at most :data:`MAX_TAPS` taps."""
    H, W, OH, OW = g[:4]
    return (g[6], g[7]) == (1, 1) and (OH, OW) == (H, W) and takes_forward(g)


FORWARD = '''
def {name}(x, wt, g, bias, y, pad):
    """y (N, OH, OW, C) for x (N, H, W, C), wt (T, C), bias (C,); ``pad`` one
    zero-padded image."""
    OH, OW, PH, PW = g[2], g[3], g[10], g[11]
    C, Wp = y.shape[3], pad.shape[1]
    pf, wf = pad.reshape(-1), wt.reshape(-1)
    chans = u(C)
    tap_h, tap_w, step_h, step_w = _steps(g, Wp, C)
{setup}
    for n in range(y.shape[0]):
        _into_padding(x[n], pf, Wp, PH, PW)
        yn = y[n].reshape(-1)
{rows}
'''

BACKWARD = '''
def {name}(x, w_flip, dy, g, dx, rows, pad, dy_pad):
    """rows (T, C) += the weight-gradient sums (zero on entry); dx (N, H, W, C) (with dx;
    else not touched); pad and dy_pad: zero-padded scratch images (H + (KH-1)*DH, W +
    (KW-1)*DW, C)."""
    OH, OW, PH, PW = g[2], g[3], g[10], g[11]
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
{rows}
'''

ROWS = '''
        for oh in range(OH):
            for block in range(0, C - {last_lane}, {lanes}):
                c = u(block)
{row_start}
                for ow in range(OW):
                    base, at = u(oh) * step_h + u(ow) * step_w + c, u(oh * OW + ow) * chans + c
{pixel}
{row_end}
            for rest in range(C - C % {lanes}, C):
                c = u(rest)
                for ow in range(OW):
                    base, at = u(oh) * step_h + u(ow) * step_w + c, u(oh * OW + ow) * chans + c
{scalar}
'''
"""Both loops' walk over an image: per output row, blocks of eight channels (their lines
generated per kernel size), then the channels left one at a time."""

FORWARD_SCALAR = '''total = bias[c]
for t in range(TAPS):
    tap = u(t // KERNEL_W) * tap_h + u(t % KERNEL_W) * tap_w
    total += pf[base + tap] * wf[u(t) * chans + c]
yn[at] = total'''

BACKWARD_SCALAR = '''total = zero
for t in range(TAPS):
    tap = u(t // KERNEL_W) * tap_h + u(t % KERNEL_W) * tap_w
    rf[u(t) * chans + c] += pf[base + tap] * dyn[at]
    if WITH_DX:
        total += qf[base + tap] * wf[u(t) * chans + c]
if WITH_DX:
    dxn[at] = total'''


def _setup(kernel_h, kernel_w):
    """The unsigned offsets set once (numba types a call per ``u(...)``: written inline,
    a 3x3 backward took 10 s to compile): lanes k{k}, taps o{t}, weight rows r{t}."""
    taps = range(kernel_h * kernel_w)
    return ([f"k{k} = u({k})" for k in range(1, LANES)]
            + [f"o{t} = u({t // kernel_w}) * tap_h + u({t % kernel_w}) * tap_w" for t in taps]
            + [f"r{t} = u({t}) * chans" for t in taps])


def _lane(k):
    return f" + k{k}" if k else ""


def _weights(taps):
    """The block's weights w{t}_{k} of every tap and lane, read at the start of a row."""
    return [f"w{t}_{k} = wf[r{t} + c{_lane(k)}]" for t in taps for k in range(LANES)]


def _tap_sums(taps, source, first, target):
    """Per pixel: a{k} = first + sum_t source[base + o{t} + k] * w{t}_{k} (taps in order),
    stored at target[at + k]."""
    lines = []
    for t in taps:
        lines.append(f"i = base + o{t}")
        lines += [f"a{k} = {first(k)}{source}[i{_lane(k)}] * w{t}_{k}" if t == taps[0]
                  else f"a{k} += {source}[i{_lane(k)}] * w{t}_{k}" for k in range(LANES)]
    return lines + [f"{target}[at{_lane(k)}] = a{k}" for k in range(LANES)]


def _generated(template, name, kernel_h, kernel_w, scalar, row_start, pixel, row_end=(),
               with_dx=False):
    """The loop ``name`` of ``template`` walking :data:`ROWS` with these lines (``scalar``:
    the code per channel past the blocks), ready to compile (``__name__``: numba's cache
    rebuilds it in this module)."""
    def block(lines, indent):
        return "\n".join(" " * indent + line for line in lines)

    rows = ROWS.format(row_start=block(row_start, 16), pixel=block(pixel, 20),
                       row_end=block(row_end, 16), scalar=block(scalar.split("\n"), 20),
                       lanes=LANES, last_lane=LANES - 1)
    source = template.format(name=name, setup=block(_setup(kernel_h, kernel_w), 4),
                             rows=rows)
    names = {"__name__": __name__, "np": np, "u": u, "_into_padding": _into_padding,
             "_steps": _steps, "WITH_DX": with_dx, "TAPS": kernel_h * kernel_w,
             "KERNEL_W": kernel_w}
    exec(compile(source, __file__, "exec"), names)
    return names[name]


@functools.cache
def forward_kernel(kernel_h, kernel_w):
    """The compiled :data:`FORWARD` of a kernel_h x kernel_w kernel: ``(x, wt, g, bias, y,
    pad)``, as :func:`.register_taps.depthwise_kernel`."""
    taps = range(kernel_h * kernel_w)
    row_start = _weights(taps) + [f"b{k} = bias[c{_lane(k)}]" for k in range(LANES)]
    loop = _generated(FORWARD, f"forward_{kernel_h}x{kernel_w}", kernel_h, kernel_w,
                      FORWARD_SCALAR, row_start,
                      _tap_sums(taps, "pf", lambda k: f"b{k} + ", "yn"))
    return slp_compiled(loop, (4, 2, "g", 1, 4, 3))


@functools.cache
def backward_kernel(kernel_h, kernel_w, with_dx=True):
    """The compiled :data:`BACKWARD` of a kernel_h x kernel_w kernel: ``(x, w_flip, dy, g,
    dx, rows, pad, dy_pad)`` (without dx, ``dx`` and ``dy_pad`` are not touched): per tap t
    and lane k the accumulator s{t}_{k}, and with dx the flipped weights."""
    taps, lanes = range(kernel_h * kernel_w), range(LANES)
    row_start = [f"s{t}_{k} = zero" for t in taps for k in lanes]
    pixel = [f"d{k} = dyn[at{_lane(k)}]" for k in lanes]
    for t in taps:
        pixel += [f"i = base + o{t}"] + [f"s{t}_{k} += pf[i{_lane(k)}] * d{k}" for k in lanes]
    row_end = [f"rf[r{t} + c{_lane(k)}] += s{t}_{k}" for t in taps for k in lanes]
    if with_dx:
        row_start += _weights(taps)
        pixel += _tap_sums(taps, "qf", lambda k: "", "dxn")
    name = f"backward_{kernel_h}x{kernel_w}" + ("_dx" if with_dx else "")
    loop = _generated(BACKWARD, name, kernel_h, kernel_w, BACKWARD_SCALAR, row_start, pixel,
                      row_end, with_dx)
    return slp_compiled(loop, (4, 2, 4, "g", 4, 2, 3, 3))
