"""Every documented bad input raises a clear error naming the argument, what was
expected and what was received."""

import numpy as np
import pytest

from handgrad import ops

X2 = np.zeros((2, 6, 6, 4))
W2 = np.zeros((3, 3, 4, 8))
X1 = np.zeros((2, 9, 4))
W1 = np.zeros((3, 4, 8))
WT2 = np.zeros((3, 3, 2, 4))  # conv_transpose2d: (KH, KW, C_out // groups, C_in)

ERROR_CASES = [
    # (id, op, args, kwargs, exception, fragments that the message must contain)
    ("conv2d-x-ndim", ops.conv2d, (np.zeros((6, 6, 4)), W2), {}, ValueError,
     ["'x'", "4-D", "(N, H, W, C)", "(6, 6, 4)"]),
    ("conv2d-w-ndim", ops.conv2d, (X2, np.zeros((3, 4, 8))), {}, ValueError,
     ["'w'", "4-D", "(3, 4, 8)"]),
    ("conv1d-x-ndim", ops.conv1d, (X2, W1), {}, ValueError, ["'x'", "3-D", "(N, L, C)"]),
    ("conv2d-channels", ops.conv2d, (X2, np.zeros((3, 3, 3, 8))), {}, ValueError,
     ["'w'", "3 input channels", "4 channels"]),
    ("conv2d-groups-divisible", ops.conv2d, (X2, np.zeros((3, 3, 1, 6))), {"groups": 3},
     ValueError, ["input channels (4)", "divisible by groups (3)"]),
    ("conv2d-out-groups", ops.conv2d, (X2, np.zeros((3, 3, 2, 5))), {"groups": 2},
     ValueError, ["C_out = 5", "divisible by groups (2)"]),
    ("conv2d-groups-zero", ops.conv2d, (X2, W2), {"groups": 0}, ValueError,
     ["'groups'", "received 0"]),
    ("conv2d-stride-zero", ops.conv2d, (X2, W2), {"stride": 0}, ValueError,
     ["'stride'", ">= 1", "received 0"]),
    ("conv2d-stride-tuple", ops.conv2d, (X2, W2), {"stride": (1, 0)}, ValueError,
     ["'stride'", "(1, 0)"]),
    ("conv2d-stride-float", ops.conv2d, (X2, W2), {"stride": 1.5}, TypeError,
     ["'stride'", "1.5"]),
    ("conv2d-stride-bool", ops.conv2d, (X2, W2), {"stride": True}, TypeError,
     ["'stride'", "True"]),
    ("conv2d-dilation-zero", ops.conv2d, (X2, W2), {"dilation": 0}, ValueError,
     ["'dilation'", "received 0"]),
    ("conv2d-padding-negative", ops.conv2d, (X2, W2), {"padding": -1}, ValueError,
     ["'padding'", ">= 0", "-1"]),
    ("conv2d-padding-pair-negative", ops.conv2d, (X2, W2), {"padding": ((0, -1), (1, 1))},
     ValueError, ["'padding'", "((0, -1), (1, 1))"]),
    ("conv2d-padding-string", ops.conv2d, (X2, W2), {"padding": "full"}, ValueError,
     ["'padding'", "'valid'", "'same'", "'full'"]),
    ("conv2d-padding-causal", ops.conv2d, (X2, W2), {"padding": "causal"}, ValueError,
     ["'padding'", "'causal'"]),
    ("conv2d-padding-length", ops.conv2d, (X2, W2), {"padding": (1, 1, 1)}, TypeError,
     ["'padding'", "(1, 1, 1)"]),
    ("conv2d-output-size", ops.conv2d, (np.zeros((1, 2, 6, 4)), W2), {}, ValueError,
     ["spatial axis 0", "would be 0", "input size 2", "kernel span 3"]),
    ("conv2d-dilated-output-size", ops.conv2d, (X2, W2), {"dilation": (1, 3)}, ValueError,
     ["spatial axis 1", "kernel span 7"]),
    ("conv2d-bias-shape", ops.conv2d, (X2, W2, np.zeros(4)), {}, ValueError,
     ["'b'", "(8,)", "(4,)"]),
    ("conv2d-int-x", ops.conv2d, (X2.astype(np.int64), W2), {}, TypeError,
     ["'x'", "float32 or float64", "int64"]),
    ("conv2d-bool-x", ops.conv2d, (X2.astype(bool), W2), {}, TypeError, ["'x'", "bool"]),
    ("conv2d-complex-w", ops.conv2d, (X2, W2.astype(np.complex128)), {}, TypeError,
     ["'w'", "complex128"]),
    ("conv2d-object-x", ops.conv2d, (X2.astype(object), W2), {}, TypeError,
     ["'x'", "object"]),
    ("conv2d-not-array", ops.conv2d, ("image", W2), {}, TypeError, ["'x'", "'image'"]),
    ("conv2d-mixed-dtypes", ops.conv2d, (X2.astype(np.float32), W2), {}, TypeError,
     ["'w'", "float64", "'x'", "float32", "no silent casts"]),
    ("conv2d-mixed-bias", ops.conv2d, (X2, W2, np.zeros(8, np.float32)), {}, TypeError,
     ["'b'", "float32"]),
    ("conv_t2d-channels", ops.conv_transpose2d, (X2, np.zeros((3, 3, 2, 3))), {}, ValueError,
     ["'w'", "C_in = 3", "has 4"]),
    ("conv_t2d-groups", ops.conv_transpose2d, (X2, WT2), {"groups": 3}, ValueError,
     ["divisible by groups (3)"]),
    ("conv_t2d-output-padding", ops.conv_transpose2d, (X2, WT2),
     {"stride": 2, "output_padding": 2}, ValueError,
     ["'output_padding'", "smaller than either stride (2) or dilation (1)", "received 2"]),
    ("conv_t2d-output-padding-negative", ops.conv_transpose2d, (X2, WT2),
     {"output_padding": -1}, ValueError, ["'output_padding'", ">= 0"]),
    ("conv_t2d-output-size", ops.conv_transpose2d, (np.zeros((1, 1, 1, 4)), WT2),
     {"padding": 2}, ValueError, ["spatial axis 0", "would be -1"]),
    ("conv_t1d-stride", ops.conv_transpose1d, (X1, np.zeros((3, 2, 4))), {"stride": -2},
     ValueError, ["'stride'", "-2"]),
    ("max_pool2d-ndim", ops.max_pool2d, (X1, 2), {}, ValueError, ["'x'", "4-D", "(2, 9, 4)"]),
    ("max_pool2d-pad-half", ops.max_pool2d, (X2, 3), {"padding": 2}, ValueError,
     ["'padding'", "half the kernel", "received 2"]),
    ("max_pool1d-pad-half", ops.max_pool1d, (X1, 2), {"padding": 2}, ValueError,
     ["'padding'", "half"]),
    ("max_pool2d-kernel-zero", ops.max_pool2d, (X2, 0), {}, ValueError,
     ["'kernel_size'", "received 0"]),
    ("max_pool2d-stride-zero", ops.max_pool2d, (X2, 2), {"stride": 0}, ValueError,
     ["'stride'"]),
    ("max_pool2d-dilation-zero", ops.max_pool2d, (X2, 2), {"dilation": 0}, ValueError,
     ["'dilation'"]),
    ("max_pool2d-negative-pad", ops.max_pool2d, (X2, 2), {"padding": -1}, ValueError,
     ["'padding'", "-1"]),
    ("max_pool2d-ceil-mode", ops.max_pool2d, (X2, 2), {"ceil_mode": 1}, TypeError,
     ["'ceil_mode'", "bool"]),
    ("max_pool2d-output-size", ops.max_pool2d, (X2, 7), {}, ValueError,
     ["spatial axis 0", "would be 0"]),
    ("max_pool2d-int", ops.max_pool2d, (X2.astype(np.int32), 2), {}, TypeError,
     ["'x'", "int32"]),
    ("avg_pool2d-pad-half", ops.avg_pool2d, (X2, 2), {"padding": 2}, ValueError,
     ["'padding'", "half"]),
    ("avg_pool2d-count-include-pad", ops.avg_pool2d, (X2, 2), {"count_include_pad": "yes"},
     TypeError, ["'count_include_pad'", "'yes'"]),
    ("avg_pool2d-divisor", ops.avg_pool2d, (X2, 2), {"divisor_override": 0}, ValueError,
     ["'divisor_override'", "non-zero"]),
    ("avg_pool1d-output-size", ops.avg_pool1d, (X1, 10), {}, ValueError,
     ["spatial axis 0", "would be 0"]),
    ("global_avg-ndim", ops.global_avg_pool, (np.zeros((2, 3)),), {}, ValueError,
     ["'x'", "3-D or 4-D"]),
    ("global_max-complex", ops.global_max_pool, (X2.astype(np.complex64),), {}, TypeError,
     ["'x'", "complex64"]),
    ("global_max-keepdims", ops.global_max_pool, (X2,), {"keepdims": None}, TypeError,
     ["'keepdims'"]),
]


@pytest.mark.parametrize(
    "op, args, kwargs, exception, fragments",
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_bad_input_raises_a_helpful_error(op, args, kwargs, exception, fragments):
    with pytest.raises(exception) as info:
        op(*args, **kwargs)
    message = str(info.value)
    assert message.startswith(op.__name__), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


BACKWARD_CASES = [
    (ops.conv2d, ops.conv2d_backward, (X2, W2), {"padding": 1}),
    (ops.conv_transpose2d, ops.conv_transpose2d_backward, (X2, WT2), {}),
    (ops.max_pool2d, ops.max_pool2d_backward, (X2, 2), {}),
    (ops.avg_pool1d, ops.avg_pool1d_backward, (X1, 3), {}),
    (ops.global_max_pool, ops.global_max_pool_backward, (X2,), {}),
    (ops.global_avg_pool, ops.global_avg_pool_backward, (X1,), {}),
]


@pytest.mark.parametrize("forward, backward, args, kwargs", BACKWARD_CASES,
                         ids=[c[1].__name__ for c in BACKWARD_CASES])
def test_backward_checks_dy(forward, backward, args, kwargs):
    y, cache = forward(*args, **kwargs)
    with pytest.raises(ValueError, match=r"'dy' must have the forward output's shape"):
        backward(np.zeros(y.shape + (1,)), cache)
    with pytest.raises(TypeError, match=r"'dy' must have the forward dtype float64"):
        backward(y.astype(np.float32), cache)
    with pytest.raises(TypeError, match=r"'dy' must have dtype float32 or float64"):
        backward(y.astype(np.int64), cache)
