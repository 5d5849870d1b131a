"""RoiAlign (docs/ir-ops.md, docs/integer-semantics.md): the pooled bins of each box of
input 1 ([R, 5]: batch index, y1, x1, y2, x2) over the NHWC map of input 0.

Float: coordinates in float32 in the tool chain's order of operations.
* AVG, equal spatial scales and samples, OUTPUT_HALF_PIXEL: torchvision's roi_align: box
  start fl32(fl64(v) * scale), size max(end - start, 1), bin = size / pooled, samples s or
  ceil(bin), point (start + i * bin) + ((g + 1/2) * bin) / samples; a point outside
  [-1, size] reads 0, below 0 reads at 0, at or past size - 1 reads the last pixel; the
  mean over max(samples, 1).
* otherwise: start fl32(v) * fl32(scale) - offset (1/2 with HALF_PIXEL), a box reversed or
  ending past the map gives 0, size (max 1 without HALF_PIXEL) / pooled = step, samples s
  or ceil(step), bin = step / samples, point ((step * i + start) + bin / 2) + bin * g; taps
  floor(point) and the next (both the last pixel at or past size - 1), flat pixel indices
  modulo H * W; AVG the mean, MAX the largest weighted tap.
Integer: see docs/integer-semantics.md (RoiAlign)."""
import numpy as np

from ..floats import computing_float
from .stage import int_param, shifted, top_bounds

CHUNK = 1 << 22
FLOAT32_MIN = float(np.finfo(np.float32).min)


def _pair(layer, key, positive=True, default=None):
    value = layer.param(key) if default is None else layer.param(key, default)
    if not isinstance(value, list) or len(value) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, int) or (positive and v <= 0) for v in value):
        raise layer.error(f"{key} {value!r} must be two {'positive ' if positive else ''}integers", key)
    return value


def _choice(layer, key, choices, default):
    value = str(layer.param(key, default)).upper()
    if value not in choices:
        raise layer.error(f"unsupported {key} '{value}' ({', '.join(choices)})", key)
    return value


def _params(layer, integer: bool):
    if integer:
        spatial = _pair(layer, "spatial_scale_value")
    else:
        spatial = layer.param("spatial_scale_value", [1.0, 1.0])
        if not isinstance(spatial, list) or len(spatial) != 2 or \
                any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in spatial):
            raise layer.error(f"spatial_scale_value {spatial!r} must be 2 positive numbers", "spatial_scale_value")
    mode = _choice(layer, "coordinate_transformation_mode", ("HALF_PIXEL", "OUTPUT_HALF_PIXEL"), "HALF_PIXEL")
    return dict(pooled=_pair(layer, "pooled_shape"), spatial=spatial,
                sample=_pair(layer, "sample", False, [0, 0]), method=_choice(layer, "method", ("AVG", "MAX"), "AVG"),
                half=mode == "HALF_PIXEL")


def _check(layer, xs):
    if len(xs) != 2:
        raise layer.error(f"takes 2 inputs, got {len(xs)}")
    if xs[0].ndim != 4 or xs[1].ndim != 2 or xs[1].shape[1] != 5:
        raise layer.error(f"needs an NHWC map and boxes [R, 5], got {list(xs[0].shape)} and {list(xs[1].shape)}")


def taps(fm, batch, index, weight, combine, *per_box):
    """combine(values [r, p, s, t, c], weight [r, p, s, t, 1], *per_box cut) per chunk of boxes;
    values are fm[batch[r]] at the flat pixel indices."""
    n, h, w, c = fm.shape
    flat = fm.reshape(n * h * w, c)
    r, p, s, t = index.shape
    out = np.empty((r, p, c), np.float64 if fm.dtype != np.float32 else np.float32)
    step = max(1, CHUNK // max(1, p * s * t * c))
    for lo in range(0, r, step):
        hi = min(r, lo + step)
        rows = index[lo:hi] + (batch[lo:hi] * (h * w)).reshape(-1, 1, 1, 1)
        out[lo:hi] = combine(flat[rows], weight[lo:hi][..., None], *(e[lo:hi] for e in per_box))
    return out


def four(y_lo, y_hi, x_lo, x_hi, op):
    """[R, ph, pw, Sy, Sx, 4] from per-axis [R, ph, Sy] and [R, pw, Sx] arrays, taps in the
    order (y_lo, x_lo), (y_lo, x_hi), (y_hi, x_lo), (y_hi, x_hi), each op(y, x)."""
    ys = [v[:, :, None, :, None] for v in (y_lo, y_hi)]
    xs = [v[:, None, :, None, :] for v in (x_lo, x_hi)]
    t = np.stack(np.broadcast_arrays(op(ys[0], xs[0]), op(ys[0], xs[1]), op(ys[1], xs[0]), op(ys[1], xs[1])), -1)
    r, ph, pw, sy, sx, _ = t.shape
    return t.reshape(r, ph * pw, sy * sx, 4)


def batches(b, n):
    ok = (b >= 0) & (b <= n - 1)
    return np.where(ok, b, 0).astype(np.int64), ok


def grid_mask(grid, largest):
    return np.arange(largest)[None, :] < grid[:, None]


# ---- float ------------------------------------------------------------------------------
def _tv_axis(lo, hi, scale, bins, ratio, size):
    start = (lo.astype(np.float64) * scale).astype(np.float32)
    extent = np.maximum((hi.astype(np.float64) * scale).astype(np.float32) - start, np.float32(1))
    width = extent / np.float32(bins)
    grid = np.full(len(lo), ratio, np.int64) if ratio > 0 else np.ceil(width).astype(np.int64)
    g = np.arange(max(1, grid.max(initial=1)), dtype=np.float32)
    i = np.arange(bins, dtype=np.float32)
    c = (start[:, None, None] + i[None, :, None] * width[:, None, None]) + \
        ((g + np.float32(0.5))[None, None, :] * width[:, None, None]) / grid.astype(np.float32)[:, None, None]
    inside = (c >= -1) & (c <= size) & grid_mask(grid, len(g))[:, None, :]
    c = np.maximum(c, np.float32(0))
    low = c.astype(np.int64)
    top = low >= size - 1
    low = np.where(top, size - 1, low)
    c = np.where(top, low.astype(np.float32), c)
    frac = c - low.astype(np.float32)
    return low, np.where(top, low, low + 1), np.where(inside, np.float32(1) - frac, 0), \
        np.where(inside, frac, 0), grid, np.ones(len(lo), bool), inside


def _loop_axis(lo, hi, scale, bins, ratio, size, half):
    off = np.float32(0.5 if half else 0.0)
    start = lo * np.float32(scale) - off
    end = hi * np.float32(scale) - off
    keep = (end >= start) & (end <= size)
    extent = end - start if half else np.maximum(end - start, np.float32(1))
    step = extent / np.float32(bins)
    grid = np.full(len(lo), ratio, np.int64) if ratio > 0 else np.ceil(step).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        width = step / grid.astype(np.float32)
    g = np.arange(max(1, grid.max(initial=1)), dtype=np.float32)
    i = np.arange(bins, dtype=np.float32)
    c = ((step[:, None, None] * i[None, :, None] + start[:, None, None]) + (width / np.float32(2))[:, None, None]) \
        + width[:, None, None] * g[None, None, :]
    inside = np.broadcast_to(grid_mask(grid, len(g))[:, None, :], c.shape)
    low = np.floor(np.where(inside, c, 0)).astype(np.int64)
    top = low >= size - 1
    frac = np.where(top, np.float32(0), c - low.astype(np.float32))
    low = np.where(top, size - 1, low)
    return low, np.where(top, low, low + 1), np.where(inside, np.float32(1) - frac, 0), \
        np.where(inside, frac, 0), grid, keep, inside


def roialign_float(layer, xs, infos):
    _check(layer, xs)
    p = _params(layer, False)
    x = computing_float(xs[0])
    n, h, w, c = x.shape
    r = xs[1].astype(np.float32)
    (ph, pw), (sh, sw), (sy, sx) = p["pooled"], p["sample"], p["spatial"]
    tv = p["method"] == "AVG" and sy == sx and sh == sw and not p["half"]
    if tv:
        ys, xs_ = _tv_axis(r[:, 1], r[:, 3], sy, ph, sh, h), _tv_axis(r[:, 2], r[:, 4], sx, pw, sw, w)
    else:
        ys = _loop_axis(r[:, 1], r[:, 3], sy, ph, sh, h, p["half"])
        xs_ = _loop_axis(r[:, 2], r[:, 4], sx, pw, sw, w, p["half"])
    batch, ok = batches(r[:, 0], n)
    ok = ok & ys[5] & xs_[5]
    index = np.remainder(four(ys[0], ys[1], xs_[0], xs_[1], lambda a, b: a * w + b), h * w)
    weight = four(*(v.astype(x.dtype) for v in (ys[2], ys[3], xs_[2], xs_[3])), np.multiply)
    if p["method"] == "AVG":
        count = (ys[4] * xs_[4]).astype(x.dtype)
        count = np.maximum(count, 1) if tv else count
        out = taps(x, batch, index, weight, lambda v, wt: (v * wt).sum((2, 3)))
        with np.errstate(divide="ignore", invalid="ignore"):
            out = out / count[:, None, None]
    else:
        keep = four(ys[6], ys[6], xs_[6], xs_[6], np.logical_and)[..., 0]
        out = taps(x, batch, index, weight, _largest_float, keep)
    out = np.where(ok[:, None, None], out, 0)
    return [out.reshape(len(r), ph, pw, c)]


def _largest_float(v, wt, keep):
    products = (v * wt).max(3)
    return np.where(keep[..., None], products, FLOAT32_MIN).max(2)


# ---- integer ----------------------------------------------------------------------------
def trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def scaled(v, m, s):
    """trunc(fl32(v * M) * 2^-s)."""
    return ((v * m).astype(np.float32) * np.float32(2.0 ** -s)).astype(np.int64)


def _fixed_axis(start, extent, bins, ratio, size, ss, bin_ms, grid_ms):
    step = scaled(extent, *bin_ms)
    width = step * grid_ms[0]
    width = width >> grid_ms[1] if grid_ms[1] >= 0 else width << -grid_ms[1]
    c = step[:, None, None] * np.arange(bins)[None, :, None] + start[:, None, None] + \
        width[:, None, None] * (2 * np.arange(ratio) + 1)[None, None, :]
    low = c >> ss
    frac = c - (low << ss)
    top = low >= size - 1
    low = np.where(top, size - 1, low)
    frac = np.where(top, 0, frac)
    return low, np.where(top, low, low + 1), (1 << ss) - frac, frac, np.full(len(start), ratio), \
        np.ones(c.shape, bool)


def _adaptive_axis(start, extent, bins, ratio, size, ss):
    unit = bins << ss
    step, step_mod = extent // unit, extent % unit
    grid = np.full(len(extent), ratio, np.int64) if ratio > 0 else step + (step_mod > 0)
    whole = np.maximum(grid, 1) * unit
    width = extent // whole
    width_mod = extent - width * whole
    i = np.arange(bins)[None, :, None]
    g = np.arange(max(1, grid.max(initial=1)))[None, None, :]

    def col(v):
        return v[:, None, None]
    t1 = col(grid * 2) * (col(step_mod) * i + col(start) * bins) + col(whole * width + width_mod) + \
        2 * col(width_mod) * g
    t2 = trunc_div(t1, col(whole * 2))
    low = col(step) * i + col(width) * g + t2
    d1 = t1 - t2 * col(whole * 2)
    top = low >= size - 1
    low = np.where(top, size - 1, low)
    d1 = np.where(top, 0, d1)
    d2 = col(whole * 2) - d1
    keep = np.broadcast_to(grid_mask(grid, g.shape[2])[:, None, :], low.shape)
    return low, np.where(top, low, low + 1), np.where(keep, trunc_div(d2, 2), 0), \
        np.where(keep, trunc_div(d1, 2), 0), grid, keep


def roialign_int(layer, xs, infos):
    _check(layer, xs)
    p = _params(layer, True)
    ss = int_param(layer, "spatial_shift_value")
    if not 1 <= ss <= 20:
        raise layer.error(f"spatial_shift_value {ss} must be in [1, 20]", "spatial_shift_value")
    (m_out, m_roi), (s_out, s_roi) = _pair(layer, "scale_value", False), _pair(layer, "shift_value", False)
    x, rois = shifted(xs[0], infos[0], layer), shifted(xs[1], infos[1], layer)
    n, h, w, c = x.shape
    adaptive = min(p["sample"]) <= 0
    half = (1 << (ss - 1)) if p["half"] else 0
    sy, sx = p["spatial"]
    corners = ((1, sy), (2, sx), (3, sy), (4, sx))
    if adaptive:  # the spatial scale inside the float32 product, else after it
        y1, x1, y2, x2 = (scaled(rois[:, k] * sp, m_roi, s_roi) - half for k, sp in corners)
    else:
        y1, x1, y2, x2 = (scaled(rois[:, k], m_roi, s_roi) * sp - half for k, sp in corners)
    batch, ok = batches(rois[:, 0], n)
    ok = ok & (x2 >= x1) & (y2 >= y1) & (x2 <= w << ss) & (y2 <= h << ss)
    ey, ex = y2 - y1, x2 - x1
    if not p["half"]:
        ey, ex = np.maximum(ey, 1 << ss), np.maximum(ex, 1 << ss)
    (ph, pw), (sh, sw) = p["pooled"], p["sample"]
    if adaptive:
        ya, xa = _adaptive_axis(y1, ey, ph, sh, h, ss), _adaptive_axis(x1, ex, pw, sw, w, ss)

        def product(a, b):
            return np.rint((a * b).astype(np.float32) * np.float32(2.0 ** -ss)).astype(np.int64)
    else:
        bm, bs = _pair(layer, "bin_scale_value", False), _pair(layer, "bin_shift_value", False)
        gm, gs = _pair(layer, "grid_scale_value", False), _pair(layer, "grid_shift_value", False)
        ya = _fixed_axis(y1, ey, ph, sh, h, ss, (bm[0], bs[0]), (gm[0], gs[0]))
        xa = _fixed_axis(x1, ex, pw, sw, w, ss, (bm[1], bs[1]), (gm[1], gs[1]))

        def product(a, b):
            return (a * b) >> ss
    index = np.remainder(four(ya[0], ya[1], xa[0], xa[1], lambda a, b: a * w + b), h * w)
    weight = four(ya[2], ya[3], xa[2], xa[3], product)
    keep = four(ya[5], ya[5], xa[5], xa[5], np.logical_and)[..., 0]
    scale = m_out * 2.0 ** -(s_out + ss)
    samples = (ya[4] * xa[4]).astype(np.float64)[:, None, None]
    div = samples * ph * pw if adaptive else np.ones_like(samples)
    if p["method"] == "AVG":
        total = taps(x, batch, index, weight, lambda v, wt: (v * wt).sum((2, 3)))
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.rint(total.astype(np.float64) * scale / (div * samples if adaptive else div))
    else:
        y = taps(x, batch, index, weight, lambda v, wt, k, d: _largest_int(v, wt, k, d, scale), keep, div)
    y = np.where(ok[:, None, None], np.nan_to_num(y, nan=0.0), 0)
    zp, lo, hi = top_bounds(layer)
    return [np.clip(y.astype(np.int64) - zp, lo, hi).reshape(len(rois), ph, pw, c)]


def _largest_int(v, wt, keep, div, scale):
    r = np.rint((v * wt).max(3).astype(np.float64) * scale / div[..., None])
    return np.where(keep[..., None], r, -2.0 ** 31).max(2)


FLOAT = {"RoiAlign": roialign_float}
INT = {"RoiAlign": roialign_int}
