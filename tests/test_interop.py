"""PyTorch interop: weights imported from random torch models give torch's outputs (on the
channels-last twin of the input), round trips are exact, mismatches are listed, and a
torch-written safetensors file loads without torch."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from handgrad import layers as L  # noqa: E402
from handgrad.io import from_torch, to_torch_state_dict  # noqa: E402
from handgrad.io import safetensors as _safetensors  # noqa: E402
from handgrad.model import Sequential  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402

from custom_layers import Doubled  # noqa: E402
from tolerances_composite import network_bounds  # noqa: E402


def randomize(module, seed):
    """Random weights, biases and running statistics (variances positive)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if not tensor.is_floating_point():
                continue
            low, high = (0.5, 1.5) if name.endswith("running_var") else (-0.6, 0.6)
            tensor.copy_(torch.rand(tensor.shape, generator=gen, dtype=tensor.dtype)
                         * (high - low) + low)
    return module.eval()


class Head(nn.Module):
    """Wraps a module whose forward returns a tuple (RNNs) or needs q, k, v (attention)."""

    def __init__(self, *modules, call=None):
        super().__init__()
        self.body = nn.ModuleList(modules)
        self.call = call

    def forward(self, x):
        for module in self.body:
            x = self.call(module, x) if isinstance(module, (nn.RNNBase,
                                                            nn.MultiheadAttention)) else module(x)
        return x


def _rnn(module, x):
    return module(x)[0]


def _self_attention(module, x):
    return module(x, x, x, need_weights=False)[0]


class ResidualNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.shortcut = nn.Conv2d(4, 4, 1, bias=False)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

    def forward(self, x):
        x = self.stem(x)
        return self.head(self.block(x) + self.shortcut(x))


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 1)
        self.instance = nn.InstanceNorm1d(4, affine=True, track_running_stats=True)
        self.group = nn.GroupNorm(2, 4)
        self.plain = nn.InstanceNorm1d(4)

    def forward(self, x):
        return self.plain(self.group(self.instance(self.conv(x))))


def _cf(x):
    """handgrad's channels-last input as torch's channels-first one."""
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def _cl(y):
    return np.moveaxis(y, 1, -1)


def _same(x):
    return x


# name: (torch model, handgrad layers, per-example input shape, input to torch,
#        torch output to handgrad layout, sequential twin that load_state_dict accepts)
CASES = {
    "dense": (lambda: nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)),
              lambda: [L.Dense(4), L.ReLU(), L.Dense(3)], (5,), _same, _same),
    "nested_sequential": (
        lambda: nn.Sequential(nn.Sequential(nn.Linear(5, 4), nn.Tanh()), nn.Linear(4, 3)),
        lambda: [Sequential([L.Dense(4), L.Tanh()]), L.Dense(3)], (5,), _same, _same),
    "conv1d_flatten": (
        lambda: nn.Sequential(nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), nn.ReLU(),
                              nn.MaxPool1d(2), nn.Conv1d(6, 4, 3, padding=2, dilation=2),
                              nn.Flatten(), nn.Linear(8, 3)),
        lambda: [L.Conv1D(6, 3, stride=2, padding=1, groups=2), L.ReLU(), L.MaxPool1D(2),
                 L.Conv1D(4, 3, padding=2, dilation=2), L.Flatten(), L.Dense(3)],
        (9, 4), _cf, _same),
    "padding_conv2d": (
        lambda: nn.Sequential(nn.ReflectionPad2d((1, 2, 0, 1)), nn.Conv2d(3, 4, 3),
                              nn.ReplicationPad2d(1), nn.ZeroPad2d((0, 1, 2, 0)),
                              nn.Conv2d(4, 2, 2), nn.CircularPad2d(1), nn.Flatten(),
                              nn.Linear(2 * 9 * 11, 3)),
        lambda: [L.ReflectionPad2D((1, 2, 0, 1)), L.Conv2D(4, 3), L.ReplicationPad2D(1),
                 L.ZeroPad2D((0, 1, 2, 0)), L.Conv2D(2, 2), L.CircularPad2D(1), L.Flatten(),
                 L.Dense(3)],
        (5, 6, 3), _cf, _same),
    "pixel_shuffle": (
        lambda: nn.Sequential(nn.Conv2d(3, 8, 1), nn.PixelShuffle(2), nn.ChannelShuffle(2),
                              nn.PixelUnshuffle(2), nn.Conv2d(8, 2, 1)),
        lambda: [L.Conv2D(8, 1), L.PixelShuffle(2), L.ChannelShuffle(2), L.PixelUnshuffle(2),
                 L.Conv2D(2, 1)], (4, 5, 3), _cf, _cl),
    "unfold_fold": (
        lambda: nn.Sequential(nn.Conv2d(2, 3, 1), nn.Unfold(2, stride=2),
                              nn.Fold((6, 6), 2, stride=2), nn.Conv2d(3, 2, 1)),
        lambda: [L.Conv2D(3, 1), L.Unfold(2, stride=2), L.Fold((6, 6), 2, stride=2),
                 L.Conv2D(2, 1)], (6, 6, 2), _cf, _cl),
    "conv2d_batch_norm": (
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False),
                              nn.BatchNorm2d(4), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                              nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 3)),
        lambda: [L.Conv2D(4, 3, stride=2, padding=1, bias=False), L.BatchNorm(), L.ReLU(),
                 L.AvgPool2D(2), L.Flatten(), L.BatchNorm(), L.Dropout(0.5), L.Dense(3)],
        (8, 7, 3), _cf, _same),
    "channel_dropout_between_convs": (
        lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1),
                              nn.AlphaDropout(0.2), nn.FeatureAlphaDropout(0.3)),
        lambda: [L.Conv2D(4, 1), L.Dropout2D(0.5), L.Conv2D(2, 1), L.AlphaDropout(0.2),
                 L.FeatureAlphaDropout(0.3)], (5, 4, 3), _cf, _cl),
    "conv_transpose1d": (
        lambda: nn.Sequential(nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1,
                                                 output_padding=1, groups=2),
                              nn.ConvTranspose1d(6, 2, 2, dilation=2)),
        lambda: [L.ConvTranspose1D(6, 3, stride=2, padding=1, output_padding=1, groups=2),
                 L.ConvTranspose1D(2, 2, dilation=2)], (5, 4), _cf, _cl),
    "conv_transpose2d": (
        lambda: nn.Sequential(nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=(1, 0),
                                                 output_padding=(1, 0), groups=2,
                                                 dilation=(1, 2))),
        lambda: [L.ConvTranspose2D(6, (3, 2), stride=2, padding=(1, 0),
                                   output_padding=(1, 0), groups=2, dilation=(1, 2))],
        (4, 3, 4), _cf, _cl),
    "prelu_glu": (
        lambda: nn.Sequential(nn.Conv1d(4, 6, 1), nn.PReLU(6), nn.GLU(dim=1), nn.PReLU(),
                              nn.Flatten(), nn.PReLU(15), nn.Linear(15, 4)),
        lambda: [L.Conv1D(6, 1), L.PReLU(6), L.GLU(), L.PReLU(), L.Flatten(), L.PReLU(15),
                 L.Dense(4)], (5, 4), _cf, _same),
    "conv3d_pools_flatten": (
        lambda: nn.Sequential(nn.Conv3d(2, 4, (3, 2, 3), stride=(1, 2, 1), padding=1,
                                        groups=2), nn.ReLU(), nn.MaxPool3d(2),
                              nn.AvgPool3d(1), nn.Flatten(), nn.Linear(32, 3)),
        lambda: [L.Conv3D(4, (3, 2, 3), stride=(1, 2, 1), padding=1, groups=2), L.ReLU(),
                 L.MaxPool3D(2), L.AvgPool3D(1), L.Flatten(), L.Dense(3)],
        (4, 6, 5, 2), _cf, _same),
    "conv_transpose3d": (
        lambda: nn.Sequential(nn.ConvTranspose3d(4, 2, (2, 3, 2), stride=(2, 1, 2),
                                                 padding=(0, 1, 1), output_padding=(1, 0, 1),
                                                 dilation=(1, 2, 1), groups=2)),
        lambda: [L.ConvTranspose3D(2, (2, 3, 2), stride=(2, 1, 2), padding=(0, 1, 1),
                                   output_padding=(1, 0, 1), dilation=(1, 2, 1), groups=2)],
        (3, 4, 3, 4), _cf, _cl),
    "conv_padding_modes": (
        lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
                              nn.Conv2d(3, 4, (3, 2), padding=(2, 1), padding_mode="circular"),
                              nn.Conv2d(4, 2, 2, stride=2, padding=1,
                                        padding_mode="replicate")),
        lambda: [L.Conv2D(3, 3, padding=1, padding_mode="reflect"),
                 L.Conv2D(4, (3, 2), padding=(2, 1), padding_mode="circular"),
                 L.Conv2D(2, 2, stride=2, padding=1, padding_mode="replicate")],
        (5, 4, 2), _cf, _cl),
    "layer_norm": (lambda: nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6),
                                         nn.LayerNorm(6, bias=False)),
                   lambda: [L.Dense(6), L.LayerNorm(), L.LayerNorm(bias=False)], (3, 5),
                   _same, _same),
    "rms_norm": (lambda: nn.Sequential(nn.Linear(5, 6), nn.RMSNorm(6),
                                       nn.RMSNorm(6, eps=1e-3, elementwise_affine=False)),
                 lambda: [L.Dense(6), L.RMSNorm(), L.RMSNorm(eps=1e-3, elementwise_affine=False)],
                 (3, 5), _same, _same),
    "rms_norm_over_conv_map": (
        lambda: nn.Sequential(nn.Conv2d(2, 3, 1), nn.RMSNorm([3, 4, 5])),
        lambda: [L.Conv2D(3, 1), L.RMSNorm(axes=3)], (4, 5, 2), _cf, _cl),
    "layer_norm_over_conv_map": (
        lambda: nn.Sequential(nn.Conv2d(2, 3, 1), nn.LayerNorm([3, 4, 5])),
        lambda: [L.Conv2D(3, 1), L.LayerNorm(axes=3)], (4, 5, 2), _cf, _cl),
    "group_instance_norm": (Norms, lambda: [
        L.Conv1D(4, 1), L.InstanceNorm(affine=True, track_running_stats=True),
        L.GroupNorm(2), L.InstanceNorm()], (6, 3), _cf, _cl),
    "embedding_lstm": (
        lambda: Head(nn.Embedding(10, 4), nn.LSTM(4, 3, num_layers=2, bidirectional=True,
                                                  batch_first=True), call=_rnn),
        lambda: [L.Embedding(10, 4), L.LSTM(3, num_layers=2, bidirectional=True)], (6,),
        _same, _same),
    "gru": (lambda: Head(nn.GRU(4, 3, num_layers=2, batch_first=True), call=_rnn),
            lambda: [L.GRU(3, num_layers=2)], (6, 4), _same, _same),
    "rnn": (lambda: Head(nn.RNN(4, 3, nonlinearity="relu", bidirectional=True, bias=False,
                                batch_first=True), call=_rnn),
            lambda: [L.RNN(3, nonlinearity="relu", bidirectional=True, bias=False)], (6, 4),
            _same, _same),
    "cells": (lambda: nn.Sequential(nn.GRUCell(4, 3), nn.RNNCell(3, 2, nonlinearity="relu")),
              lambda: [L.GRUCell(3), L.RNNCell(2, nonlinearity="relu")], (4,), _same, _same),
    "attention_packed": (
        lambda: Head(nn.MultiheadAttention(8, 2, batch_first=True), call=_self_attention),
        lambda: [L.MultiHeadAttention(8, 2)], (5, 8), _same, _same),
    "attention_unpacked_same_dims": (
        lambda: Head(nn.MultiheadAttention(8, 2, batch_first=True), call=_self_attention),
        lambda: [L.MultiHeadAttention(8, 2, packed=False)], (5, 8), _same, _same),
    "residual": (ResidualNet, lambda: [
        L.Conv2D(4, 1), L.Residual(Sequential([L.Conv2D(4, 3, padding=1), L.BatchNorm(),
                                               L.ReLU()]), L.Conv2D(4, 1, bias=False)),
        L.GlobalAvgPool2D(), L.Dense(2)], (5, 6, 3), _cf, _same),
}
SEQUENTIAL_TWINS = ("dense", "cells", "nested_sequential", "conv1d_flatten", "conv2d_batch_norm",
                    "padding_conv2d", "pixel_shuffle", "unfold_fold",
                    "conv_transpose1d", "conv_transpose2d", "conv3d_pools_flatten",
                    "conv_transpose3d", "conv_padding_modes", "layer_norm", "prelu_glu",
                    "layer_norm_over_conv_map")


def _input(case, shape, rng, dtype=np.float32):
    if case == "embedding_lstm":
        return rng.integers(0, 10, (3, *shape))
    return rng.standard_normal((3, *shape)).astype(dtype)


def _torch_output(module, x, to_torch, from_torch_layout):
    with torch.no_grad():
        return from_torch_layout(module(torch.from_numpy(to_torch(x))).numpy())


def assert_matches(actual, expected, model, x, **inputs):
    """handgrad's ``actual`` output of ``model`` on ``x`` against torch's ``expected``,
    both rounded in the model's dtype, within the model's rounding tolerance."""
    terms, scale = network_bounds(model, x, **inputs)
    assert_close(actual, expected, dtype=actual.dtype, terms=terms, scale=scale, what="output")


def _build(case, seed, dtype="float32"):
    torch_model, layers, shape, *_ = CASES[case]
    module = randomize(torch_model(), seed)
    if dtype == "float64":
        module = module.double()
    return module, Sequential(layers(), input_shape=shape, seed=seed + 1, dtype=dtype), shape


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_matches_torch_and_round_trips(case):
    seed = sorted(CASES).index(case)
    module, model, shape = _build(case, seed)
    _, _, _, to_torch, back = CASES[case]
    assert from_torch(module, model) is model
    x = _input(case, shape, np.random.default_rng(seed))
    assert_matches(model.predict(x), _torch_output(module, x, to_torch, back), model, x)
    # handgrad -> torch state dict: the same values, in torch's order, exactly
    state = to_torch_state_dict(model)
    expected = [v for k, v in module.state_dict().items() if "num_batches" not in k]
    ours = [v for k, v in state.items() if "num_batches" not in k]
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
        assert a.dtype == b.dtype and torch.equal(a, b)
    if case in SEQUENTIAL_TWINS:  # the names are nn.Sequential's
        assert list(state) == list(module.state_dict())
        module.load_state_dict(state, strict=True)
    # ... -> a fresh handgrad model: bit for bit
    fresh = Sequential(CASES[case][1](), input_shape=shape, seed=seed + 7)
    from_torch(state, fresh)
    for old, new in ((model.named_parameters(), fresh.named_parameters()),
                     (model.named_buffers(), fresh.named_buffers())):
        assert list(old) == list(new)
        for key in old:
            np.testing.assert_array_equal(old[key], new[key], err_msg=key)


def test_float64_import():
    module, model, shape = _build("conv2d_batch_norm", 3, "float64")
    from_torch(module, model)
    x = _input("conv2d_batch_norm", shape, np.random.default_rng(0), np.float64)
    assert_matches(model.predict(x), _torch_output(module, x, _cf, _same), model, x)
    assert to_torch_state_dict(model)["0.weight"].dtype == torch.float64


def test_separate_projections_cross_attention():
    module = randomize(nn.MultiheadAttention(8, 2, kdim=5, vdim=6, batch_first=True), 0)
    layer = L.MultiHeadAttention(8, 2, kdim=5, vdim=6, packed=False, seed=1).build((4, 8))
    from_torch(module, layer)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, t, f), dtype=np.float32)
               for t, f in ((4, 8), (3, 5), (3, 6)))
    with torch.no_grad():
        expected = module(*map(torch.from_numpy, (q, k, v)), need_weights=False)[0].numpy()
    assert_matches(layer.forward(q, training=False, key=k, value=v), expected, layer, q, key=k,
                   value=v)
    state = to_torch_state_dict(layer)
    assert list(state) == list(module.state_dict())
    module.load_state_dict(state, strict=True)


def _dense_model(out=3):
    return Sequential([L.Dense(4), L.ReLU(), L.Dense(out)], input_shape=(5,), seed=0)


def test_mismatch_lists_missing_unexpected_and_mismatched():
    model = _dense_model()
    before = {k: v.copy() for k, v in model.named_parameters().items()}
    state = {"0.weight": torch.zeros(4, 5), "0.bias": torch.zeros(4),
             "2.weight": torch.zeros(2, 4), "extra.weight": torch.zeros(1)}
    with pytest.raises(ValueError) as info:
        from_torch(state, model)
    message = str(info.value)
    assert message.startswith("from_torch: the torch weights do not match the model")
    assert "missing ['2.bias (handgrad dense_2.b)']" in message
    assert "unexpected ['extra.weight']" in message
    assert "mismatched shapes ['2.weight: torch (2, 4) vs expected (3, 4) " \
           "(handgrad dense_2.W)']" in message
    for key, value in model.named_parameters().items():  # nothing was copied
        np.testing.assert_array_equal(value, before[key])


def test_torch_model_with_fewer_layers():
    with pytest.raises(ValueError, match=r"missing \['<unmatched>.weight \(handgrad "
                                         r"dense_2.W\)', '<unmatched>.bias"):
        from_torch(nn.Sequential(nn.Linear(5, 4)), _dense_model())


class NamedOutOfOrder(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 3)  # registered first, runs last
        self.body = nn.Linear(5, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def test_prefixes_match_by_name(tmp_path):
    from safetensors.torch import save_file

    module = randomize(NamedOutOfOrder(), 0)
    with pytest.raises(ValueError, match="mismatched shapes"):
        from_torch(module, _dense_model())
    path = tmp_path / "named.safetensors"
    save_file(module.state_dict(), str(path))
    x = np.random.default_rng(0).standard_normal((2, 5), dtype=np.float32)
    for source in (module, path):
        model = from_torch(source, _dense_model(), prefixes={"dense_0": "body",
                                                            "dense_2": "head"})
        assert_matches(model.predict(x), _torch_output(module, x, _same, _same), model, x)
    with pytest.raises(ValueError, match=r"'prefixes' names \['dense_9'\].*\['dense_0', "
                                         r"'dense_2'\]"):
        from_torch(module, _dense_model(), prefixes={"dense_9": "body"})


def test_safetensors_file_without_torch(tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file

    module, model, shape = _build("conv2d_batch_norm", 5)
    x = _input("conv2d_batch_norm", shape, np.random.default_rng(0))
    expected = _torch_output(module, x, _cf, _same)
    path = tmp_path / "torch.safetensors"
    save_file(module.state_dict(), str(path))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(ImportError):
        import torch as _  # noqa: F401
    from_torch(str(path), model)
    assert_matches(model.predict(x), expected, model, x)
    with pytest.raises(ImportError, match="to_torch_state_dict: torch is not installed; "
                                          "pass numpy=True"):
        to_torch_state_dict(model)
    arrays = to_torch_state_dict(model, numpy=True)
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    _safetensors.write(tmp_path / "back.safetensors", arrays)
    monkeypatch.undo()
    module.load_state_dict(load_file(str(tmp_path / "back.safetensors")), strict=True)
    np.testing.assert_array_equal(_torch_output(module, x, _cf, _same), expected)


def test_safetensors_file_in_a_process_without_torch(tmp_path):
    from safetensors.torch import save_file

    module = randomize(nn.Sequential(*[nn.Linear(3, 3) for _ in range(11)]), 0)
    path = tmp_path / "eleven.safetensors"  # the file holds "10.weight" before "2.weight"
    save_file(module.state_dict(), str(path))
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        import numpy as np
        from handgrad import layers as L
        from handgrad.io import from_torch
        from handgrad.model import Sequential
        model = Sequential([L.Dense(3) for _ in range(11)], input_shape=(3,), seed=0)
        from_torch({str(path)!r}, model)
        np.save({str(tmp_path / "y.npy")!r}, model.predict(np.eye(3, dtype=np.float32)))
        assert sys.modules["torch"] is None
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    x = np.eye(3, dtype=np.float32)
    twin = from_torch(str(path), Sequential([L.Dense(3) for _ in range(11)], input_shape=(3,)))
    assert_matches(np.load(tmp_path / "y.npy"), _torch_output(module, x, _same, _same), twin, x)


def test_layers_without_a_torch_twin_and_bad_arguments():
    wavenet = Sequential([L.WaveNetBlock(2)], input_shape=(4, 2), seed=0)
    for call in (lambda: from_torch({}, wavenet), lambda: to_torch_state_dict(wavenet)):
        with pytest.raises(ValueError, match="WaveNetBlock 'wave_net_block_0' has weights but "
                                             "no torch twin"):
            call()
    flat_groups = Sequential([L.Conv1D(4, 1), L.Flatten(), L.GroupNorm(2)], input_shape=(3, 2))
    with pytest.raises(ValueError, match="GroupNorm 'group_norm_2' normalizes features "
                                         "flattened"):
        to_torch_state_dict(flat_groups)
    partial = Sequential([L.Conv2D(2, 1), L.LayerNorm(axes=2)], input_shape=(3, 3, 2))
    with pytest.raises(ValueError, match="LayerNorm 'layer_norm_1' normalizes some but not "
                                         "all axes"):
        from_torch({}, partial)
    doubled = Sequential([Doubled(L.Dense(2))], input_shape=(2,), seed=0)
    with pytest.raises(ValueError, match=r"Doubled 'doubled_0' \(Doubled\) has no torch "
                                         r"twin \(interop enters Sequential, Residual and "
                                         r"graph Models\)"):
        to_torch_state_dict(doubled)
    with pytest.raises(ValueError, match="from_torch: the model is not built"):
        from_torch({}, Sequential([L.Dense(2)]))
    with pytest.raises(TypeError, match="from_torch: 'source' must be a torch module, a "
                                        "state dict or the path"):
        from_torch(42, _dense_model())
