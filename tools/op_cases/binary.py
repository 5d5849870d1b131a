"""Op cases of the broadcasting arithmetic layers: Add, Sub, Mul (broadcast over several
ranks, constant operands, fused activations), Div, SquaredDifference and Gemm."""
import numpy as np

from op_cases.common import Case, uniform, weights


def _const(b, rng, name, *shape, scale=0.5):
    return b.layer("Constant", name, [], {}, {"weights": weights(rng, *shape, scale=scale)})[0]


def _arith(b, name, optype, x, y, act="NONE"):
    params = dict(with_activation=act)
    if act == "LEAKYRELU":
        params["negative_slope_type"], params["negative_slope_value"] = "float32", 0.1
    return b.layer(optype, name, [x, y], params)[0]


def _broadcast(b, rng, x):
    """[N,4,4,6] with [N,4,1,1], and with constants of ranks 1 to 3: [1], [6], [4,1,6]."""
    scalar = _const(b, rng, "scalar", 1)
    row = _const(b, rng, "row", 6, scale=2.0)
    plane = _const(b, rng, "plane", 4, 1, 6)
    return [_arith(b, "add", "Add", x[0], x[1]), _arith(b, "sub", "Sub", x[1], x[0]),
            _arith(b, "mul", "Mul", x[0], x[1]), _arith(b, "mul_scalar", "Mul", x[0], scalar),
            _arith(b, "add_row", "Add", row, x[0]), _arith(b, "sub_plane", "Sub", x[0], plane),
            _arith(b, "mul_plane", "Mul", plane, x[1])]


def _fused(b, rng, x):
    return [_arith(b, "add_relu", "Add", x[0], x[1], "RELU"), _arith(b, "sub_leaky", "Sub", x[0], x[1], "LEAKYRELU"),
            _arith(b, "mul_relu6", "Mul", x[1], x[0], "RELU6")]


def _div(b, rng, x):
    scalar = _const(b, rng, "divisor", 1)
    return [b.layer("Div", "div", [x[0], x[1]], {})[0], b.layer("Div", "div_const", [x[0], scalar], {})[0],
            b.layer("Div", "div_by_x", [x[1], x[0]], {})[0]]


def _divisors(rng, shapes, n, value_range, run):
    """A dividend in the range, a divisor of magnitude [0.25, 2] with either sign, and on
    the run a zero dividend and a divisor past its calibrated range."""
    x = uniform(rng, value_range, (n,) + shapes[0])
    y = uniform(rng, (0.25, 2.0), (n,) + shapes[1]) * rng.choice([-1.0, 1.0], (n,) + shapes[1])
    if run:
        x[0, 0, 0, :] = 0.0
        y[0, 0, 0, :2] = [3.0, -0.1]
    return [x.astype(np.float32), y.astype(np.float32)]


def _squared_difference(b, rng, x):
    c = _const(b, rng, "centre", 1, 1, 6)
    return [b.layer("SquaredDifference", "sqd", [x[0], x[1]], {})[0],
            b.layer("SquaredDifference", "sqd_const", [c, x[0]], {})[0]]


def _gemm(b, rng, x):
    """A [N,8] by a constant B, with a constant C (broadcast [5]), alpha/beta of either
    sign; and without C, alpha < 0."""
    bt = _const(b, rng, "b_t", 5, 8)
    bn = _const(b, rng, "b", 8, 5)
    c = _const(b, rng, "c", 5, scale=2.0)
    return [b.layer("Gemm", "gemm", [x[0], bt, c], dict(trans_a=False, trans_b=True, alpha=0.5, beta=1.0))[0],
            b.layer("Gemm", "gemm_neg", [x[0], bn, c], dict(trans_a=False, trans_b=False, alpha=1.5, beta=-2.0))[0],
            b.layer("Gemm", "gemm_no_c", [x[0], bn], dict(trans_a=False, trans_b=False, alpha=-0.75, beta=1.0))[0]]


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("binary_broadcast", "Add/Sub/Mul broadcasting [N,4,4,6] with [N,4,1,1] and constants of ranks 1 to 3",
         [(4, 4, 6), (4, 1, 1)], _broadcast),
    Case("binary_broadcast_asym", "the same with asymmetric activations", [(4, 4, 6), (4, 1, 1)],
         _broadcast, ASYM, calib_range=(-0.4, 1.6), run_range=(-0.4, 1.6)),
    Case("binary_broadcast_act16", "the same on 16-bit activations", [(4, 4, 6), (4, 1, 1)],
         _broadcast, dict(activation_bits="16")),
    Case("binary_fused", "Add/Sub/Mul with fused RELU/LEAKYRELU/RELU6, asymmetric activations",
         [(3, 4, 6), (3, 1, 6)], _fused, ASYM, calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
    Case("div", "Div by a broadcast divisor of either sign, by a constant, and of [N,3,1,4] by [N,3,4,4]",
         [(3, 4, 4), (3, 1, 4)], _div, data=_divisors),
    Case("div_act16", "Div on 16-bit activations (interpolated reciprocal table), asymmetric",
         [(3, 4, 4), (3, 1, 4)], _div, dict(activation_bits="16", **ASYM), data=_divisors),
    Case("squared_difference", "SquaredDifference broadcast, and of a constant", [(4, 4, 6), (4, 1, 6)],
         _squared_difference, ASYM, calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
    Case("squared_difference_act16", "SquaredDifference on 16-bit activations", [(4, 4, 6), (4, 1, 6)],
         _squared_difference, dict(activation_bits="16")),
    Case("gemm", "Gemm with a constant B (trans_b), C broadcast, alpha/beta of either sign; without C, "
         "alpha < 0", [(8,)], _gemm),
    Case("gemm_asym", "the same with asymmetric activations", [(8,)], _gemm, ASYM,
         calib_range=(-0.3, 1.7), run_range=(-0.3, 1.7)),
]
