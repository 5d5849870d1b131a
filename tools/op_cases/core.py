"""The first op cases: convolutions, pooling, Eltwise, Concat, shape layers,
Softmax, LUT activations, Resize, Pad, Reduce, LayerNorm, mixed precision."""
import numpy as np
import torch

from op_cases.common import Case, act, conv, eltwise, pool, uniform, weights


def _conv_plain(b, rng, x):
    return [conv(b, rng, "conv", x[0], 4, 6)]


def _conv_pads_zp(b, rng, x):
    return [conv(b, rng, "conv", x[0], 3, 5, k=3, stride=2, pads=(1, 0, 2, 1))]


def _conv_depthwise(b, rng, x):
    return [conv(b, rng, "dw", x[0], 6, 6, group=6, act="RELU6")]


def _conv_grouped(b, rng, x):
    return [conv(b, rng, "gconv", x[0], 4, 6, group=2, dilation=2, pads=(2, 2, 2, 2))]


def _conv_per_channel(b, rng, x):
    return [conv(b, rng, "conv", x[0], 4, 4, channel_scales=[0.05, 0.5, 2.0, 8.0])]


def _fully_connected(b, rng, x):
    w, bias = weights(rng, 10, 16), weights(rng, 10, scale=0.2)
    return b.layer("FullyConnected", "fc", [x[0]], dict(num_output=10, with_activation="RELU"),
                   {"weights": w, "biases": bias})


def _matmul(b, rng, x):
    return b.layer("MatMul", "mm", x, dict(trans_a=False, trans_b=True))


def _matmul_scaled(b, rng, x):
    """Scalings by positive constants before an operand and after the output, which the
    stage-1 pass merge_matmul_mul folds into the MatMul's rescale (fused_multiplier)."""
    before = b.layer("Constant", "scale_a", [], {}, {"weights": torch.tensor([0.35])})[0]
    after = b.layer("Constant", "scale_out", [], {}, {"weights": torch.tensor([0.8])})[0]
    a = b.layer("Mul", "mul_a", [x[0], before])[0]
    mm = b.layer("MatMul", "mm", [a, x[1]], dict(trans_a=False, trans_b=True))[0]
    return b.layer("Mul", "mul_out", [mm, after])


def _pool_max_ceil(b, rng, x):
    return [pool(b, "maxpool", x[0], "MAX", 3, 2, pads=(1, 0, 1, 0), ceil_mode=True)]


def _pool_avg_ceil(b, rng, x):
    return [pool(b, "avgpool", x[0], "AVG", 3, 2, pads=(1, 1, 1, 1), ceil_mode=True),
            pool(b, "avgpool_incl", x[0], "AVG", 3, 2, pads=(1, 1, 1, 1), count_include_pad=True)]


def _eltwise_broadcast(b, rng, x):
    add = eltwise(b, "add", x[0], x[1], "ADD")
    sub = eltwise(b, "sub", x[0], x[1], "SUB")
    mul = eltwise(b, "mul", x[0], x[1], "MUL")
    return [add, sub, mul, eltwise(b, "max", x[0], x[1], "MAX"), eltwise(b, "min", x[0], x[1], "MIN")]


def _concat_scales(b, rng, x):
    small = conv(b, rng, "small", x[0], 4, 3, k=1, pads=(0, 0, 0, 0))
    big = conv(b, rng, "big", x[0], 4, 5, k=1, pads=(0, 0, 0, 0), channel_scales=[20.0] * 5)
    return b.layer("Concat", "cat", [small, big], dict(axis=3))


def _reshape_transpose(b, rng, x):
    t = b.layer("Transpose", "tr", [x[0]], dict(perm=[0, 3, 1, 2]))[0]
    return b.layer("Reshape", "rs", [t], dict(shape=[1, 4, 24]))


def _softmax(b, rng, x):
    """The last axis, non-negative as the parser writes it."""
    return b.layer("Softmax", "softmax", [x[0]], dict(axis=2))


def _lut_activations(b, rng, x):
    return [act(b, "sigmoid", x[0], "SIGMOID"), act(b, "tanh", x[0], "TANH"),
            act(b, "swish", x[0], "SWISH", alpha=1.0), act(b, "gelu", x[0], "GELU", approximate="NONE"),
            act(b, "hardswish", x[0], "HARDSWISH"),
            act(b, "hardsigmoid", x[0], "HARDSIGMOID", alpha=0.2, beta=0.5, clip_min=0.0, clip_max=1.0),
            act(b, "leakyrelu", x[0], "LEAKYRELU", negative_slope_type="float32", negative_slope_value=0.1),
            act(b, "relu6", x[0], "RELU6"), act(b, "clip", x[0], "CLIP", clip_min=-0.5, clip_max=1.5)]


def _saturation(b, rng, x):
    return [eltwise(b, "add", x[0], x[1], "ADD")]


def _anticorrelated(rng, shapes, n, value_range, run):
    """Calibration: in1 = -in0 + noise, so the sum's range is small; run: in1 = in0,
    so the sum passes both ends of it (and the inputs pass theirs)."""
    x = uniform(rng, value_range, (n,) + shapes[0])
    noise = uniform(rng, (-0.1, 0.1), (n,) + shapes[0])
    return [x, x.copy() if run else (noise - x).astype(np.float32)]


def _transpose(b, rng, x):
    return b.layer("Transpose", "tr", [x[0]], dict(perm=[0, 2, 1]))


def _special_values(rng, shapes, n, value_range, run):
    """Calibration reaches both ends of `value_range` (255 apart) exactly, so the int8/uint8
    scale is 255 / 255 = 1 and every x.5 below is a rounding tie; the run adds NaN and infinities."""
    lo, hi = value_range
    if not run:
        x = uniform(rng, (lo + 20, hi - 20), (n,) + shapes[0])
        x[0, 0, 0], x[0, 0, 1] = hi, lo
        return [x]
    ties = np.arange(-6.5, 7.0, 1.0, dtype=np.float32)
    special = np.array([np.nan, np.inf, -np.inf, hi, lo - 1, hi - 1, lo + 0.01, 300.0, -300.0, 0.49999997,
                        -0.49999997, 1e-30, -1e-30, 2.5000002, -2.4999998], np.float32)
    values = np.concatenate([ties, special, uniform(rng, (lo - 3, hi + 3), (n * 32 - ties.size - special.size,))])
    return [values.astype(np.float32).reshape((n,) + shapes[0])]


def _resize(b, rng, x):
    """As the parser writes Resize: upper-case mode/nearest_mode, antialias, exclude_outside,
    and the size, or for some the ratios (which only the float forward uses)."""
    tops = []
    for method, mode, nearest, shape, ratio in (
            ("NEAREST", "HALF_PIXEL", "ROUND_PREFER_FLOOR", [1, 7, 6, 4], None),
            ("NEAREST", "ASYMMETRIC", "FLOOR", [1, 3, 9, 4], None),
            ("NEAREST", "ASYMMETRIC", "ROUND_PREFER_FLOOR", [1, 10, 10, 4], 2.0),
            ("NEAREST", "ALIGN_CORNERS", "ROUND_PREFER_CEIL", [1, 7, 3, 4], None),
            ("NEAREST", "TF_HALF_PIXEL_FOR_NN", "CEIL", [1, 8, 4, 4], None),
            ("NEAREST", "PYTORCH_HALF_PIXEL", "SIMPLE", [1, 1, 7, 4], None),
            ("NEAREST", "HALF_PIXEL_SYMMETRIC", "ROUND_PREFER_FLOOR", [1, 7, 7, 4], 1.5),
            ("BILINEAR", "HALF_PIXEL", None, [1, 7, 9, 4], None),
            ("BILINEAR", "HALF_PIXEL", None, [1, 10, 10, 4], 2.0),
            ("BILINEAR", "ALIGN_CORNERS", None, [1, 9, 3, 4], None),
            ("BILINEAR", "ASYMMETRIC", None, [1, 3, 7, 4], None),
            ("BILINEAR", "PYTORCH_HALF_PIXEL", None, [1, 1, 8, 4], None),
            ("BILINEAR", "HALF_PIXEL_SYMMETRIC", None, [1, 6, 2, 4], None),
            ("BILINEAR", "HALF_PIXEL_SYMMETRIC", None, [1, 7, 7, 4], 1.5)):
        params = dict(method=method)
        if ratio is None:
            params.update(size=shape)
        else:
            params.update(ratio_x=ratio, ratio_y=ratio)
        params.update(mode=mode, antialias=False, exclude_outside=False)
        if nearest:
            params.update(nearest_mode=nearest)
        name = "_".join([method, mode] + ([nearest] if nearest else []) + (["ratio"] if ratio else [])).lower()
        tops += b.layer("Resize", name, [x[0]], params, top_shapes=[shape])
    return tops


def _pad(b, rng, x):
    return (b.layer("Pad", "constant", [x[0]], dict(pads=[[0, 0], [1, 2], [2, 0], [0, 0]], mode="CONSTANT",
                                                     constant_value=0.0))
            + b.layer("Pad", "constant_half", [x[0]], dict(pads=[[0, 0], [1, 0], [0, 1], [0, 0]], mode="CONSTANT",
                                                            constant_value=0.5))
            + b.layer("Pad", "reflect", [x[0]], dict(pads=[[0, 0], [5, 2], [-1, 3], [0, 0]], mode="REFLECT"))
            + b.layer("Pad", "symmetric", [x[0]], dict(pads=[[0, 0], [9, 1], [1, -2], [0, 0]], mode="SYMMETRIC")))


def _slice_split(b, rng, x):
    sl = b.layer("Slice", "slice", [x[0]], dict(begin=[0, 1, 3, 0], end=[1, 4, 0, 4], strides=[1, 2, -1, 1]))
    sl2 = b.layer("Slice", "slice_neg", [x[0]], dict(begin=[0, -3, 0, 1], end=[1, -1, 4, 4], strides=[1, 1, 2, 2]))
    return sl + sl2 + b.layer("Split", "split", [x[0]], dict(axis=3, splits=[1, 3]), n_tops=2)


def _batchnorm(b, rng, x):
    """Behind a MAX pooling, so that no pass folds them into a convolution."""
    p = pool(b, "pool", x[0], "MAX", 1, 1)
    last = b.layer("BatchNorm", "bn", [p], dict(axis=3),
                   {"weights": weights(rng, 4, scale=2.0), "biases": weights(rng, 4)})
    axis1 = b.layer("BatchNorm", "bn_axis1", [p], dict(axis=1),
                    {"weights": weights(rng, 5, scale=2.0), "biases": weights(rng, 5)})
    return last + axis1


def _reduce(b, rng, x):
    """As the parser writes Reduce: no keepdims (the reduced axes stay, with size 1)."""
    return (b.layer("Reduce", "mean", [x[0]], dict(method="MEAN", axis=[1, 2]))
            + b.layer("Reduce", "sum", [x[0]], dict(method="SUM", axis=[2]))
            + b.layer("Reduce", "max", [x[0]], dict(method="MAX", axis=[3]))
            + b.layer("Reduce", "min", [x[0]], dict(method="MIN", axis=[1])))


def _reduce_more(b, rng, x):
    return (b.layer("Reduce", "prod", [x[0]], dict(method="PROD", axis=[3]))
            + b.layer("Reduce", "l1", [x[0]], dict(method="L1", axis=[1, 2]))
            + b.layer("Reduce", "l2", [x[0]], dict(method="L2", axis=[2]))
            + b.layer("Reduce", "variance", [x[0]], dict(method="VARIANCE", axis=[1, 2]))
            + b.layer("Reduce", "unbiased_variance", [x[0]], dict(method="UNBIASED_VARIANCE", axis=[3]))
            + b.layer("Reduce", "any", [x[0]], dict(method="ANY", axis=[2]))
            + b.layer("Reduce", "all", [x[0]], dict(method="ALL", axis=[1])))


def _constant(b, rng, x):
    c = b.layer("Constant", "const", [], {}, {"weights": weights(rng, 1, 1, 1, 4)})
    return [eltwise(b, "add", x[0], c[0], "ADD")]


def _layernorm(b, rng, x):
    ln = b.layer("LayerNorm", "ln", [x[0]], dict(axis=[3], epsilon=1e-5),
                 {"weights": weights(rng, 4), "biases": weights(rng, 4)})
    return [act(b, "relu", ln[0], "RELU")]


def _layernorm_int(b, rng, x):
    """Over the last axis (16 elements) and over the last two (5 x 16), then RELU."""
    last = b.layer("LayerNorm", "ln", [x[0]], dict(axis=[2], epsilon=1e-5),
                   {"weights": weights(rng, 16) + 1.0, "biases": weights(rng, 16)})
    two = b.layer("LayerNorm", "ln_2d", [x[0]], dict(axis=[1, 2], epsilon=1e-3),
                  {"weights": weights(rng, 5, 16) + 1.0, "biases": weights(rng, 5, 16)})
    return last + two + [act(b, "relu", last[0], "RELU")]


def _ln_rows(rng, shapes, n, value_range, run):
    """Rows of different offsets and spreads, and on the run a constant row (variance 0:
    the output is the biases) and a row of one spike."""
    lo, hi = value_range
    x = uniform(rng, value_range, (n,) + shapes[0])
    x *= uniform(rng, (0.05, 1.0), (n,) + shapes[0][:-1] + (1,))
    x += uniform(rng, (lo / 2, hi / 2), (n,) + shapes[0][:-1] + (1,))
    if run:
        x[0, 0, :] = 0.3
        x[0, 1, :] = 0.0
        x[0, 1, 3] = hi
    return [x.astype(np.float32)]


def _conv_fused(b, rng, x):
    leaky = act(b, "leaky", conv(b, rng, "conv_leaky", x[0], 4, 4), "LEAKYRELU", negative_slope_value=0.2)
    relu = act(b, "relu", conv(b, rng, "conv_relu", x[0], 4, 4), "RELU")
    return [leaky, relu]


def _eltwise_act(b, rng, x):
    return [eltwise(b, "add_leaky", x[0], x[1], "ADD", "LEAKYRELU"), eltwise(b, "sub_relu", x[0], x[1], "SUB", "RELU"),
            eltwise(b, "mul_relu6", x[0], x[1], "MUL", "RELU6")]


def _pool_zp(b, rng, x):
    return [pool(b, "maxpool", x[0], "MAX", 3, 2, pads=(1, 1, 1, 1), ceil_mode=True),
            pool(b, "avgpool", x[0], "AVG", 2, 2, pads=(1, 0, 1, 0), ceil_mode=True)]


def _lut_and_softmax(b, rng, x):
    return _lut_activations(b, rng, x) + b.layer("Softmax", "softmax", [x[0]], dict(axis=3))


def _mixed_precision(b, rng, x):
    c = conv(b, rng, "conv", x[0], 4, 4)
    s = act(b, "sigmoid", c, "SIGMOID")
    return [conv(b, rng, "conv2", s, 4, 4)]


CASES = [
    Case("conv", "3x3 convolution, per-tensor symmetric weights and activations", [(6, 6, 4)], _conv_plain),
    Case("conv_pads_zp", "stride 2, asymmetric pads, asymmetric activations (non-zero zero points)",
         [(7, 7, 3)], _conv_pads_zp, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-0.3, 2.0), run_range=(-0.3, 2.0)),
    Case("conv_depthwise", "depthwise 3x3 with fused RELU6", [(6, 6, 6)], _conv_depthwise),
    Case("conv_grouped", "2 groups, dilation 2", [(7, 7, 4)], _conv_grouped),
    Case("conv_per_channel", "per-channel symmetric weights over channels of very different size",
         [(5, 5, 4)], _conv_per_channel, dict(quantize_method_for_weight="per_channel_symmetric_restricted_range")),
    Case("conv_weights_asym", "per-channel asymmetric weights", [(5, 5, 4)], _conv_per_channel,
         dict(quantize_method_for_weight="per_channel_asymmetric")),
    Case("conv_int4", "4-bit weights", [(6, 6, 4)], _conv_plain, dict(weight_bits="4")),
    Case("conv_act16", "16-bit activations", [(6, 6, 4)], _conv_plain, dict(activation_bits="16")),
    Case("fully_connected", "FullyConnected with fused RELU", [(16,)], _fully_connected),
    Case("matmul", "MatMul of two activations, trans_b", [(4, 8), (5, 8)], _matmul),
    Case("matmul_scaled", "MatMul between scalings by constants, merged into it (fused_multiplier)",
         [(4, 8), (5, 8)], _matmul_scaled),
    Case("resize", "Resize NEAREST and BILINEAR, each coordinate mode, up and down", [(5, 5, 4)], _resize),
    Case("pad", "Pad CONSTANT (real 0 and 0.5), REFLECT and SYMMETRIC past the input's size, negative pads",
         [(4, 5, 3)], _pad, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-0.3, 2.0), run_range=(-0.3, 2.0)),
    Case("slice_split", "Slice with negative begin/end and strides, Split", [(4, 4, 4)], _slice_split),
    Case("batchnorm", "BatchNorm along the last axis and along axis 1, per-channel weights", [(5, 6, 4)],
         _batchnorm, dict(quantize_method_for_weight="per_channel_symmetric_restricted_range")),
    Case("reduce", "Reduce MEAN/SUM/MAX/MIN over various axes, asymmetric activations", [(3, 5, 4)], _reduce,
         dict(quantize_method_for_activation="per_tensor_asymmetric"), calib_range=(-0.3, 2.0),
         run_range=(-0.3, 2.0)),
    Case("reduce_more", "Reduce PROD/L1/L2/VARIANCE/UNBIASED_VARIANCE/ANY/ALL, asymmetric activations",
         [(3, 5, 4)], _reduce_more, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-0.3, 2.0), run_range=(-0.3, 2.0)),
    Case("constant", "a Constant layer broadcast into an Eltwise ADD", [(3, 3, 4)], _constant),
    Case("layernorm", "integer LayerNorm over the last axis and the last two, per-tensor weights",
         [(5, 16)], _layernorm_int, data=_ln_rows),
    Case("layernorm_act16", "integer LayerNorm on 16-bit activations, per-channel (per element) weights, "
         "asymmetric activations", [(5, 16)], _layernorm_int,
         dict(activation_bits="16", quantize_method_for_weight="per_channel_symmetric_restricted_range",
              quantize_method_for_activation="per_tensor_asymmetric"), data=_ln_rows),
    Case("layernorm_float", "LayerNorm kept in float between DeQuantize and Quantize (trigger_float_op)",
         [(3, 3, 4)], _layernorm, dict(trigger_float_op="LayerNorm")),
    Case("pool_max_ceil", "3x3/2 MAX pooling, ceil_mode, asymmetric pads", [(8, 8, 4)], _pool_max_ceil),
    Case("pool_avg_ceil", "3x3/2 AVG pooling: ceil_mode without pads counted, and count_include_pad",
         [(8, 8, 4)], _pool_avg_ceil),
    Case("eltwise_broadcast", "ADD/SUB/MUL/MAX/MIN of [4,4,6] with a broadcast [1,1,6]",
         [(4, 4, 6), (1, 1, 6)], _eltwise_broadcast),
    Case("concat_scales", "Concat of two inputs with scales 20x apart", [(4, 4, 4)], _concat_scales),
    Case("reshape_transpose", "Transpose then Reshape", [(4, 6, 4)], _reshape_transpose),
    Case("softmax", "Softmax over the last axis", [(3, 10)], _softmax, calib_range=(-4.0, 4.0),
         run_range=(-4.0, 4.0)),
    Case("softmax_short_axis", "Softmax over a last axis of 4 in a batch of 128 rows: the tool chain's "
         "rounded-quotient form", [(32, 4)], _softmax, calib_range=(-4.0, 4.0), run_range=(-4.0, 4.0)),
    Case("lut_activations", "every LUT and clipping activation", [(4, 4, 4)], _lut_activations,
         calib_range=(-4.0, 4.0), run_range=(-4.0, 4.0)),
    Case("saturation", "inputs and their sum past the calibrated ranges: saturation at both ends",
         [(3, 3, 4), (3, 3, 4)], _saturation, calib_range=(-1.0, 1.0), run_range=(-3.0, 3.0),
         data=_anticorrelated),
    Case("conv_fused", "per-channel convolutions with fused LEAKYRELU (negative_scale/shift constants) "
         "and RELU", [(5, 5, 4)], _conv_fused,
         dict(quantize_method_for_weight="per_channel_symmetric_restricted_range")),
    Case("input_rounding", "Input quantization of ties, NaN, +-inf and out-of-range values at scale 1",
         [(4, 8)], _transpose, calib_range=(-127.5, 127.5), run_range=(-127.5, 127.5), data=_special_values),
    Case("input_rounding_zp", "the same with asymmetric quantization: scale 1, zero point -100 (NaN is q = 0)",
         [(4, 8)], _transpose, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-100.0, 155.0), run_range=(-100.0, 155.0), data=_special_values),
    Case("conv_int4_asym", "4-bit per-channel asymmetric weights (uint4 with weights_zp)", [(5, 5, 4)],
         _conv_per_channel, dict(quantize_method_for_weight="per_channel_asymmetric", weight_bits="4")),
    Case("eltwise_act", "Eltwise with fused LEAKYRELU/RELU/RELU6, asymmetric activations",
         [(4, 4, 6), (4, 1, 6)], _eltwise_act, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
    Case("concat_zp", "Concat of differently scaled inputs, asymmetric activations", [(4, 4, 4)],
         _concat_scales, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-0.2, 1.0), run_range=(-0.2, 1.0)),
    Case("pool_zp", "MAX and AVG pooling with pads and ceil_mode, asymmetric activations", [(7, 7, 4)],
         _pool_zp, dict(quantize_method_for_activation="per_tensor_asymmetric"),
         calib_range=(-0.3, 2.0), run_range=(-0.3, 2.0)),
    Case("lut_act16", "LUT activations and Softmax on 16-bit activations: interpolated lookups",
         [(4, 4, 4)], _lut_and_softmax, dict(activation_bits="16"), calib_range=(-4.0, 4.0),
         run_range=(-4.0, 4.0)),
    Case("lut_small", "64-entry LUTs on 8-bit activations: interpolated lookups", [(4, 4, 4)],
         _lut_and_softmax, dict(lut_items_in_bits="6"), calib_range=(-4.0, 4.0), run_range=(-4.0, 4.0)),
    Case("mixed_precision", "SIGMOID kept in float between two quantized convolutions (trigger_float_op)",
         [(5, 5, 4)], _mixed_precision, dict(trigger_float_op="Activation")),
]
