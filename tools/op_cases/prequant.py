"""The layers of pre-quantized sources: ConvInteger and MatMulInteger on integer graph
inputs (uint8/int8 Input layers), with the params the parser writes (zero points, the
window params, int32 biases), and FakeQuantWithMinMaxVars over every branch of its range
handling (a range across zero, above zero, below zero; narrow_range; 2 to 16 bits).

Integer inputs take integer values; a uint8 input feeding a ConvInteger directly is
quantized by the tool chain's reader as f + x_zero_point, so its values stay below 256 -
x_zero_point."""
import numpy as np
import torch

from op_cases.common import Case, integer_inputs


def _window(k, stride=1, dilation=1, pads=(0, 0, 0, 0), group=1):
    return dict(kernel_y=k[0], kernel_x=k[1], stride_y=stride, stride_x=stride, dilation_y=dilation,
                dilation_x=dilation, pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3],
                group=group)


def _conv_integer(b, name, x, weights, biases, x_zp, w_zp, **window):
    params = dict(_window(**window), num_output=weights.shape[0], x_zero_point=x_zp, w_zero_point=w_zp)
    return b.layer("ConvInteger", name, [x], params, {"weights": weights, "biases": biases})[0]


def _u8(rng, *shape):
    return torch.from_numpy(rng.integers(0, 256, shape).astype(np.uint8))


def _convinteger(b, rng, x):
    """Three ConvInteger layers on one uint8 input [N,6,7,4] (one x_zero_point for all, as
    they share the input): padded 3x3 uint8 weights with w_zero_point 130 and the parser's
    zero biases; 2x3 int8 weights at stride 2, dilation 2 with w_zero_point -7 and biases;
    a grouped 3x3 (2 groups) padded on one side only."""
    zero = torch.zeros(5, dtype=torch.int32)
    i8 = torch.from_numpy(rng.integers(-128, 128, (6, 2, 3, 4)).astype(np.int8))
    biases = torch.from_numpy(rng.integers(-5000, 5000, 6).astype(np.int32))
    return [_conv_integer(b, "padded", x[0], _u8(rng, 5, 3, 3, 4), zero, 23, 130, k=(3, 3), pads=(1, 1, 1, 1)),
            _conv_integer(b, "strided", x[0], i8, biases, 23, -7, k=(2, 3), stride=2, dilation=2),
            _conv_integer(b, "grouped", x[0], _u8(rng, 4, 3, 3, 2), torch.zeros(4, dtype=torch.int32), 23, 0,
                          k=(3, 3), pads=(0, 2, 1, 0), group=2)]


def _convinteger_nchw(b, rng, x):
    """As the parser writes a ConvInteger of an NCHW model: the uint8 input [N,4,6,7]
    transposed to NHWC first (the graph input keeps zero point 0 and takes its values as
    they are; the transposed tensor carries -x_zero_point)."""
    nhwc = b.layer("Transpose", "to_nhwc", [x[0]], dict(perm=[0, 2, 3, 1]))[0]
    return [_conv_integer(b, "conv", nhwc, _u8(rng, 6, 3, 3, 4), torch.zeros(6, dtype=torch.int32), 128, 77,
                          k=(3, 3), pads=(1, 1, 1, 1))]


def _matmulinteger(b, rng, x):
    """int8 A [N,3,5] times uint8 B [N,5,4] (zero points 3 and 200), and A times an int8
    constant [5,6] (zero points -128 and 0)."""
    b_const = b.layer("Constant", "b_const", [], {}, {"weights": torch.from_numpy(
        rng.integers(-128, 128, (5, 6)).astype(np.int8))})[0]
    return [b.layer("MatMulInteger", "two_inputs", [x[0], x[1]], dict(a_zero_point=3, b_zero_point=200))[0],
            b.layer("MatMulInteger", "constant_b", [x[0], b_const], dict(a_zero_point=-128, b_zero_point=0))[0]]


FAKE_QUANT = [("across_zero", -1.3, 2.1, 8, False), ("narrow_4bit", -0.7, 0.6, 4, True),
              ("above_zero", 0.25, 1.5, 5, False), ("below_zero", -2.0, -0.5, 8, True),
              ("lopsided", -2.0, 0.1, 8, False), ("wide_16bit", -3.0, 3.0, 16, False),
              ("two_bits", -1.0, 1.0, 2, True)]


def _fakequant(b, rng, x):
    """FakeQuantWithMinMaxVars over every range branch (FAKE_QUANT: name, min, max, num_bits,
    narrow_range), each on the input; the lopsided range's zero point passes the tool
    chain's limit of +-127 and is clamped there."""
    return [b.layer("FakeQuantWithMinMaxVars", name, [x[0]], dict(min=lo, max=hi, num_bits=bits, narrow_range=narrow))[0]
            for name, lo, hi, bits, narrow in FAKE_QUANT]


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("convinteger", "ConvInteger on a uint8 graph input: padded, strided and dilated with int8 weights and "
         "biases, grouped", [(6, 7, 4)], _convinteger, data=integer_inputs((0, 200)), dtypes=("uint8",),
         run_as_floats=True),
    Case("convinteger_nchw", "ConvInteger of an NCHW uint8 input transposed to NHWC, as the parser writes it",
         [(4, 6, 7)], _convinteger_nchw, data=integer_inputs((0, 255)), dtypes=("uint8",)),
    Case("matmulinteger", "MatMulInteger of int8 and uint8 graph inputs, and of an int8 input and int8 constants",
         [(3, 5), (5, 4)], _matmulinteger, data=integer_inputs((-128, 127), (0, 255)), dtypes=("int8", "uint8")),
    Case("fakequant", "FakeQuantWithMinMaxVars over a range across, above and below zero, narrow ranges, 2 to 16 "
         "bits", [(4, 6)], _fakequant, calib_range=(-3.0, 3.0), run_range=(-3.5, 3.5)),
    Case("fakequant_asym", "the same with asymmetric activations", [(4, 6)], _fakequant, ASYM,
         calib_range=(-1.0, 3.0), run_range=(-1.5, 3.5)),
]
