"""ONNX export of recurrent states and cells: a layer called on ``[x, h0(, c0)]`` with
``return_state`` (initial_h/initial_c in, Y_h/Y_c out), an encoder-decoder graph, and
RNNCell/LSTMCell/GRUCell as one-step ONNX RNN/LSTM/GRU nodes, run by onnx's reference
evaluator against ``predict``."""

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad.io import export_onnx
from test_graph_export import assert_matches

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from test_onnx import RNN  # noqa: E402  (the reference RNN with Relu)

T, F, H = 4, 3, 2


def run_onnx(proto, feeds):
    onnx.checker.check_model(proto, full_check=True)
    return ReferenceEvaluator(proto, new_ops=[RNN]).run(None, feeds)


def feeds(model, xs):
    return dict(zip(model.input_names, xs))


@pytest.mark.parametrize(("cls", "num_layers", "bidirectional"), [
    (L.LSTM, 2, True), (L.GRU, 1, False), (L.RNN, 2, False), (L.LSTM, 1, False)])
@pytest.mark.parametrize("return_sequences", [True, False])
def test_layer_with_states_in_and_out_exports(cls, num_layers, bidirectional,
                                              return_sequences):
    rows, n_states = num_layers * (2 if bidirectional else 1), 2 if cls is L.LSTM else 1
    inputs = [hg.Input((T, F), name="x")] + [hg.Input((rows, H), name=f"s{i}")
                                             for i in range(n_states)]
    layer = cls(H, num_layers, bidirectional=bidirectional, return_sequences=return_sequences,
                return_state=True)
    model = hg.Model(inputs, layer(inputs), seed=1)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((3, *t.shape), dtype=np.float32) for t in inputs]
    got = run_onnx(export_onnx(model, None), feeds(model, xs))
    assert len(got) == 1 + n_states
    assert_matches(got, model, xs, np.float32)


def test_encoder_decoder_exports():
    src, tgt = hg.Input((T, F), name="src"), hg.Input((T - 1, 2), name="tgt")
    _, h_n, c_n = L.LSTM(H, 2, return_state=True, name="enc")(src)
    out = L.Dense(2, name="fc")(L.LSTM(H, 2, name="dec")([tgt, h_n, c_n]))
    model = hg.Model([src, tgt], out, seed=2)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, T, F), dtype=np.float32),
          rng.standard_normal((2, T - 1, 2), dtype=np.float32)]
    assert_matches(run_onnx(export_onnx(model, None), feeds(model, xs)), model, xs, np.float32)


@pytest.mark.parametrize(("cls", "kwargs"), [
    (L.RNNCell, {}), (L.RNNCell, {"nonlinearity": "relu", "bias": False}), (L.GRUCell, {}),
    (L.LSTMCell, {}), (L.LSTMCell, {"return_state": True})])
@pytest.mark.parametrize("with_state", [False, True])
def test_cells_export_as_one_step_nodes(cls, kwargs, with_state):
    n_states = 2 if cls is L.LSTMCell else 1
    inputs = [hg.Input((F,), name="x")]
    if with_state:
        inputs += [hg.Input((H,), name=f"s{i}") for i in range(n_states)]
    model = hg.Model(inputs, L.LSTMCell(H, **kwargs)(inputs) if cls is L.LSTMCell
                     else cls(H, **kwargs)(inputs), seed=3)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((3, *t.shape), dtype=np.float32) for t in inputs]
    proto = export_onnx(model, None)
    assert [n.op_type for n in proto.graph.node].count(cls.__name__[:-4].upper()) == 1
    got = run_onnx(proto, feeds(model, xs))
    assert len(got) == (2 if kwargs.get("return_state") else 1)
    assert_matches(got, model, xs, np.float32)
