"""Layers that move values: Reshape, Transpose, Concat, Split, Slice, Pad,
Constant; and the float boundaries Quantize and DeQuantize."""
import numpy as np

from ..intmath import absmax, check_range, dequantize, quantize, rrs, rrs_bound
from .stage import finish, int_list, int_param, same_quantization, shifted


def reshape(layer, xs, infos):
    """To the IR's `shape`, its leading (batch) axis scaled to the batch being run."""
    x = xs[0]
    shape = list(layer.param("shape", list(layer.top_shapes[0])))
    ir_batch = infos[0].shape[0] if infos[0].shape else 1
    if shape and ir_batch and x.shape[0] != ir_batch and shape[0] % ir_batch == 0:
        shape[0] = shape[0] // ir_batch * x.shape[0]
    return [x.reshape(shape)]


def transpose(layer, xs, infos):
    perm = layer.param("perm")
    if not isinstance(perm, list) or sorted(perm) != list(range(xs[0].ndim)):
        raise layer.error(f"perm {perm} is not a permutation of {xs[0].ndim} axes", "perm")
    return [np.ascontiguousarray(xs[0].transpose(perm))]


def concat(layer, xs, infos):
    return [np.concatenate(xs, axis=int(layer.param("axis")))]


def unchanged(move):
    """The integer form of a layer that moves integers without rescaling them."""
    def forward(layer, xs, infos):
        same_quantization(layer, infos[0])
        return move(layer, xs, infos)
    forward.__doc__ = f"{move.__name__}: the integers move unchanged (top scale/zp = the input's)."
    return forward


def concat_int(layer, xs, infos):
    """part_i = RRS(A_i * M_i, s_i) - zp_out; out = clamp(concat(parts), lo, hi)."""
    ms = int_list(layer, "scale_value", len(xs))
    ss = int_list(layer, "shift_value", len(xs))
    parts = []
    for x, info, m, s in zip(xs, infos, ms, ss):
        a = shifted(x, info, layer)
        check_range(layer, rrs_bound(absmax(a) * abs(m), s), f"the rescale of '{info.name}'")
        parts.append(rrs(a * np.int64(m), s))
    return [finish(layer, np.concatenate(parts, axis=int(layer.param("axis"))))]


def split(layer, xs, infos):
    x = xs[0]
    axis = int(layer.param("axis"))
    sizes = [int(s) for s in layer.param("splits")]
    if len(sizes) != len(layer.tops) or sum(sizes) != x.shape[axis]:
        raise layer.error(f"splits {sizes} must give one size per top ({len(layer.tops)}) summing to "
                          f"{x.shape[axis]}", "splits")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def slice_(layer, xs, infos):
    x = xs[0]
    begin, end = layer.param("begin"), layer.param("end")
    strides = layer.param("strides", [1] * x.ndim)
    if not len(begin) == len(end) == len(strides) == x.ndim or 0 in strides:
        raise layer.error(f"begin {begin}, end {end}, strides {strides} need one entry per axis ({x.ndim}) "
                          f"and non-zero strides")
    ir_batch = infos[0].shape[0] if infos[0].shape else x.shape[0]
    index = []
    for axis, (b, e, s) in enumerate(zip(begin, end, strides)):
        whole_batch = axis == 0 and range(*slice(b, e, s).indices(ir_batch)) == range(ir_batch)
        index.append(slice(None) if whole_batch else slice(b, e, s))
    return [np.ascontiguousarray(x[tuple(index)])]


def pad_geometry(layer, x):
    pads = layer.param("pads")
    if (not isinstance(pads, list) or len(pads) != x.ndim
            or any(not isinstance(p, list) or len(p) != 2 for p in pads)):
        raise layer.error(f"pads {pads} must be one [before, after] per axis ({x.ndim})", "pads")
    mode = str(layer.param("mode", "CONSTANT")).upper()
    if mode not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise layer.error(f"unsupported Pad mode '{mode}' (CONSTANT, REFLECT, SYMMETRIC)", "mode")
    return [[int(a), int(b)] for a, b in pads], mode


def pad_values(x, pads, mode, fill):
    """Pad axis by axis, the first axis first: position p in [-before, size + after)
    takes `fill` outside the input (CONSTANT) or the input at the mirrored index
    f < size ? f : period - sigma - f, f = p mod period (REFLECT: period
    max(2(size-1), 1), sigma 0; SYMMETRIC: period 2 size, sigma 1). Negative pads crop."""
    for axis, (before, after) in enumerate(pads):
        if not (before or after):
            continue
        size = x.shape[axis]
        p = np.arange(-before, size + after)
        if mode == "CONSTANT":
            inside = ((p >= 0) & (p < size)).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
            x = np.where(inside, np.take(x, np.clip(p, 0, size - 1), axis=axis), fill)
        else:
            period, sigma = (2 * size, 1) if mode == "SYMMETRIC" else (max(2 * (size - 1), 1), 0)
            f = np.mod(p, period)
            x = np.take(x, np.where(f < size, f, period - sigma - f), axis=axis)
    return x


def pad_float(layer, xs, infos):
    pads, mode = pad_geometry(layer, xs[0])
    return [pad_values(xs[0], pads, mode, np.float32(layer.param("constant_value", 0.0)))]


def constant(layer, xs, infos):
    return [layer.const("weights")]


def pad_int(layer, xs, infos):
    """Pad of integers, no rescale. CONSTANT fills the integer `constant_value`, which a
    quantized IR must carry (its default, real 0, is -zp, not 0)."""
    same_quantization(layer, infos[0])
    pads, mode = pad_geometry(layer, xs[0])
    fill = int_param(layer, "constant_value") if mode == "CONSTANT" else 0
    return [pad_values(xs[0], pads, mode, np.int64(fill))]


def quantize_int(layer, xs, infos):
    """Quantize: a float tensor into the top's integers, as the Input layer does."""
    scale, zp = layer.top_scales[0], layer.top_zps[0]
    return [quantize(xs[0], scale, zp, layer.top_types[0])]


def dequantize_float(layer, xs, infos):
    """DeQuantize: float32(q + zp) / float32(scale) with the input's scale/zp."""
    return [dequantize(xs[0], *infos[0].quant(layer))]


FLOAT = {"Reshape": reshape, "Transpose": transpose, "Concat": concat, "Split": split, "Slice": slice_,
         "Constant": constant, "Pad": pad_float, "DeQuantize": dequantize_float}
INT = {"Reshape": unchanged(reshape), "Transpose": unchanged(transpose), "Split": unchanged(split),
       "Slice": unchanged(slice_), "Pad": pad_int, "Concat": concat_int, "Constant": constant,
       "Quantize": quantize_int}
# The tensor each boundary layer reads is of the other kind than its top.
READS_OTHER_KIND = ("Quantize", "DeQuantize")
