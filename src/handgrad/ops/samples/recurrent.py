"""Recurrent samples and torch counterparts: ``torch.nn.RNN/LSTM/GRU`` (batch-first,
gates in torch's order) called with handgrad's weights transposed."""

from __future__ import annotations

from ..declare import Sample


def torch_recurrent(cell):
    """The counterpart of ``cell`` ("rnn", "lstm", "gru"): its output sequence."""

    def counterpart(F, x, W_ih, W_hh, b_ih=None, b_hh=None, h0=None, c0=None, *,
                    nonlinearity="tanh", lengths=None, reverse=False):
        import torch

        if lengths is not None or reverse:
            raise NotImplementedError("padded and reversed sequences have their own tests")
        options = {"nonlinearity": nonlinearity} if cell == "rnn" else {}
        module = getattr(torch.nn, cell.upper())(
            x.shape[-1], W_hh.shape[0], bias=b_ih is not None, batch_first=True,
            dtype=x.dtype, **options)
        params = {"weight_ih_l0": W_ih.T, "weight_hh_l0": W_hh.T}
        if b_ih is not None:
            params.update(bias_ih_l0=b_ih, bias_hh_l0=b_hh)
        state = None if h0 is None else h0[None]
        if cell == "lstm" and h0 is not None:
            state = (state, (h0.new_zeros(h0.shape) if c0 is None else c0)[None])
        return torch.func.functional_call(module, params, (x, state))[0]

    counterpart.__name__ = f"torch_{cell}"
    return counterpart


RNN = (
    Sample(((2, 3, 4), (4, 5), (5, 5), (5,), (5,), (2, 5))),
    Sample(((2, 4, 3), (3, 2), (2, 2)), {"nonlinearity": "relu"}),
)
LSTM = (
    Sample(((2, 3, 4), (4, 12), (3, 12), (12,), (12,), (2, 3), (2, 3))),
    Sample(((1, 4, 2), (2, 8), (2, 8))),
)
GRU = (
    Sample(((2, 3, 4), (4, 9), (3, 9), (9,), (9,), (2, 3))),
    Sample(((2, 4, 2), (2, 6), (2, 6))),
)
