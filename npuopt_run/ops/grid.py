"""GridSample (docs/ir-ops.md, docs/integer-semantics.md): the map (input 0, NHWC or NDHWC)
sampled at the grid (input 1, x, y(, z) in [-1, 1]).

Float: NEAREST and BILINEAR with ZEROS/BORDER as the tool chain's float forward (pixel
coordinate ((g + 1) size - 1) / 2, or (g + 1) / 2 (size - 1) with align_corners, in
float32; round half to even, or the taps floor and next blended along x, then y, then z);
CUBIC or REFLECTION as torch's grid_sample (bicubic A = -0.75; reflected coordinates).
Integer: tables indexed by the grid code + 128 (4-D, a grid of at most 8 bits) or the
coordinates (q + zp) M >> s + (size - 1) 2^(shift - 1) in int16, then integer blends."""
import numpy as np

from ..floats import computing_float

METHODS = {"NEAREST": "NEAREST", "BILINEAR": "BILINEAR", "LINEAR": "BILINEAR", "CUBIC": "CUBIC", "BICUBIC": "CUBIC"}
AXES = ("x", "y", "z")


def _params(layer):
    method = str(layer.param("method", "BILINEAR")).upper()
    padding = str(layer.param("padding_mode", "ZEROS")).upper()
    if method not in METHODS:
        raise layer.error(f"unsupported method '{method}'", "method")
    if padding not in ("ZEROS", "BORDER", "REFLECTION"):
        raise layer.error(f"unsupported padding_mode '{padding}'", "padding_mode")
    align = layer.param("align_corners", False)
    if align not in (True, False):
        raise layer.error(f"align_corners {align!r} must be true or false", "align_corners")
    return METHODS[method], padding, bool(align)


def _check(layer, xs):
    if len(xs) != 2:
        raise layer.error(f"takes 2 inputs, got {len(xs)}")
    x, g = xs
    if x.ndim not in (4, 5) or g.ndim != x.ndim or g.shape[-1] != x.ndim - 2 or g.shape[0] != x.shape[0]:
        raise layer.error(f"needs a map [N, (D,) H, W, C] and a grid of its rank, got {list(x.shape)}, {list(g.shape)}")


def taps(x, index, padding, fill):
    inside = np.ones(index[0].shape, bool)
    clamped = []
    for i, size in zip(index, x.shape[1:-1]):
        inside &= (i >= 0) & (i <= size - 1)
        clamped.append(np.clip(i, 0, size - 1))
    n = np.arange(x.shape[0]).reshape((-1,) + (1,) * (index[0].ndim - 1))
    v = x[(n, *clamped)]
    return np.where(inside[..., None], v, np.asarray(fill, v.dtype)) if padding == "ZEROS" else v


def blended(x, lows, padding, fill, blend):
    def along(axis, fixed):
        if axis == len(lows):
            return taps(x, [lo + b for lo, b in zip(lows, fixed)], padding, fill)
        return blend(along(axis + 1, fixed + (0,)), along(axis + 1, fixed + (1,)), axis)
    return along(0, ())


def _pixels(g, size, align):
    return (g + np.float32(1)) / np.float32(2) * np.float32(size - 1) if align else \
        ((g + np.float32(1)) * np.float32(size) - np.float32(1)) / np.float32(2)


# ---- torch's grid_sample (CUBIC, REFLECTION) ---------------------------------------------
def _reflect(c, low2, high2):
    if low2 == high2:
        return np.zeros_like(c)
    lo, span = low2 / 2, (high2 - low2) / 2
    c = np.abs(c - lo)
    extra, flips = np.fmod(c, span), np.floor(c / span)
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def _padded(c, size, padding, align):
    """A coordinate after the padding mode (border clips, reflection reflects then clips)."""
    if padding == "BORDER":
        return np.clip(c, 0, size - 1)
    if padding == "REFLECTION":
        c = _reflect(c, 0, 2 * (size - 1)) if align else _reflect(c, -1, 2 * size - 1)
        return np.clip(c, 0, size - 1)
    return c


def _torch_grid_sample(x, g, method, padding, align):
    sizes = x.shape[1:-1]
    raw = [(g[..., len(sizes) - 1 - k] + 1) / 2 * (s - 1) if align else ((g[..., len(sizes) - 1 - k] + 1) * s - 1) / 2
           for k, s in enumerate(sizes)]
    if method == "CUBIC":
        lows = [np.floor(c) for c in raw]
        ts = [c - lo for c, lo in zip(raw, lows)]
        out = 0
        for j in range(4):
            row = 0
            for i in range(4):
                ys = _padded(lows[0] - 1 + j, sizes[0], padding, align)
                xs_ = _padded(lows[1] - 1 + i, sizes[1], padding, align)
                v = taps(x, [ys.astype(np.int64), xs_.astype(np.int64)], "ZEROS", 0.0)
                row = row + v * _cubic(ts[1], i)[..., None]
            out = out + row * _cubic(ts[0], j)[..., None]
        return out
    coords = [_padded(c, s, padding, align) for c, s in zip(raw, sizes)]
    if method == "NEAREST":
        return taps(x, [np.rint(c).astype(np.int64) for c in coords], "ZEROS", 0.0)
    lows = [np.floor(c) for c in coords]
    fr = [(c - lo)[..., None] for c, lo in zip(coords, lows)]
    return blended(x, [lo.astype(np.int64) for lo in lows], "ZEROS", 0.0,
                   lambda a, b, k: a * (1 - fr[k]) + b * fr[k])


def _cubic(t, i, a=-0.75):
    """torch's cubic convolution coefficient of tap i (0..3) at fraction t."""
    d = [t + 1, t, 1 - t, 2 - t][i]
    if i in (1, 2):
        return ((a + 2) * d - (a + 3)) * d * d + 1
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a


def grid_sample_float(layer, xs, infos):
    _check(layer, xs)
    method, padding, align = _params(layer)
    x = computing_float(xs[0])
    if method == "CUBIC" or padding == "REFLECTION":
        if method == "CUBIC" and x.ndim == 5:
            raise layer.error("CUBIC takes a 4-D map", "method")
        return [_torch_grid_sample(x, xs[1].astype(x.dtype), method, padding, align)]
    g = xs[1].astype(np.float32)
    sizes = x.shape[1:-1]
    coords = [_pixels(g[..., len(sizes) - 1 - k], s, align) for k, s in enumerate(sizes)]
    if method == "NEAREST":
        return [taps(x, [np.rint(c).astype(np.int64) for c in coords], padding, 0.0)]
    lows = [np.floor(c) for c in coords]
    fr = [(c - lo).astype(x.dtype)[..., None] for c, lo in zip(coords, lows)]
    return [blended(x, [lo.astype(np.int64) for lo in lows], padding, 0.0, lambda a, b, k: a + (b - a) * fr[k])]


# ---- integer ----------------------------------------------------------------------------
def _int_list(layer, key, n):
    v = layer.param(key)
    if not isinstance(v, list) or len(v) != n or any(isinstance(e, bool) or not isinstance(e, int) or e < 0
                                                      for e in v):
        raise layer.error(f"{key} {v!r} must be {n} non-negative integers", key)
    return v


def _table(layer, name, code):
    t = layer.const(name).astype(np.int64)
    if t.size != 256:
        raise layer.error(f"constant '{name}' has {t.size} entries, expected 256", name + "_shape")
    return t.reshape(-1)[code]


def grid_sample_int(layer, xs, infos):
    _check(layer, xs)
    method, padding, align = _params(layer)
    if method == "CUBIC" or padding == "REFLECTION":
        raise layer.error(f"{method} with {padding} padding has no integer form", "method")
    q = xs[0].astype(np.int64)
    _, zp_x = infos[0].quant(layer)
    rank = q.ndim - 2
    axes = AXES[:rank][::-1]
    shifts = []
    for a in axes:
        s = layer.param(f"coordinate_{a}_shift")
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 30:
            raise layer.error(f"coordinate_{a}_shift {s!r} must be an integer in [1, 30]", f"coordinate_{a}_shift")
        shifts.append(s)
    g = xs[1].astype(np.int64)
    if rank == 2 and infos[1].dtype.bits <= 8:
        code = g + 128
        lows = [_table(layer, f"lut{a}", code[..., AXES.index(a)]) for a in axes]
        if method == "NEAREST":
            return [np.clip(taps(q, lows, padding, -zp_x), *layer.top_range(0))]
        fr = [_table(layer, f"{a}_terp", code[..., AXES.index(a)])[..., None] for a in axes]
    else:
        m, s = _int_list(layer, "scale_value", rank), _int_list(layer, "shift_value", rank)
        _, zp_g = infos[1].quant(layer)
        g = g + zp_g
        coords = [np.clip(((g[..., AXES.index(a)] * m[AXES.index(a)]) >> s[AXES.index(a)])
                          + (q.shape[1 + k] - 1) * (1 << (shifts[k] - 1)), -32768, 32767) for k, a in enumerate(axes)]
        if method == "NEAREST":
            idx = [np.clip(c + (1 << (sh - 1)), -32768, 32767) >> sh for c, sh in zip(coords, shifts)]
            return [np.clip(taps(q, idx, padding, -zp_x), *layer.top_range(0))]
        lows = [c >> sh for c, sh in zip(coords, shifts)]
        fr = [(c - (lo << sh))[..., None] for c, lo, sh in zip(coords, lows, shifts)]
    out = blended(q, lows, padding, -zp_x, lambda a, b, k: a + (((b - a) * fr[k]) >> shifts[k]))
    return [np.clip(out, *layer.top_range(0))]


FLOAT = {"GridSample": grid_sample_float}
INT = {"GridSample": grid_sample_int}
