"""What integer forwards share (docs/integer-semantics.md): reading the stored
integers (rescales, weights and biases with their zero points) and the output
stage, which takes an accumulator through the fused activation and the rescale
into the top's quantization:

    NONE       out = requantize(z, M, s)
    RELU       out = requantize(max(fl32(z), 0), M, s)          (a float32 step)
    RELU6      out = requantize(max(z, 0), M, s)
    CLIP       y = requantize(z, M, s - r) clamped to [clip_min, clip_max] (r = 8 for
               8-bit tops, else 0), out = requantize(y, 1, r)
    LEAKYRELU  y = round(min(z, 0) * slope * 2^-slope_shift) + max(z, 0), out = requantize(y, M, s)
    PRELU      the same with the per-element int16 `negative_slope` constant

where requantize(v, M, s) = clamp(round_half_even(v * M * 2^-s) - zp_out, qmin, qmax),
[qmin, qmax] the top's layer_top_range.
"""
import numpy as np

from .. import minifloat

from ..intmath import INT48, UINT48, as_float32, requantize, shift_round_even

RESCALE_METHODS = ("RELU", "RELU6", "CLIP", "LEAKYRELU", "PRELU")
FUSABLE = ("NONE",) + RESCALE_METHODS


def int_value(layer, key, value) -> int:
    """An integer param value (an integral float, as some writers spell them, is accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise layer.error(f"'{key}' must be an integer, got {value!r}", key)
    return int(value)


def int_param(layer, key, default=None) -> int:
    value = layer.param(key) if default is None else layer.param(key, default)
    return int_value(layer, key, value)


def stored_ints(layer, constant: str, param: str, default=None):
    """Integers stored as the constant `constant` (an int64 array) or the param `param`
    (an int, or an int64 array for a list); the constant wins, as in the tool chain."""
    if layer.has_const(constant):
        value = layer.const(constant)
        if not np.issubdtype(value.dtype, np.integer):
            raise layer.error(f"constant '{constant}' must hold integers, it is {layer.const_types[constant].name}",
                              constant + "_type")
        return value
    if param not in layer.params:
        if default is None:
            raise layer.error(f"missing parameter '{param}' (or constant '{constant}')", param)
        return default
    value = layer.param(param)
    if isinstance(value, list):
        return np.array([int_value(layer, param, v) for v in value], np.int64)
    return int_value(layer, param, value)


def rescale(layer, channels: int):
    """(M, s) of a layer's output rescale: per channel (constants `scale`, `shift`, along the
    accumulator's last axis, of `channels` channels) or per tensor (params `scale_value`,
    `shift_value`)."""
    m, s = stored_ints(layer, "scale", "scale_value"), stored_ints(layer, "shift", "shift_value")
    for name, v in (("scale", m), ("shift", s)):
        if np.size(v) not in (1, channels):
            raise layer.error(f"per-channel {name} has {np.size(v)} entries for {channels} channels", name)
    return m, s


def weights_with_zp(layer) -> np.ndarray:
    """W = weights + weights_zp (per output channel, the first axis; one value when per tensor)."""
    w = layer.const("weights")
    zp = np.asarray(stored_ints(layer, "weights_zp", "weights_zp", 0), np.int64).reshape(-1)
    if zp.size not in (1, w.shape[0]):
        raise layer.error(f"weights_zp has {zp.size} entries for {w.shape[0]} output channels", "weights_zp")
    return w + zp.reshape((-1,) + (1,) * (w.ndim - 1)) if zp.size > 1 else w + zp[0]


def float_weights(layer) -> np.ndarray:
    """The weights a float layer computes with: float ones as stored; integers or fp8 values
    (weight-only quantization) dequantized in float32, (q + zp) * (1 / scale), with weights_scale and
    weights_zp per tensor (params), per output channel, or per block: each channel's
    weights, flattened in the IR's order, in runs of weight_block_size, the last one shorter."""
    w = layer.const("weights")
    if np.issubdtype(w.dtype, np.floating) and not layer.const_types["weights"].minifloat:
        return w.astype(np.float32)
    if layer.has_const("weights_scale"):
        scale = layer.const("weights_scale").astype(np.float32).reshape(-1)
    elif "weights_scale" in layer.params and isinstance(layer.param("weights_scale"), (int, float)):
        scale = np.array([layer.param("weights_scale")], np.float32)
    else:
        raise layer.error("quantized weights of a float layer need weights_scale", "weights_scale")
    if layer.has_const("weights_zp") and layer.const_types["weights_zp"].minifloat:  # fp8 weights' zero points
        zp = layer.const("weights_zp").astype(np.float32).reshape(-1)
    else:
        zp = np.asarray(stored_ints(layer, "weights_zp", "weights_zp", 0), np.int64).reshape(-1)
    channels, rest = w.shape[0], int(np.prod(w.shape[1:]))
    block = int_param(layer, "weight_block_size", rest) if scale.size > channels else rest
    per_channel = -(-rest // block)
    for name, v in (("weights_scale", scale), ("weights_zp", zp)):
        if v.size not in (1, channels * per_channel):
            raise layer.error(f"{name} has {v.size} entries; weights {list(w.shape)} need 1 or "
                              f"{channels * per_channel}", name)

    def spread(v):  # one value per weight
        if v.size == 1:
            return v.reshape(())
        return np.repeat(v.reshape(channels, per_channel), block, axis=1)[:, :rest].reshape(w.shape)
    q = w.astype(np.float32) + spread(zp).astype(np.float32)
    return (q * (np.float32(1) / spread(scale))).astype(np.float32)


def biases_with_zp(layer, channels: int):
    """biases + biases_zp, one per output channel (0 when the layer has no biases). The
    biases hold the input zero point folded in (zp_x * sum of the channel's weights)."""
    if not layer.has_const("biases"):
        return np.int64(0)
    b = layer.const("biases").reshape(-1)
    zp = np.asarray(stored_ints(layer, "biases_zp", "biases_zp", 0), np.int64).reshape(-1)
    if b.size not in (1, channels) or zp.size not in (1, channels):
        raise layer.error(f"biases/biases_zp have {b.size}/{zp.size} entries for {channels} output channels",
                          "biases_offset")
    return b + zp


def refuse_ahead_shift(layer, *dtypes) -> None:
    """`remain_shift` on a layer npuopt-run does not shift ahead (ConvTranspose, MatMul)
    with more than 8-bit inputs or weights: one line."""
    if "remain_shift" in layer.params and any(d.bits > 8 for d in dtypes):
        raise layer.error(f"remain_shift (the tool chain's ahead shift of wide accumulators) is not supported on "
                          f"{layer.type}", "remain_shift")


# the layers whose accumulators the tool chain shifts ahead; True: their biases reach the
# shift rounded to float32 (the convolutions), False: as they are (FullyConnected)
AHEAD_SHIFTED = {"Convolution": True, "DepthwiseConv": True, "Convolution3D": True, "FullyConnected": False}
INT32 = (-(1 << 31), (1 << 31) - 1)


def ahead_shift(layer, acc: np.ndarray, b, s, *dtypes):
    """The chip's 48-bit accumulator brought to 32 bits before the rescale, where
    `remain_shift` is set and an input or the weights are wider than 8 bits: with
    d = s0 - remain_shift (s0 the first channel's shift) > 0, acc -> clamp(round(acc / 2^d))
    and b -> clamp(floor(b / 2^d)) in int32, shift remain_shift for every channel; else acc
    clamped to int32, shift s0. Returns (acc, biases, shift)."""
    if "remain_shift" not in layer.params or not any(d.bits > 8 for d in dtypes):
        return acc, b, s
    remain = int_param(layer, "remain_shift")
    if remain < 0:
        raise layer.error(f"remain_shift {remain} is negative", "remain_shift")
    first = int(np.asarray(s).reshape(-1)[0])
    b = as_float32(np.asarray(b, np.int64)) if AHEAD_SHIFTED[layer.type] else np.asarray(b, np.int64)
    if first > remain:
        d = first - remain
        return np.clip(shift_round_even(acc, d), *INT32), np.clip(np.right_shift(b, d), *INT32), remain
    return np.clip(acc, *INT32), b, first


def shifted(x: np.ndarray, info, layer) -> np.ndarray:
    """A = q + zp: the integer proportional to the real value."""
    _, zp = info.quant(layer)
    return x + np.int64(zp)


def method_of(layer, key: str) -> str:
    return str(layer.param(key, "NONE")).upper()


def fused_method(layer) -> str:
    method = method_of(layer, "with_activation")
    if method not in FUSABLE:
        raise layer.error(f"unsupported with_activation '{method}' (the tool chain fuses "
                          f"{', '.join(FUSABLE)}, in float and in integers)", "with_activation")
    return method


def top_bounds(layer):
    """zp, qmin, qmax of the layer's (first) top: its layer_top_zp and layer_top_range."""
    if layer.top_zps is None or layer.top_scales is None:
        raise layer.error("integer top lacks layer_top_scale/layer_top_zp", "layer_top_zp")
    return int_value(layer, "layer_top_zp", layer.top_zps[0]), *layer.top_range(0)


def output_stage(layer, z: np.ndarray, method: str, m, s) -> np.ndarray:
    """The fused activation `method` and the rescale (M, s) of accumulator z into the top."""
    zp, lo, hi = top_bounds(layer)
    if method == "NONE":
        return requantize(layer, z, m, s, zp, lo, hi)
    if method == "RELU":  # the tool chain takes the accumulator through float32 here
        return requantize(layer, np.maximum(as_float32(z), 0), m, s, zp, lo, hi)
    if method == "RELU6":
        return requantize(layer, np.maximum(z, 0), m, s, zp, lo, hi)
    if method == "CLIP":
        relay = 8 if layer.top_types[0].bits <= 8 else 0
        y = requantize(layer, z, m, np.asarray(s) - relay, 0, int_param(layer, "clip_min"),
                       int_param(layer, "clip_max"))
        return requantize(layer, y, 1, relay, zp, lo, hi)
    if method == "LEAKYRELU":
        slope = int_param(layer, "negative_slope_value")
        slope_shift = int_param(layer, "negative_slope_shift", layer.top_types[0].bits)
        bounds = INT48
    elif method == "PRELU":
        slope = prelu_slopes(layer, z.ndim)
        slope_shift = int_param(layer, "negative_slope_shift")
        bounds = INT48 if layer.top_types[0].signed else UINT48
    else:
        raise layer.error(f"'{method}' is not a rescaling activation")
    y = requantize(layer, np.minimum(z, 0), slope, slope_shift, -np.maximum(z, 0), *bounds)
    return requantize(layer, y, m, s, zp, lo, hi)


def prelu_slopes(layer, ndim: int) -> np.ndarray:
    """The int16 `negative_slope` constant, broadcasting against ndim-D values: when it has
    as many axes, its first axis is the batch (identical rows kept once)."""
    slope = layer.const("negative_slope")
    if slope.ndim >= ndim:
        if (slope == slope[:1]).all():
            slope = slope[:1]
        if slope.shape[0] == 1:
            slope = slope[0]
    return slope


def along(v, axis: int, ndim: int):
    """A per-channel vector shaped to run along `axis` of an ndim-D array (scalars as they are)."""
    v = np.asarray(v)
    return v.reshape((-1,) + (1,) * (ndim - 1 - axis % ndim)) if v.ndim else v


def same_quantization(layer, info) -> None:
    """Layers that move integers unchanged need every top to share the input's scale/zp
    (unscaled integers, scale 1 on both sides, may differ in zero point: the tool chain's
    ConvInteger gives the tensor it reads zero point -x_zero_point, behind such layers too)."""
    scale, zp = info.quant(layer)
    for i, top in enumerate(layer.tops):
        unscaled = layer.top_scales[i] == scale == 1
        if (layer.top_scales[i], layer.top_zps[i]) != (scale, zp) and not unscaled or \
                layer.top_types[i] != info.dtype:
            raise layer.error(f"top '{top}' scale/zp/dtype ({layer.top_scales[i]}, {layer.top_zps[i]}, "
                              f"{layer.top_types[i].name}) differ from input '{info.name}' "
                              f"({scale}, {zp}, {info.dtype.name}); this layer does not rescale")


def fp8_scale(layer, channels: int):
    """The float32 rescale of an fp8 layer: constant `scale` (per channel) or param `scale_value`."""
    if layer.has_const("scale"):
        value = layer.const("scale").astype(np.float32)
        if value.size not in (1, channels):
            raise layer.error(f"per-channel scale has {value.size} entries for {channels} channels", "scale")
        return value.reshape(-1)
    value = layer.param("scale_value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise layer.error(f"an fp8 layer needs a number 'scale_value', got {value!r}", "scale_value")
    return np.float32(value)


def fp8_output_stage(layer, acc: np.ndarray, channels: int) -> np.ndarray:
    """An fp8 layer's output: acc (float64, exact) + float32 biases, the fused RELU, then
    minifloat.requantize with its rescale into the top's format."""
    method = fused_method(layer)
    if method not in ("NONE", "RELU"):
        raise layer.error(f"an fp8 layer fuses NONE or RELU, not {method}", "with_activation")
    if layer.has_const("biases"):
        acc = acc + layer.const("biases").astype(np.float32).astype(np.float64).reshape(-1)
    if method == "RELU":
        acc = np.maximum(acc, 0.0)
    return minifloat.requantize(acc, fp8_scale(layer, channels), layer.top_types[0].name)
