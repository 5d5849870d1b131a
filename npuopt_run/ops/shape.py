"""Layers that move values: Reshape, Transpose, Concat, Split, Slice, Pad,
Constant, Meshgrid; and the float boundaries Quantize and DeQuantize."""
import numpy as np

from .. import minifloat
from ..intmath import dequantize, quantize, requantize
from .stage import float_weights, int_value, same_quantization, shifted, stored_ints, top_bounds


def reshape(layer, xs, infos):
    """To the top shape. When the input runs with one axis k times its IR size (the
    batch, wherever it went), the first output axis whose preceding axes hold as many
    elements as the input's before that axis is made k times larger."""
    x = xs[0]
    ir_in = [int(d) for d in infos[0].shape]
    shape = [int(d) for d in layer.top_shapes[0]] or list(layer.param("shape"))
    if list(x.shape) == ir_in or x.ndim != len(ir_in):
        return [x.reshape(shape)]
    grown = [a for a in range(x.ndim) if x.shape[a] != ir_in[a]]
    before = int(np.prod(ir_in[:grown[0]])) if grown else 1
    prefixes = [int(np.prod(shape[:j])) for j in range(len(shape))]
    if len(grown) != 1 or ir_in[grown[0]] == 0 or x.shape[grown[0]] % ir_in[grown[0]] or before not in prefixes:
        raise layer.error(f"input of shape {list(x.shape)} for the IR's {ir_in}: only one axis (the batch) may "
                          f"differ, by a whole factor, where the output can carry it", "shape")
    shape[prefixes.index(before)] *= x.shape[grown[0]] // ir_in[grown[0]]
    return [x.reshape(shape)]


def transpose(layer, xs, infos):
    perm = layer.param("perm")
    if not isinstance(perm, list) or sorted(perm) != list(range(xs[0].ndim)):
        raise layer.error(f"perm {perm} is not a permutation of {xs[0].ndim} axes", "perm")
    return [np.ascontiguousarray(xs[0].transpose(perm))]


def concat_parts(parts, axis: int) -> np.ndarray:
    """Concatenate; inputs of batch 1 (Constants) are broadcast over the batch being run
    when the concatenation is along another axis."""
    batch = max(p.shape[0] for p in parts) if parts[0].ndim else 1
    if parts[0].ndim and axis % parts[0].ndim != 0:
        parts = [np.broadcast_to(p, (batch,) + p.shape[1:]) if p.shape[0] == 1 else p for p in parts]
    return np.concatenate(parts, axis=axis)


def concat(layer, xs, infos):
    return [concat_parts(xs, int(layer.param("axis")))]


def unchanged(move):
    """The integer form of a layer that moves integers without rescaling them."""
    def forward(layer, xs, infos):
        same_quantization(layer, infos[0])
        return move(layer, xs, infos)
    forward.__doc__ = f"{move.__name__}: the integers move unchanged (top scale/zp = the input's)."
    return forward


def concat_int(layer, xs, infos):
    """part_i = requantize(A_i, M_i, s_i) with A_i = q_i + zp_i, `scale_value = [M_i ...]`,
    `shift_value = [s_i ...]` (or one shift for all; absent: M_i = 1, s_i = 0, the inputs
    already share the output's quantization); out = concat(parts)."""
    n = len(xs)
    ms, ss = (np.asarray(stored_ints(layer, c, p, default)) for c, p, default in
              (("scale", "scale_value", 1), ("shift", "shift_value", 0)))
    ms, ss = (v if v.ndim else np.full(n, v) for v in (ms, ss))
    if ms.shape[0] != n or ss.shape[0] != n:
        raise layer.error(f"scale_value/shift_value have {ms.shape[0]}/{ss.shape[0]} entries for {n} inputs",
                          "scale_value")
    bounds = top_bounds(layer)
    parts = [requantize(layer, shifted(x, info, layer), m, s, *bounds) for x, info, m, s in zip(xs, infos, ms, ss)]
    return [concat_parts(parts, int(layer.param("axis")))]


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


PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC", "EDGE", "WRAP")


def pad_geometry(layer, x):
    pads = layer.param("pads")
    if (not isinstance(pads, list) or len(pads) != x.ndim
            or any(not isinstance(p, list) or len(p) != 2 for p in pads)):
        raise layer.error(f"pads {pads} must be one [before, after] per axis ({x.ndim})", "pads")
    mode = str(layer.param("mode", "CONSTANT")).upper()
    if mode not in PAD_MODES:
        raise layer.error(f"unsupported Pad mode '{mode}' ({', '.join(PAD_MODES)})", "mode")
    return [[int(a), int(b)] for a, b in pads], mode


def pad_values(x, pads, mode, fill):
    """Pad axis by axis, the first axis first: position p in [-before, size + after)
    takes `fill` outside the input (CONSTANT), or the input at index clamp(p, 0, size - 1)
    (EDGE), p mod size (WRAP), or the mirrored index f < size ? f : period - sigma - f,
    f = p mod period (REFLECT: period max(2(size-1), 1), sigma 0; SYMMETRIC: period
    2 size, sigma 1): NumPy's pad modes, pads wider than the axis included.
    Negative pads crop."""
    for axis, (before, after) in enumerate(pads):
        if not (before or after):
            continue
        size = x.shape[axis]
        if size == 0 and mode != "CONSTANT":
            raise ValueError(f"cannot pad an empty axis {axis} in {mode} mode")
        p = np.arange(-before, size + after)
        if mode == "CONSTANT":
            inside = ((p >= 0) & (p < size)).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
            x = np.where(inside, np.take(x, np.clip(p, 0, max(size - 1, 0)), axis=axis), fill)
        elif mode == "EDGE":
            x = np.take(x, np.clip(p, 0, size - 1), axis=axis)
        elif mode == "WRAP":
            x = np.take(x, np.mod(p, size), axis=axis)
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


def constant_float(layer, xs, infos):
    """A float Constant's values; integers with weights_scale (a weight-only MatMul's
    weights) dequantized."""
    if layer.has_const("weights_scale") or "weights_scale" in layer.params:
        return [float_weights(layer)]
    return [layer.const("weights")]


def pad_int(layer, xs, infos):
    """Pad of integers, no rescale. CONSTANT fills the integer `constant_value`, which a
    quantized IR must carry (its default, real 0, is -zp, not 0)."""
    same_quantization(layer, infos[0])
    pads, mode = pad_geometry(layer, xs[0])
    if infos[0].dtype.minifloat:  # the fill is a value of the format
        fill = np.float32(layer.param("constant_value", 0.0)) if mode == "CONSTANT" else np.float32(0)
        return [pad_values(xs[0], pads, mode, fill)]
    fill = int_value(layer, "constant_value", layer.param("constant_value")) if mode == "CONSTANT" else 0
    return [pad_values(xs[0], pads, mode, np.int64(fill))]


def quantize_int(layer, xs, infos):
    """Quantize: a float tensor into the top's integers, as the Input layer does (in float32)."""
    if layer.top_types[0].minifloat:
        return [minifloat.quantize(xs[0], layer.top_scales[0], layer.top_types[0].name)]
    zp, lo, hi = top_bounds(layer)
    return [quantize(xs[0], layer.top_scales[0], zp, lo, hi)]


def dequantize_float(layer, xs, infos):
    """DeQuantize: fl32(q + zp) * fl32(1 / scale) with the input's scale/zp (float32; an fp8
    input's values as q)."""
    return [dequantize(xs[0], *infos[0].quant(layer))]


def meshgrid(layer, xs, infos):
    """Meshgrid of two 1-D inputs: `indexing` xy (tops [len(y), len(x)]) or ij ([len(x),
    len(y)]); `sparse` keeps one row/column of the repeated axis; each top its input's type."""
    indexing, sparse = str(layer.param("indexing", "xy")), layer.param("sparse", False)
    if len(xs) != 2 or indexing not in ("xy", "ij") or sparse not in (True, False):
        raise layer.error(f"takes 2 inputs, indexing xy/ij, sparse true/false; got {len(xs)}, {indexing!r}, "
                          f"{sparse!r}", "indexing")
    x, y = xs
    if indexing == "xy":
        grids = np.meshgrid(x, y, indexing="xy", sparse=bool(sparse))
    else:
        grids = np.meshgrid(x, y, indexing="ij", sparse=bool(sparse))
    return [np.ascontiguousarray(g) for g in grids]


def meshgrid_int(layer, xs, infos):
    """The integers move unchanged: top i shares input i's scale/zp/dtype."""
    for i, info in enumerate(infos):
        if (layer.top_scales[i], layer.top_zps[i], layer.top_types[i]) != (*info.quant(layer), info.dtype):
            raise layer.error(f"top '{layer.tops[i]}' does not share input '{info.name}''s scale/zp/dtype; "
                              f"Meshgrid does not rescale")
    return meshgrid(layer, xs, infos)


FLOAT = {"Reshape": reshape, "Transpose": transpose, "Concat": concat, "Split": split, "Slice": slice_,
         "Constant": constant_float, "Pad": pad_float, "DeQuantize": dequantize_float, "Meshgrid": meshgrid}
INT = {"Reshape": unchanged(reshape), "Transpose": unchanged(transpose), "Split": unchanged(split),
       "Slice": unchanged(slice_), "Pad": pad_int, "Concat": concat_int, "Constant": constant,
       "Quantize": quantize_int, "Meshgrid": meshgrid_int}
# The tensor each boundary layer reads is of the other kind than its top.
READS_OTHER_KIND = ("Quantize", "DeQuantize")
