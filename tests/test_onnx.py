"""ONNX export: every exportable layer type checked by onnx's checker (full shape
inference) and run by onnx's ReferenceEvaluator (and onnxruntime when installed)
against ``model.predict``."""

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.ops.op_conv_transpose import ConvTranspose as _RefConvTranspose  # noqa: E402
from onnx.reference.ops.op_rnn import RNN_14  # noqa: E402

from handgrad import layers as L  # noqa: E402
from handgrad import ops  # noqa: E402
from handgrad.cli import commands as cli  # noqa: E402
from handgrad.io import export_onnx, save  # noqa: E402
from handgrad.model import Sequential  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402

from custom_layers import Doubled  # noqa: E402
from tolerances_composite import network_bounds  # noqa: E402

try:
    import onnxruntime
except ImportError:
    onnxruntime = None


class ConvTranspose(_RefConvTranspose):
    """onnx's reference ConvTranspose mishandles group > 1 (it slices the weight by
    output channels); per the spec, each group is an independent ConvTranspose."""

    op_domain = ""

    def _run(self, X, W, B=None, group=None, **kwargs):
        if not group or group == 1:
            return super()._run(X, W, B, group=1, **kwargs)
        biases = [None] * group if B is None else np.split(B, group)
        parts = [super(ConvTranspose, self)._run(x, w, b, group=1, **kwargs)[0]
                 for x, w, b in zip(np.split(X, group, 1), np.split(W, group, 0), biases)]
        return (np.concatenate(parts, axis=1),)


class RNN(RNN_14):
    """onnx's reference RNN knows only Tanh; Relu is one of the spec's activations."""

    op_domain = ""

    def choose_act(self, name, alpha, beta):
        if name == "Relu":
            return lambda x: np.maximum(x, 0)
        return super().choose_act(name, alpha, beta)


def run_reference(proto, x):
    return ReferenceEvaluator(proto, new_ops=[ConvTranspose, RNN]).run(None, {"input": x})[0]


def assert_matches_predict(got, model, x, dtype=None):
    """``got`` (another implementation's output) against ``model.predict(x)``, both
    rounded in ``dtype`` (the model's), within the model's rounding tolerance."""
    expected = model.predict(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    terms, scale = network_bounds(model, x)
    assert_close(got, expected, dtype=dtype or expected.dtype, terms=terms, scale=scale,
                 what="output")


def check_export(model, x, dtype=None):
    """check_model(full_check) passes; the reference (and onnxruntime) match predict."""
    proto = export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    assert_matches_predict(run_reference(proto, x), model, x, dtype)
    if onnxruntime is not None and model.dtype == np.float32:
        session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        assert_matches_predict(session.run(None, {"input": x})[0], model, x)
    return proto


def _with_random_buffers(model, rng):
    for buffer in model.named_buffers().values():
        buffer[...] = rng.uniform(0.5, 1.5, buffer.shape)
    for key, param in model.named_parameters().items():
        if key.endswith(("gamma", "beta")):
            param[...] = rng.uniform(0.5, 1.5, param.shape)
    return model


CASES = {
    "dense": (lambda: [L.Dense(4), L.ReLU(), L.Dense(3, bias=False)], (5,)),
    "dense_on_sequences": (lambda: [L.Dense(4)], (3, 5)),
    "rescaling": (lambda: [L.Conv2D(3, 2), L.Rescaling(0.5, offset=-1.5), L.ReLU(),
                           L.Rescaling(3.0), L.Flatten()], (4, 4, 2)),
    "conv1d": (lambda: [L.Conv1D(4, 3, stride=2, padding="same"), L.ReLU(),
                        L.Conv1D(6, 3, padding=((2, 1),), dilation=2, groups=2)], (9, 2)),
    "conv1d_causal": (lambda: [L.Conv1D(4, 3, padding="causal", dilation=2, bias=False)],
                      (9, 2)),
    "conv2d": (lambda: [L.Conv2D(4, 3, stride=(2, 1), padding="same", groups=2),
                        L.Conv2D(4, (2, 3), padding=((1, 0), (0, 2)), dilation=(2, 1))],
               (7, 6, 2)),
    "conv_transpose1d": (lambda: [L.ConvTranspose1D(4, 3, stride=3, output_padding=2,
                                                    groups=2),
                                  L.ConvTranspose1D(3, 3, stride=2, padding=1,
                                                    output_padding=1)], (5, 2)),
    "conv_transpose2d": (lambda: [L.ConvTranspose2D(4, (3, 2), stride=2,
                                                    padding=((1, 0), (0, 1)),
                                                    output_padding=(1, 0), dilation=(1, 2),
                                                    groups=2),
                                  L.ConvTranspose2D(2, 3, stride=2, padding="same")],
                         (4, 3, 2)),
    "conv3d": (lambda: [L.Conv3D(4, (2, 3, 2), stride=(1, 2, 1), padding="same", groups=2),
                        L.Conv3D(3, 2, padding=((1, 0), (0, 1), (1, 1)), dilation=(1, 2, 1))],
               (4, 5, 3, 2)),
    "conv_transpose3d": (lambda: [L.ConvTranspose3D(4, (2, 3, 2), stride=(2, 1, 2), padding=1,
                                                    output_padding=(1, 0, 1), groups=2)],
                         (3, 3, 2, 2)),
    "pools3d": (lambda: [L.MaxPool3D(3, 2, padding=1, ceil_mode=True),
                         L.AvgPool3D(2, 1, padding=1, count_include_pad=False),
                         L.AvgPool3D(2, 1, padding=1), L.GlobalMaxPool3D(keepdims=True),
                         L.Flatten()], (5, 6, 4, 2)),
    "global_avg_pool3d": (lambda: [L.Conv3D(3, 1), L.GlobalAvgPool3D()], (3, 4, 2, 2)),
    "conv_padding_modes": (lambda: [L.Conv2D(3, 3, padding=(1, 2), padding_mode="reflect"),
                                    L.Conv2D(4, (2, 3), stride=2, padding="same",
                                             padding_mode="replicate"),
                                    L.Conv2D(2, 2, padding=((1, 0), (0, 1)))], (5, 6, 2)),
    "max_pool": (lambda: [L.MaxPool2D(3, 2, padding=1, ceil_mode=True),
                          L.MaxPool2D(2, 1, dilation=2)], (7, 8, 2)),
    "max_pool1d_ceil": (lambda: [L.MaxPool1D(3, 2, padding=1, ceil_mode=True)], (8, 2)),
    "avg_pool_include_pad": (lambda: [L.AvgPool2D(3, 2, padding=1, ceil_mode=True)],
                             (6, 7, 2)),
    "avg_pool_exclude_pad": (lambda: [L.AvgPool2D(3, 2, padding=1, ceil_mode=True,
                                                  count_include_pad=False)], (6, 7, 2)),
    "avg_pool1d": (lambda: [L.AvgPool1D(2, ceil_mode=True), L.AvgPool1D(3, 1, "same")],
                   (7, 2)),
    "global_pools": (lambda: [L.Conv2D(3, 1), L.GlobalAvgPool2D()], (4, 5, 2)),
    "global_max_keepdims": (lambda: [L.Conv1D(3, 1), L.GlobalMaxPool1D(keepdims=True),
                                     L.Flatten()], (4, 2)),
    # padding in either layout: after a Conv (channels first) and on the input (last)
    "padding2d": (lambda: [L.ReflectionPad2D((1, 2, 3, 0)), L.Conv2D(3, 2),
                           L.ReplicationPad2D(2), L.ConstantPad2D((0, 1, 2, 1), -0.5),
                           L.CircularPad2D((3, 1, 0, 2)), L.ZeroPad2D(1)], (4, 5, 2)),
    "padding1d": (lambda: [L.CircularPad1D((2, 4)), L.ReflectionPad1D(3),
                           L.ReplicationPad1D((0, 2)), L.ConstantPad1D(1, 2.0)], (4, 2)),
    "padding3d": (lambda: [L.ZeroPad3D((1, 0, 0, 1, 2, 0)), L.ReflectionPad3D(1),
                           L.CircularPad3D((1, 2, 0, 1, 2, 0)), L.ReplicationPad3D(1)],
                  (3, 4, 3, 2)),
    "pixel_shuffle": (lambda: [L.PixelUnshuffle(2), L.ChannelShuffle(4), L.Conv2D(12, 1),
                               L.PixelShuffle(2), L.ChannelShuffle(3)], (4, 6, 2)),
    "channel_shuffle_flat": (lambda: [L.Dense(6), L.ChannelShuffle(2)], (4,)),
    "unfold_fold": (lambda: [L.Conv2D(3, 1), L.Unfold((3, 2), dilation=(1, 2), padding=1,
                                                     stride=(2, 1)),
                             L.Fold((7, 6), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),
                             L.Unfold(2, stride=2), L.Fold((6, 6), 2, stride=2)], (7, 6, 2)),
    "adaptive_pools": (lambda: [L.Conv2D(4, 1), L.AdaptiveMaxPool2D((3, None)),
                                L.AdaptiveAvgPool2D(1), L.Flatten()], (6, 5, 2)),
    "adaptive_uniform": (lambda: [L.AdaptiveAvgPool2D((2, 3)), L.AdaptiveMaxPool2D(1)],
                         (4, 6, 2)),
    # an output a multiple of the input (AlexNet's 1 x 1 map pooled to 6 x 6): a Resize
    "adaptive_repeat": (lambda: [L.AdaptiveAvgPool2D((6, 2)), L.AdaptiveMaxPool2D((3, 4)),
                                 L.Conv2D(2, 1), L.AdaptiveMaxPool2D((6, 8))], (2, 4, 3)),
    "lp_pool": (lambda: [L.LPPool2D(2, 2), L.LPPool2D(4, (2, 1), 1)], (6, 5, 2)),
    "lp_pool1d": (lambda: [L.LPPool1D(2, 3, 2)], (7, 3)),
    "lrn": (lambda: [L.LocalResponseNorm(3, 0.6, 0.8, 1.5), L.LocalResponseNorm(4, 0.9, 1.1, 2.0),
                     L.LocalResponseNorm(2)], (4, 3, 6)),
    "lrn1d": (lambda: [L.Dense(5), L.LocalResponseNorm(6, 1.2, 0.7, 0.5)], (4, 3)),
    "adaptive_1d": (lambda: [L.AdaptiveAvgPool1D(4), L.AdaptiveMaxPool1D(2)], (8, 3)),
    "adaptive_3d": (lambda: [L.AdaptiveMaxPool3D((2, None, 3)), L.AdaptiveAvgPool3D((1, 2, 1)),
                             L.AdaptiveMaxPool3D(1)], (4, 4, 6, 2)),
    "flatten": (lambda: [L.Conv2D(3, 2), L.ReLU(), L.Flatten(), L.Dense(2)], (4, 5, 2)),
    "reshape_softmax": (lambda: [L.Dense(6), L.Reshape((3, -1)), L.Softmax(axis=1),
                                 L.LogSoftmax()], (4,)),
    "batch_norm": (lambda: [L.Conv2D(3, 2), L.BatchNorm(), L.ReLU(), L.Flatten(),
                            L.BatchNorm(affine=False)], (4, 5, 2)),
    "batch_norm_batch_stats": (lambda: [L.Conv1D(3, 2),
                                        L.BatchNorm(track_running_stats=False)], (4, 2)),
    "instance_norm": (lambda: [L.Conv1D(3, 2), L.InstanceNorm(affine=True),
                               L.InstanceNorm(track_running_stats=True)], (5, 2)),
    "group_norm": (lambda: [L.Conv2D(4, 2), L.GroupNorm(2), L.ReLU()], (4, 5, 2)),
    "layer_norm": (lambda: [L.LayerNorm(), L.LayerNorm(axes=2, bias=False),
                            L.LayerNorm(elementwise_affine=False)], (4, 6)),
    "prelu_glu_softmin": (lambda: [L.Conv2D(6, 2), L.PReLU(6), L.GLU(), L.PReLU(),
                                   L.Flatten(), L.PReLU(), L.Dense(4), L.PReLU(4),
                                   L.RReLU(), L.Softmin()], (4, 5, 2)),
    "rms_norm": (lambda: [L.RMSNorm(), L.RMSNorm(axes=2, eps=1e-3),
                          L.RMSNorm(elementwise_affine=False)], (4, 6)),
    "channel_alpha_dropout_identity": (lambda: [L.Conv2D(3, 1), L.Dropout2D(0.5),
                                                L.AlphaDropout(0.2), L.FeatureAlphaDropout(0.3)],
                                       (4, 5, 2)),
    "dropout_identity": (lambda: [L.Dropout(0.5), L.Identity()], (4,)),
    # nearest as Gathers (a Resize would divide by the float32 1/3 and floor o / 0.333...
    # one below torch); align_corners from the sizes (a scale factor is not its scale)
    "upsample_nearest": (lambda: [L.Upsample(scale_factor=1 / 3), L.UpsamplingNearest2D(
        scale_factor=(1.3, 2.2)), L.Upsample(size=(5, 3), mode="nearest-exact")], (6, 7, 2)),
    "upsample_bilinear_corners": (lambda: [L.UpsamplingBilinear2D(scale_factor=1.5),
                                           L.Upsample(scale_factor=0.7, mode="bilinear")],
                                  (4, 3, 2)),
    "upsample_bicubic": (lambda: [L.Upsample(size=(7, 9), mode="bicubic"),
                                  L.Upsample(scale_factor=(0.6, 1.5), mode="bicubic",
                                             align_corners=True)], (4, 5, 2)),
    "upsample_linear_trilinear": (lambda: [L.Upsample(scale_factor=2.5, mode="linear")],
                                  (5, 2)),
    "upsample_trilinear": (lambda: [L.Upsample(size=(4, 5, 2), mode="trilinear"),
                                    L.Upsample(scale_factor=1.1, mode="trilinear")],
                           (3, 4, 2, 2)),
    # every declared elementwise activation at each of its samples (ops/declare.py)
    "activations": (lambda: [getattr(L, decl.layer)(**kwargs)
                             for decl in ops.declare.activations() if decl.elementwise
                             for kwargs in decl.samples], (10,)),
    "residual": (lambda: [L.Conv2D(4, 1), L.Residual(Sequential([
        L.Conv2D(4, 3, padding=1), L.BatchNorm(), L.ReLU()])),
        L.Residual(L.Dense(4), L.Dense(4))], (4, 5, 2)),
    "lstm": (lambda: [L.LSTM(3, num_layers=2, bidirectional=True)], (5, 2)),
    "lstm_last": (lambda: [L.LSTM(3, return_sequences=False)], (5, 2)),
    "bilstm_last": (lambda: [L.BiLSTM(3, num_layers=2, return_sequences=False)], (5, 2)),
    "gru": (lambda: [L.GRU(3, num_layers=2, bidirectional=True)], (5, 2)),
    "rnn": (lambda: [L.RNN(3, bias=False), L.RNN(2, nonlinearity="relu",
                                                 bidirectional=True)], (5, 2)),
    "attention": (lambda: [L.MultiHeadAttention(4, 2)], (5, 4)),
    "attention_causal_separate": (lambda: [L.MultiHeadAttention(4, 2, packed=False,
                                                                causal=True)], (5, 4)),
    "attention_no_bias": (lambda: [L.MultiHeadAttention(4, 1, bias=False)], (5, 4)),
    "transformer_encoder": (lambda: [L.TransformerEncoder(L.TransformerEncoderLayer(
        4, 2, 6, activation="gelu"), 2, L.LayerNorm(4))], (5, 4)),
    "transformer_encoder_layer_norm_first": (lambda: [L.TransformerEncoderLayer(
        4, 2, 6, norm_first=True, causal=True)], (5, 4)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_matches_predict(case):
    rng = np.random.default_rng(sorted(CASES).index(case))
    build, shape = CASES[case]
    model = _with_random_buffers(Sequential(build(), input_shape=shape, seed=1), rng)
    x = rng.standard_normal((2, *shape), dtype=np.float32) * 3
    check_export(model, x)


def test_float64_and_symbolic_batch():
    rng = np.random.default_rng(0)
    model = _with_random_buffers(Sequential(
        [L.Conv1D(4, 3), L.BatchNorm(), L.LayerNorm(), L.Tanh(), L.Flatten(), L.Dense(2)],
        input_shape=(6, 2), seed=0, dtype="float64"), rng)
    proto = export_onnx(model, None)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    for batch in (1, 3):  # ONNX attributes (epsilon) are float32, and LayerNormalization
        # computes its statistics in float32 (stash_type 1; onnx's reference runs no other)
        check_export(model, rng.standard_normal((batch, 6, 2)), dtype=np.float32)


def test_embedding_takes_int64_ids():
    rng = np.random.default_rng(0)
    model = Sequential([L.Embedding(10, 4), L.GRU(3)], input_shape=(5,), seed=0)
    ids = rng.integers(0, 10, (2, 5))
    proto = export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert_matches_predict(run_reference(proto, ids), model, ids)


def test_conv_section_runs_channels_first_between_two_transposes(tmp_path):
    model = Sequential([L.Conv2D(4, 3), L.BatchNorm(), L.ReLU(), L.MaxPool2D(2),
                        L.Conv2D(4, 1), L.ReLU(), L.Flatten(), L.Dense(3)],
                       input_shape=(6, 6, 2), seed=0)
    proto = export_onnx(model, tmp_path / "cnn.onnx")
    ops = [node.op_type for node in proto.graph.node]
    assert ops.count("Transpose") == 2
    assert ops.index("Transpose", 1) == ops.index("Flatten") - 1
    assert onnx.load(str(tmp_path / "cnn.onnx")) == proto


def test_identity_model_and_unbuilt_model_with_input_shape():
    model = Sequential([L.Dropout(0.3)])
    proto = export_onnx(model, None, input_shape=(3,))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_reference(proto, x), x)


def test_circular_padding_mode_is_refused_by_name():
    """Opset 17's Pad has no "wrap" mode: the export says so instead of a wrong model."""
    model = Sequential([L.Conv1D(2, 3, padding=1, padding_mode="circular", name="ring")],
                       input_shape=(5, 2), seed=0)
    with pytest.raises(ValueError, match=r"export_onnx: Conv1D 'ring'.*padding_mode="
                                         r"'circular'.*opset 19"):
        export_onnx(model, None)


def test_unsupported_layer_is_named():
    model = Sequential([L.WaveNetBlock(2)], input_shape=(5, 2), seed=0)
    with pytest.raises(ValueError, match=r"export_onnx: WaveNetBlock 'wave_net_block_0'"):
        export_onnx(model, None)


def _cube(x):
    return x**3, x


def _cube_backward(dy, x):
    return 3 * x**2 * dy


class Cube(L.Activation):
    """An activation whose kernel has no ONNX twin."""

    forward_op = staticmethod(_cube)
    backward_op = staticmethod(_cube_backward)


class Rectifier(L.ReLU):
    """A subclass of a built-in activation: exported by its family and its kernel."""


def test_activations_export_by_kernel_and_unknown_kernels_are_named():
    model = Sequential([L.Dense(3), Rectifier()], input_shape=(2,), seed=0)
    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    proto = export_onnx(model, None)
    assert [n.op_type for n in proto.graph.node][-1] == "Relu"
    # relu(x W + b): 2 products and the bias per output
    assert_close(run_reference(proto, x), model.predict(x), dtype=np.float32, terms=3)
    cube = Sequential([L.Dense(3), Cube(name="cube")], input_shape=(2,), seed=0)
    with pytest.raises(ValueError, match=r"export_onnx: Cube 'cube' \(Cube\) has no ONNX "
                                         r"export"):
        export_onnx(cube, None)


def test_containers_that_are_not_chains_are_named():
    model = Sequential([Doubled(L.Dense(2, name="inner"))], input_shape=(2,), seed=0)
    with pytest.raises(ValueError, match=r"export_onnx: Doubled 'doubled_0' \(Doubled\) has "
                                         r"no ONNX export"):
        export_onnx(model, None)


def test_embedding_must_come_first():
    model = Sequential([L.Dense(2), L.Embedding(4, 2)], input_shape=(3,))
    with pytest.raises(ValueError, match="Embedding 'embedding_1' must be the model's first"):
        export_onnx(model, None)


def test_bad_arguments():
    with pytest.raises(TypeError, match="export_onnx: 'model' must be a handgrad layer"):
        export_onnx("model", None)
    with pytest.raises(ValueError, match="export_onnx: the model is not built"):
        export_onnx(Sequential([L.Dense(2)]), None)
    with pytest.raises(TypeError, match="export_onnx: 'input_shape' must be a tuple"):
        export_onnx(Sequential([L.Dense(2)]), None, input_shape=(0,))


def test_missing_onnx_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install \"handgrad\[onnx\]\""):
        export_onnx(Sequential([L.Dense(2)], input_shape=(3,)), None)


def _saved(tmp_path, layers, shape):
    path = tmp_path / "model.safetensors"
    save(Sequential(layers, input_shape=shape, seed=0), str(path))
    return str(path)


def test_cli_export(tmp_path, capsys):
    path = _saved(tmp_path, [L.Conv1D(3, 3), L.ReLU(), L.Flatten(), L.Dense(2)], (6, 1))
    out = tmp_path / "model.onnx"
    assert cli.main(["export", path, "--onnx", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto, full_check=True)
    from handgrad.io import load

    x = np.random.default_rng(0).standard_normal((2, 6, 1), dtype=np.float32)
    assert_matches_predict(run_reference(proto, x), load(path), x)


def test_cli_export_as_module(tmp_path):
    path = _saved(tmp_path, [L.Dense(2)], (3,))
    out = tmp_path / "dense.onnx"
    done = subprocess.run([sys.executable, "-m", "handgrad", "export", path, "--onnx", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)


@pytest.mark.parametrize("argv, message", [
    (["export"], "the following arguments are required"),
    (["export", "MODEL"], "--onnx"),
    (["export", "missing.safetensors", "--onnx", "x.onnx"], "cannot load model"),
    (["export", "MODEL", "--onnx", "no/such/dir/x.onnx"], "cannot export"),
    (["export", "WAVENET", "--onnx", "x.onnx"], "has no ONNX export"),
])
def test_cli_export_errors(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    replacements = {"MODEL": lambda: _saved(tmp_path, [L.Dense(2)], (3,)),
                    "WAVENET": lambda: _saved(tmp_path, [L.WaveNetBlock(2)], (4, 2))}
    argv = [replacements[a]() if a in replacements else a for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("handgrad: error:") and message in err[0]


def test_adaptive_pooling_with_uneven_bins_is_refused(tmp_path):
    model = Sequential([L.AdaptiveAvgPool2D((3, 2))], input_shape=(7, 4, 2), dtype="float64")
    with pytest.raises(ValueError, match=r"pools 7 positions to 3, whose bins "
                                         r"\(\(0, 3\), \(2, 5\), \(4, 7\)\) differ"):
        export_onnx(model, tmp_path / "m.onnx")


@pytest.mark.parametrize("layer", [L.LPPool1D(1, 2), L.LPPool1D(2, 2, ceil_mode=True)])
def test_lp_pooling_without_exact_onnx_form_is_refused(layer, tmp_path):
    model = Sequential([layer], input_shape=(7, 2), dtype="float64")
    with pytest.raises(ValueError, match=r"LPPool1D .* has no exact ONNX form .* received "
                                         r"norm_type=\d, ceil_mode=(False|True)"):
        export_onnx(model, tmp_path / "m.onnx")

