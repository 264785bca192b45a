"""Samples and torch counterpart of the projected LSTM: ``torch.nn.LSTM(proj_size=P)``
(batch first) called with handgrad's weights transposed."""

from __future__ import annotations

import warnings

from ..declare import Sample


def torch_lstm_projected(F, x, W_ih, W_hh, W_hr, b_ih=None, b_hh=None, h0=None, c0=None, *,
                         lengths=None, reverse=False):
    """The output sequence of ``torch.nn.LSTM(F, H, proj_size=P, batch_first=True)``."""
    import torch

    if lengths is not None or reverse:
        raise NotImplementedError("padded and reversed sequences have their own tests")
    hidden, proj = W_hr.shape
    module = torch.nn.LSTM(x.shape[-1], hidden, bias=b_ih is not None, batch_first=True,
                           proj_size=proj, dtype=x.dtype)
    params = {"weight_ih_l0": W_ih.T, "weight_hh_l0": W_hh.T, "weight_hr_l0": W_hr.T}
    if b_ih is not None:
        params.update(bias_ih_l0=b_ih, bias_hh_l0=b_hh)
    state = None
    if h0 is not None or c0 is not None:
        n = x.shape[0]
        state = (x.new_zeros((n, proj)) if h0 is None else h0,
                 x.new_zeros((n, hidden)) if c0 is None else c0)
        state = tuple(s[None] for s in state)
    with warnings.catch_warnings():  # torch's float32 CPU path names its oneDNN fallback
        warnings.filterwarnings("ignore", "LSTM with projections is not supported")
        return torch.func.functional_call(module, params, (x, state))[0]


SAMPLES = (
    Sample(((2, 3, 4), (4, 12), (2, 12), (3, 2), (12,), (12,), (2, 2), (2, 3))),
    Sample(((1, 4, 2), (2, 16), (1, 16), (4, 1))),
)
