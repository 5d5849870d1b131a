"""CropAndResize (docs/ir-ops.md, docs/integer-semantics.md): TensorFlow's crop_and_resize
of box r (input 1 [R, 4], y1, x1, y2, x2 in [0, 1]) of map entry box_indices[r] (input 2)
to crop_size [ch, cw], BILINEAR or NEAREST, extrapolation_value outside the map.

Float (float32): y = y1 (H - 1) + i (y2 - y1)(H - 1) / (ch - 1), the centre for ch = 1.
Integer, on the stored integers of the map and the boxes: step ((q2 - q1)(H - 1) 256 //
(ch - 1)) >> 8 (0 for ch = 1), y = q1 (H - 1) + i step, taps (y S) >> s and the next,
fraction y - trunc(tap 2^s / S), products (d f S) >> s (along x d f and then S wrap around
in int32); (S, s) = scale_value/shift_value."""
import numpy as np

from ..floats import computing_float


def _params(layer):
    crop = layer.param("crop_size")
    if not isinstance(crop, list) or len(crop) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0
                                                           for v in crop):
        raise layer.error(f"crop_size {crop!r} must be two positive integers", "crop_size")
    method = str(layer.param("method", "BILINEAR")).upper()
    if method not in ("BILINEAR", "NEAREST"):
        raise layer.error(f"unsupported method '{method}' (BILINEAR, NEAREST)", "method")
    return crop, method


def _check(layer, xs):
    if len(xs) != 3:
        raise layer.error(f"takes 3 inputs (map, boxes, box_indices), got {len(xs)}")
    fm, boxes, index = xs
    if fm.ndim != 4 or boxes.ndim != 2 or boxes.shape[1] != 4 or index.ndim != 1 or len(index) != len(boxes):
        raise layer.error(f"needs an NHWC map, boxes [R, 4] and box_indices [R], got {list(fm.shape)}, "
                          f"{list(boxes.shape)} and {list(index.shape)}")
    index = index.astype(np.int64)
    if ((index < 0) | (index >= fm.shape[0])).any():
        raise layer.error(f"box_indices {index.tolist()} fall outside the map's batch of {fm.shape[0]}")
    return index


def _pick(m, ys, xs):
    return m[np.arange(len(m))[:, None, None], ys[:, :, None], xs[:, None, :]]


def _points(lo, hi, size, count):
    if count > 1:
        scale = (hi - lo) * np.float32(size - 1) / np.float32(count - 1)
        c = (lo * np.float32(size - 1))[:, None] + np.arange(count, dtype=np.float32)[None, :] * scale[:, None]
    else:
        c = (np.float32(0.5) * (lo + hi) * np.float32(size - 1))[:, None]
    return c, (c >= 0) & (c <= size - 1)


def crop_float(layer, xs, infos):
    index = _check(layer, xs)
    (ch, cw), method = _params(layer)
    fill = layer.param("extrapolation_value", 0.0)
    fm = computing_float(xs[0])
    b = xs[1].astype(np.float32)
    h, w = fm.shape[1:3]
    ys, y_in = _points(b[:, 0], b[:, 2], h, ch)
    xp, x_in = _points(b[:, 1], b[:, 3], w, cw)
    ys, xp = np.where(y_in, ys, 0), np.where(x_in, xp, 0)
    m = fm[index]
    if method == "NEAREST":
        out = _pick(m, np.floor(ys + np.float32(0.5)).astype(np.int64), np.floor(xp + np.float32(0.5)).astype(np.int64))
    else:
        t, left = np.floor(ys), np.floor(xp)
        ly, lx = (ys - t).astype(fm.dtype)[:, :, None, None], (xp - left).astype(fm.dtype)[:, None, :, None]
        t, bot, left, right = t.astype(np.int64), np.ceil(ys).astype(np.int64), left.astype(np.int64), \
            np.ceil(xp).astype(np.int64)
        upper = _pick(m, t, left) + (_pick(m, t, right) - _pick(m, t, left)) * lx
        lower = _pick(m, bot, left) + (_pick(m, bot, right) - _pick(m, bot, left)) * lx
        out = upper + (lower - upper) * ly
    return [np.where((y_in[:, :, None] & x_in[:, None, :])[..., None], out, np.asarray(fill, out.dtype))]


def _int_points(lo, hi, size, count, mul, shift, nearest):
    step = np.zeros_like(lo)
    if count > 1:  # a division truncating toward zero, as the tool chain's
        num = (hi - lo) * (size - 1) * 256
        step = np.where(num < 0, -(np.abs(num) // (count - 1)), num // (count - 1)) >> 8
    c = (lo * (size - 1))[:, None] + np.arange(count)[None, :] * step[:, None]
    scaled = c * mul
    inside = (c >= 0) & ((scaled >> shift) <= size - 1)
    if nearest:
        low = (scaled + (1 << (shift - 1))) >> shift if shift > 0 else scaled
        return np.clip(low, 0, size - 1), None, None, inside
    low = scaled >> shift
    num = low * (1 << shift)
    frac = c - np.where(num < 0, -(-num // mul), num // mul)
    return np.clip(low, 0, size - 1), np.clip(low + 1, 0, size - 1), frac, inside


def _int32(v):
    """The tool chain's int32 products of the x blend wrap around."""
    return (v + 2 ** 31) % 2 ** 32 - 2 ** 31


def crop_int(layer, xs, infos):
    index = _check(layer, xs)
    (ch, cw), method = _params(layer)
    mul, shift = layer.param("scale_value"), layer.param("shift_value")
    fill = layer.param("extrapolation_value", 0)
    for key, v in (("scale_value", mul), ("shift_value", shift), ("extrapolation_value", fill)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise layer.error(f"{key} {v!r} must be an integer", key)
    if mul <= 0 or not 0 <= shift <= 40:
        raise layer.error(f"scale_value {mul} / shift_value {shift} must be positive / in [0, 40]", "scale_value")
    q = xs[0].astype(np.int64)[index]
    b = xs[1].astype(np.int64)
    h, w = xs[0].shape[1:3]
    nearest = method == "NEAREST"
    y0, y1, fy, y_in = _int_points(b[:, 0], b[:, 2], h, ch, mul, shift, nearest)
    x0, x1, fx, x_in = _int_points(b[:, 1], b[:, 3], w, cw, mul, shift, nearest)
    if nearest:
        out = _pick(q, y0, x0)
    else:
        fx, fy = fx[:, None, :, None], fy[:, :, None, None] * mul
        tl, tr, bl, br = _pick(q, y0, x0), _pick(q, y0, x1), _pick(q, y1, x0), _pick(q, y1, x1)
        upper = tl + (_int32(_int32((tr - tl) * fx) * mul) >> shift)
        lower = bl + (_int32(_int32((br - bl) * fx) * mul) >> shift)
        out = upper + (((lower - upper) * fy) >> shift)
    out = np.where((y_in[:, :, None] & x_in[:, None, :])[..., None], out, fill)
    return [np.clip(out, *layer.top_range(0))]


FLOAT = {"CropAndResize": crop_float}
INT = {"CropAndResize": crop_int}
