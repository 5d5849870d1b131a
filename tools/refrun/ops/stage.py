"""What integer forwards share: reading the stored multipliers and shifts,
A = q + zp, and the output stage of docs/integer-semantics.md:

    y = RRS(z * M, s);  LEAKYRELU and z < 0: y = RRS(z * Mn, sn)
    out = clamp(y - zp_out, dtype range ∩ [activation_qmin, activation_qmax])
"""
import numpy as np

from ..intmath import absmax, bounds, check_range, round_div, rrs, rrs_bound, saturate

# Fused activations an integer layer can carry: RELU/RELU6/CLIP are only
# activation_qmin/qmax, LEAKYRELU adds the negative_* multiplier.
CLAMPS = ("RELU", "RELU6", "CLIP")
INT_ACTIVATIONS = ("NONE", "LEAKYRELU") + CLAMPS


def _int(layer, key, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise layer.error(f"'{key}' must be an integer, got {value!r}", key)
    return value


def int_param(layer, key):
    return _int(layer, key, layer.param(key))


def int_list(layer, key, n):
    value = layer.param(key)
    if not isinstance(value, list) or len(value) != n:
        raise layer.error(f"'{key}' must be a list of {n} integers (one per input), got {value!r}", key)
    return [_int(layer, key, v) for v in value]


def multiplier(layer, channels: int, prefix: str = ""):
    """(M, s): per channel from constants `scale`/`shift`, else the params
    `scale_value`/`shift_value`. Per-channel vectors run along the last axis."""
    if layer.has_const(prefix + "scale") or layer.has_const(prefix + "shift"):
        m, s = layer.const(prefix + "scale").reshape(-1), layer.const(prefix + "shift").reshape(-1)
        if m.size != channels or s.size != channels:
            raise layer.error(f"per-channel {prefix}scale/{prefix}shift have {m.size}/{s.size} entries "
                              f"for {channels} channels", prefix + "scale_offset")
        return m.astype(np.int64), s.astype(np.int64)
    return int_param(layer, prefix + "scale_value"), int_param(layer, prefix + "shift_value")


def weights_with_zp(layer) -> np.ndarray:
    """W = weights + weights_zp[o] (o the first axis; one value when per tensor)."""
    w = layer.const("weights")
    if not layer.has_const("weights_zp"):
        return w
    zp = layer.const("weights_zp").reshape(-1)
    if zp.size not in (1, w.shape[0]):
        raise layer.error(f"weights_zp has {zp.size} entries for {w.shape[0]} output channels",
                          "weights_zp_offset")
    return w + zp.reshape((-1,) + (1,) * (w.ndim - 1))


def shifted(x: np.ndarray, info, layer) -> np.ndarray:
    """A = q + zp: the integer proportional to the real value."""
    _, zp = info.quant(layer)
    return x + np.int64(zp)


def activation_of(layer, key: str) -> str:
    method = str(layer.param(key, "NONE")).upper()
    if method not in INT_ACTIVATIONS:
        raise layer.error(f"unsupported {key} '{method}' in an integer layer "
                          f"(npuopt-run knows: {', '.join(INT_ACTIVATIONS)})", key)
    if method in CLAMPS:
        int_param(layer, "activation_qmin")
        int_param(layer, "activation_qmax")
    return method


def along(v, axis: int, ndim: int):
    """A per-channel vector shaped to run along `axis` of an ndim-D array (scalars as they are)."""
    v = np.asarray(v)
    return v.reshape((-1,) + (1,) * (ndim - 1 - axis % ndim)) if v.ndim else v


def output_stage(layer, z: np.ndarray, m, s, activation: str, axis: int = -1) -> np.ndarray:
    """The output stage on accumulator z with multiplier m and shift s (per-channel
    vectors along `axis`)."""
    zbound = absmax(z)
    m, s = along(m, axis, z.ndim), along(s, axis, z.ndim)
    check_range(layer, rrs_bound(zbound * absmax(m), s), "the rescale z*M")
    y = rrs(z * m, s)
    if activation == "LEAKYRELU":
        mn, sn = (along(v, axis, z.ndim) for v in multiplier(layer, z.shape[axis], "negative_"))
        check_range(layer, rrs_bound(zbound * absmax(mn), sn), "the negative rescale z*Mn")
        y = np.where(z < 0, rrs(z * mn, sn), y)
    return finish(layer, y)


def finish(layer, y: np.ndarray) -> np.ndarray:
    """clamp(y - zp_out, lo, hi) with the top's zero point and saturation bounds."""
    zp_out = _int(layer, "layer_top_zp", layer.top_zps[0])
    return saturate(y - np.int64(zp_out), *bounds(layer, layer.top_types[0]))


def scaled_mean(layer, sums: np.ndarray, counts) -> np.ndarray:
    """AVG pooling and Reduce MEAN/SUM, with M, s = scale_value, shift_value:
    clamp(round_div(S * M * 2^max(0,-s), n * 2^max(0,s)) - zp_out, lo, hi)."""
    m, s = int_param(layer, "scale_value"), int_param(layer, "shift_value")
    counts = np.asarray(counts, np.int64)
    check_range(layer, 2 * absmax(sums) * abs(m) * (1 << max(0, -s)) + 2 * absmax(counts) * (1 << max(0, s)),
                "the mean's rescale")
    return finish(layer, round_div(sums * np.int64(m) * np.int64(1 << max(0, -s)),
                                   counts * np.int64(1 << max(0, s))))


def same_quantization(layer, info) -> None:
    """Layers that move integers unchanged need every top to share the input's scale/zp."""
    scale, zp = info.quant(layer)
    for i, top in enumerate(layer.tops):
        if (layer.top_scales[i], layer.top_zps[i]) != (scale, zp) or layer.top_types[i] != info.dtype:
            raise layer.error(f"top '{top}' scale/zp/dtype ({layer.top_scales[i]}, {layer.top_zps[i]}, "
                              f"{layer.top_types[i].name}) differ from input '{info.name}' "
                              f"({scale}, {zp}, {info.dtype.name}); this layer does not rescale")
