"""Validation of the arguments of the projected LSTM (torch's ``proj_size``), shared with
the loop twin. Shapes, with H the cell size and P the projection size: ``x`` (N, T, F),
``W_ih`` (F, 4H), ``W_hh`` (P, 4H), ``W_hr`` (H, P) (torch's ``weight_hr_l0.T``),
``b_ih``/``b_hh`` (4H,) or None, ``h0`` (N, P) and ``c0`` (N, H) or None."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import float_array, same_dtype
from ..._hyper import flag
from .recurrent import check_lengths


@dataclass(frozen=True)
class ProjectedCall:
    """A validated call of one projected LSTM layer in one direction."""

    x: object
    W_ih: object
    W_hh: object
    W_hr: object
    b_ih: object
    b_hh: object
    h0: object
    c0: object
    lengths: object
    reverse: bool

    @property
    def sizes(self):
        """(H, P): the cell and projection sizes."""
        return self.W_hr.shape


def _shaped(op, name, value, shape, layout):
    if value is None:
        return None
    value = float_array(op, name, value, len(shape), layout)
    if tuple(value.shape) != shape:
        raise ValueError(f"{op}: '{name}' must have shape {layout} = {shape}; received shape "
                         f"{tuple(value.shape)}")
    return value


def prepare_projected(op, x, W_ih, W_hh, W_hr, b_ih, b_hh, h0, c0, lengths, reverse):
    """Check every argument of a projected LSTM; return a :class:`ProjectedCall`."""
    for name, value in (("W_ih", W_ih), ("W_hh", W_hh)):
        if value is None:
            raise TypeError(f"{op}: '{name}' is required (an array); received None")
    x = float_array(op, "x", x, 3, "(N, T, F)")
    W_hr = float_array(op, "W_hr", W_hr, 2, "(H, P)")
    n, steps, features = x.shape
    hidden, proj = W_hr.shape
    if hidden < 1 or proj < 1:
        raise ValueError(f"{op}: 'W_hr' must have shape (H, P) with H >= 1 and P >= 1; "
                         f"received shape {tuple(W_hr.shape)}")
    if proj >= hidden:
        raise ValueError(f"{op}: the projection size P must be smaller than the cell size "
                         f"H, as torch's proj_size < hidden_size; 'W_hr' has shape (H, P) = "
                         f"{tuple(W_hr.shape)}")
    W_ih = _shaped(op, "W_ih", W_ih, (features, 4 * hidden), "(F, 4*H)")
    W_hh = _shaped(op, "W_hh", W_hh, (proj, 4 * hidden), "(P, 4*H)")
    b_ih = _shaped(op, "b_ih", b_ih, (4 * hidden,), "(4*H,)")
    b_hh = _shaped(op, "b_hh", b_hh, (4 * hidden,), "(4*H,)")
    h0 = _shaped(op, "h0", h0, (n, proj), "(N, P)")
    c0 = _shaped(op, "c0", c0, (n, hidden), "(N, H)")
    same_dtype(op, x=x, W_ih=W_ih, W_hh=W_hh, W_hr=W_hr, b_ih=b_ih, b_hh=b_hh, h0=h0, c0=c0)
    if steps < 1 or features < 1:
        raise ValueError(f"{op}: 'x' must have at least one time step and one feature "
                         f"(N, T, F) with T >= 1 and F >= 1; received shape {tuple(x.shape)}")
    lengths = check_lengths(op, lengths, n, steps)
    return ProjectedCall(x, W_ih, W_hh, W_hr, b_ih, b_hh, h0, c0, lengths,
                         flag(op, "reverse", reverse))
