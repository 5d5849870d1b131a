"""PyramidROIAlign (docs/ir-ops.md, docs/integer-semantics.md): boxes [1, R, 4] (y1, x1,
y2, x2) pooled from the feature map of their level (inputs 1..4, batch entry 0).

Float, proposal_normalized=true: level by the area against fixed bounds, then a
TensorFlow-style bilinear crop with the map's H - 1 and W - 1 swapped in the scales (the
tool chain's form). proposal_normalized=false: level floor(4 + log2(sqrt(area) / 224) +
1e-6) in [2, 5], then RoiAlign with spatial_scale_value[level - 2]: a sample outside [-1,
size] counts 0, others are clamped into the map, the mean over the samples.
Integer (proposal_normalized=false): the box corners in Q(spatial_shift) pixels, integer
tap weights, each sample's exact sum added to a float32 accumulator, then the level's
rescale."""
import math

import numpy as np

from ..floats import computing_float
from .roi import four, grid_mask, taps
from .stage import shifted, top_bounds

BOUNDS = (0.005978503007119795, 0.02391401202847918, 0.09565604811391672)


def _params(layer):
    p = {}
    for key in ("resize_height", "resize_width", "image_height", "image_width"):
        v = layer.param(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise layer.error(f"{key} {v!r} must be a positive integer", key)
        p[key] = v
    p["normalized"] = layer.param("proposal_normalized", True)
    if p["normalized"] not in (True, False):
        raise layer.error(f"proposal_normalized {p['normalized']!r} must be true or false", "proposal_normalized")
    if p["normalized"] and min(p["resize_height"], p["resize_width"]) < 2:
        raise layer.error("resize_height/resize_width must be at least 2 with proposal_normalized=true",
                          "resize_height")
    mode = str(layer.param("coordinate_transformation_mode", "OUTPUT_HALF_PIXEL")).upper()
    if mode not in ("HALF_PIXEL", "OUTPUT_HALF_PIXEL"):
        raise layer.error(f"unsupported coordinate_transformation_mode '{mode}'", "coordinate_transformation_mode")
    p["half"] = mode == "HALF_PIXEL"
    spatial = layer.param("spatial_scale_value", [1.0] * 4)
    if not isinstance(spatial, list) or len(spatial) != 4 or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in spatial):
        raise layer.error(f"spatial_scale_value {spatial!r} must be 4 positive numbers", "spatial_scale_value")
    sample = layer.param("sample", [0, 0])
    if not isinstance(sample, list) or len(sample) != 2 or any(isinstance(v, bool) or not isinstance(v, int)
                                                                for v in sample):
        raise layer.error(f"sample {sample!r} must be two integers", "sample")
    return dict(p, spatial=spatial, sample=sample)


def _check(layer, xs):
    if len(xs) != 5:
        raise layer.error(f"takes 5 inputs (boxes and four feature maps), got {len(xs)}")
    if xs[0].ndim != 3 or xs[0].shape[0] != 1 or xs[0].shape[2] != 4:
        raise layer.error(f"input 0 must hold boxes [1, R, 4], got {list(xs[0].shape)}")
    if any(m.ndim != 4 for m in xs[1:]) or len({m.shape[-1] for m in xs[1:]}) != 1:
        raise layer.error("inputs 1..4 must be NHWC maps of one channel count")


def _crop(fm, b, rh, rw):
    h, w = fm.shape[1:3]
    hs = (b[:, 2] - b[:, 0]) * np.float32(w - 1) / np.float32(rh - 1)
    ws = (b[:, 3] - b[:, 1]) * np.float32(h - 1) / np.float32(rw - 1)
    y = (np.float32(w - 1) * b[:, 0])[:, None] + np.arange(rh, dtype=np.float32)[None, :] * hs[:, None]
    x = (np.float32(h - 1) * b[:, 1])[:, None] + np.arange(rw, dtype=np.float32)[None, :] * ws[:, None]
    y, x = np.clip(y, 0, np.float32(h - 1)), np.clip(x, 0, np.float32(w - 1))
    t, left = np.floor(y), np.floor(x)
    ly, lx = (y - t).astype(fm.dtype)[:, :, None, None], (x - left).astype(fm.dtype)[:, None, :, None]
    t, bot, left, right = t.astype(np.int64), np.ceil(y).astype(np.int64), left.astype(np.int64), \
        np.ceil(x).astype(np.int64)
    m = fm[0]
    tl, tr = m[t[:, :, None], left[:, None, :]], m[t[:, :, None], right[:, None, :]]
    bl, br = m[bot[:, :, None], left[:, None, :]], m[bot[:, :, None], right[:, None, :]]
    return (tl + br - tr - bl) * (ly * lx) + (tl + (tr - tl) * lx) + (bl - tl) * ly


def _pixel_axis(lo, hi, scale, bins, ratio, size, half):
    off = np.float32(0.5 if half else 0.0)
    start = lo * np.float32(scale) - off
    extent = hi * np.float32(scale) - off - start
    if not half:
        extent = np.maximum(extent, np.float32(1))
    step = extent / np.float32(bins)
    grid = np.full(len(lo), ratio, np.int64) if ratio > 0 else np.ceil(step).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        width = step / grid.astype(np.float32)
    g = np.arange(max(1, grid.max(initial=1)), dtype=np.float32)
    c = ((step[:, None, None] * np.arange(bins, dtype=np.float32)[None, :, None] + start[:, None, None])
         + (width / np.float32(2))[:, None, None]) + width[:, None, None] * g[None, None, :]
    inside = (c >= -1) & (c <= size) & grid_mask(grid, len(g))[:, None, :]
    c = np.clip(np.where(inside, c, 0), 0, np.float32(size - 1))
    low = np.floor(c)
    frac = c - low
    low = low.astype(np.int64)
    return low, np.minimum(low + 1, size - 1), np.where(inside, np.float32(1) - frac, 0), \
        np.where(inside, frac, 0), grid, extent != 0


def pyramid_float(layer, xs, infos):
    _check(layer, xs)
    p = _params(layer)
    maps = [computing_float(m) for m in xs[1:]]
    b = xs[0][0].astype(np.float32)
    rh, rw, c = p["resize_height"], p["resize_width"], maps[0].shape[-1]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    if p["normalized"]:
        lvl = (area > BOUNDS[2]) * 5 + ((area < BOUNDS[2]) & (area > BOUNDS[1])) * 4 + \
            ((area < BOUNDS[1]) & (area > BOUNDS[0])) * 3 + (area < BOUNDS[0]) * 2
        source = np.where(lvl == 0, 4, lvl - 1)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            lvl = np.floor(np.float32(4) + np.log2(np.sqrt(area) / np.float32(224)) + np.float32(1e-6))
        source = np.clip(lvl, 2, 5).astype(np.int64) - 1
    out = np.zeros((len(b), rh, rw, c), maps[0].dtype)
    for k in range(4):
        chosen = source == k + 1
        if chosen.any():
            out[chosen] = _crop(maps[k], b[chosen], rh, rw) if p["normalized"] else \
                _pixel_boxes(maps[k], b[chosen], p, k)
    return [out]


def _pixel_boxes(fm, b, p, k):
    (sh, sw), rh, rw = p["sample"], p["resize_height"], p["resize_width"]
    h, w, c = fm.shape[1:]
    ys = _pixel_axis(b[:, 0], b[:, 2], p["spatial"][k], rh, sh, h, p["half"])
    xs = _pixel_axis(b[:, 1], b[:, 3], p["spatial"][k], rw, sw, w, p["half"])
    index = four(ys[0], ys[1], xs[0], xs[1], lambda a, v: a * w + v)
    weight = four(*(v.astype(fm.dtype) for v in (ys[2], ys[3], xs[2], xs[3])), np.multiply)
    s = taps(fm[:1], np.zeros(len(b), np.int64), index, weight, lambda v, wt: (v * wt).sum((2, 3)))
    with np.errstate(divide="ignore", invalid="ignore"):
        s = s / (ys[4] * xs[4]).astype(s.dtype)[:, None, None]
    return np.where((ys[5] & xs[5])[:, None, None], s, 0).reshape(len(b), rh, rw, c)


# ---- integer ----------------------------------------------------------------------------
def _ints(layer, key, n):
    v = layer.param(key)
    if not isinstance(v, list) or len(v) != n or any(isinstance(e, bool) or not isinstance(e, int) for e in v):
        raise layer.error(f"{key} {v!r} must be {n} integers", key)
    return v


def _int_axis(start, extent, bins, ratio, size, ss):
    unit = bins << ss
    if ratio > 0:
        grid = np.full(len(extent), ratio, np.int64)
    else:
        whole = np.fix(extent / unit).astype(np.int64)
        grid = whole + (extent - whole * unit > 0)
    step = np.fix(extent / bins).astype(np.int64)
    width = np.fix(step / (2 * np.maximum(grid, 1))).astype(np.int64)
    g = np.arange(max(1, grid.max(initial=1)))
    c = (step[:, None, None] * np.arange(bins)[None, :, None] + start[:, None, None]) + \
        width[:, None, None] * (2 * g + 1)[None, None, :]
    low = c >> ss
    frac = c - (low << ss)
    inside = (low >= -1) & (low <= size) & grid_mask(grid, len(g))[:, None, :]
    return np.clip(low, 0, size - 1), np.clip(low + 1, 0, size - 1), np.where(inside, (1 << ss) - frac, 0), \
        np.where(inside, frac, 0), grid


def _int_level(layer, p, fm, a, ms, out_ms, ss):
    half = (1 << (ss - 1)) if p["half"] else 0
    y1, x1, y2, x2 = (np.clip(np.rint(a[:, k].astype(np.float64) * ms[0] * 2.0 ** -ms[1]), 0, 65535).astype(np.int64)
                      - half for k in range(4))
    ey, ex = y2 - y1, x2 - x1
    if not p["half"]:
        ey, ex = np.maximum(ey, 1 << ss), np.maximum(ex, 1 << ss)
    (sh, sw), rh, rw = p["sample"], p["resize_height"], p["resize_width"]
    h, w, c = fm.shape[1:]
    ys, xs = _int_axis(y1, ey, rh, sh, h, ss), _int_axis(x1, ex, rw, sw, w, ss)
    index = four(ys[0], ys[1], xs[0], xs[1], lambda u, v: u * w + v)
    weight = four(ys[2], ys[3], xs[2], xs[3], lambda u, v: (u * v) >> ss)
    acc = taps(fm[:1], np.zeros(len(a), np.int64), index, weight, _sum32).astype(np.float32)
    if sh > 0 and sw > 0:
        y = np.rint(acc.astype(np.float64) * out_ms[0] * 2.0 ** -(out_ms[1] + ss))
    else:
        n = (ys[4] * xs[4]).astype(np.float32)[:, None, None]
        y = np.rint(np.floor_divide(acc * np.float32(out_ms[0]), n).astype(np.float64) * 2.0 ** -(out_ms[1] + ss))
    y = np.where(((ey != 0) & (ex != 0))[:, None, None], y, math.nan)
    return y.reshape(len(a), rh, rw, c)


def _sum32(v, wt):
    terms = (v * wt).sum(3)
    acc = np.zeros((terms.shape[0], terms.shape[1], terms.shape[3]), np.float32)
    for k in range(terms.shape[2]):
        acc = acc + terms[:, :, k].astype(np.float32)
    return acc


def pyramid_int(layer, xs, infos):
    _check(layer, xs)
    p = _params(layer)
    if p["normalized"]:
        raise layer.error("a quantized proposal_normalized=true layer is not supported", "proposal_normalized")
    ss = layer.param("spatial_shift")
    if isinstance(ss, bool) or not isinstance(ss, int) or not 0 <= ss <= 30:
        raise layer.error(f"spatial_shift {ss!r} must be an integer in [0, 30]", "spatial_shift")
    m, s = _ints(layer, "scale_value", 4), _ints(layer, "shift_value", 4)
    mi, si = _ints(layer, "input_scale", 4), _ints(layer, "input_shift", 4)
    bounds = _ints(layer, "levels", 3)
    q = xs[0][0].astype(np.int64)
    area = np.remainder((q[:, 2] - q[:, 0]) * (q[:, 3] - q[:, 1]) + 2 ** 31, 2 ** 32) - 2 ** 31
    b = [(v + 2 ** 31) % 2 ** 32 - 2 ** 31 for v in bounds]  # the int32 comparison wraps them
    level = np.zeros_like(area)
    for k, mask in enumerate([area < b[0], (area >= b[0]) & (area < b[1]), (area >= b[1]) & (area < b[2]),
                              area >= b[2]]):
        level = np.where(mask, k, level)
    a = shifted(xs[0], infos[0], layer)[0]
    y = np.zeros((len(q), p["resize_height"], p["resize_width"], xs[1].shape[-1]))
    for k in range(4):
        chosen = level == k
        if chosen.any():
            y[chosen] = _int_level(layer, p, shifted(xs[k + 1], infos[k + 1], layer), a[chosen], (mi[k], si[k]),
                                   (m[k], s[k]), ss)
    zp, lo, hi = top_bounds(layer)
    out = np.clip(np.nan_to_num(y, nan=0.0).astype(np.int64) - zp, lo, hi)
    return [np.where(np.isnan(y), 0, out)]


FLOAT = {"PyramidROIAlign": pyramid_float}
INT = {"PyramidROIAlign": pyramid_int}
