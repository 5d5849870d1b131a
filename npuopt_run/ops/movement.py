"""Layers that move values without arithmetic (ChannelShuffle, SpaceToDepth,
DepthToSpace, SpaceToBatch, BatchToSpace, Tile, Repeat, Gather, GatherElements,
GatherND, TopK, ArgMinMax, ConstantOfShape) and the running sums and products of
Cumulate. Integer forms move the integers unchanged (the tops share the data input's
scale/zp) unless said otherwise."""
import numpy as np

from ..floats import computing_float
from ..intmath import requantize
from .stage import int_param, same_quantization, shifted, stored_ints, top_bounds


def _flag(layer, key, default):
    value = layer.param(key, default)
    if value not in (0, 1):
        raise layer.error(f"'{key}' must be true or false, got {value!r}", key)
    return bool(value)


def _axis(layer, ndim, key="axis", default=None):
    axis = int_param(layer, key, default)
    if not -ndim <= axis < ndim:
        raise layer.error(f"{key} {axis} out of range for {ndim} axes", key)
    return axis % ndim


def _nhwc(layer, x):
    if x.ndim != 4:
        raise layer.error(f"needs a 4-D NHWC input, got {x.ndim}-D")
    return x.shape


def _blocks(layer):
    by, bx = int_param(layer, "block_size_y"), int_param(layer, "block_size_x")
    if by < 1 or bx < 1:
        raise layer.error(f"block sizes ({by}, {bx}) must be positive", "block_size_x")
    return by, bx


def _multiple(layer, what, size, block):
    if size % block:
        raise layer.error(f"{what} {size} is not a multiple of {block}")


def _index(layer, idx, size, what="indices"):
    """Indices into an axis of `size` as non-negative int64; out of [-size, size) refused."""
    idx = np.asarray(idx)
    if np.issubdtype(idx.dtype, np.floating) and not np.array_equal(idx, np.floor(idx)):
        raise layer.error(f"{what} must be integers")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise layer.error(f"{what} [{idx.min()}, {idx.max()}] out of range for an axis of {size}")
    return np.where(idx < 0, idx + size, idx)


# ---- pure movement -----------------------------------------------------------------
def channel_shuffle(layer, xs, infos):
    """Channels c = g * (C/G) + j go to position j * G + g; then `splits` equal parts."""
    x = xs[0]
    group, splits = int_param(layer, "group"), int_param(layer, "splits", 1)
    c = x.shape[-1]
    if group < 1 or splits < 1 or c % group or c % splits or splits != len(layer.tops):
        raise layer.error(f"group {group} / splits {splits} do not fit {c} channels and {len(layer.tops)} tops")
    y = np.swapaxes(x.reshape(x.shape[:-1] + (group, c // group)), -1, -2).reshape(x.shape)
    return np.split(y, splits, axis=-1)


def space_to_depth(layer, xs, infos):
    """out[n, i, j, (y * b + x) * C + c] = in[n, i * b + y, j * b + x, c]."""
    n, h, w, c = _nhwc(layer, xs[0])
    by, bx = _blocks(layer)
    if by != bx:
        raise layer.error(f"block_size_y {by} differs from block_size_x {bx}", "block_size_y")
    _multiple(layer, "height", h, by)
    _multiple(layer, "width", w, bx)
    y = xs[0].reshape(n, h // by, by, w // bx, bx, c).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(n, h // by, w // bx, by * bx * c)]


def depth_to_space(layer, xs, infos):
    """DCR: in channel (y * bx + x) * C' + c; CRD: (c * by + y) * bx + x -> out[n, i*by+y, j*bx+x, c]."""
    n, h, w, c = _nhwc(layer, xs[0])
    by, bx = _blocks(layer)
    mode = str(layer.param("mode", "DCR")).upper()
    _multiple(layer, "the channel count", c, by * bx)
    d = c // (by * bx)
    if mode == "DCR":
        y = xs[0].reshape(n, h, w, by, bx, d).transpose(0, 1, 3, 2, 4, 5)
    elif mode == "CRD":
        y = xs[0].reshape(n, h, w, d, by, bx).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise layer.error(f"unsupported mode '{mode}' (DCR, CRD)", "mode")
    return [y.reshape(n, h * by, w * bx, d)]


def _space_to_batch(fill):
    def forward(layer, xs, infos):
        """Pad H/W (top, bottom, left, right) with real 0, then
        out[(y * bx + x) * N + n, i, j, c] = padded[n, i * by + y, j * bx + x, c]."""
        _nhwc(layer, xs[0])
        by, bx = _blocks(layer)
        t, b, l, r = (int_param(layer, k, 0) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right"))
        p = np.pad(xs[0], ((0, 0), (t, b), (l, r), (0, 0)), constant_values=fill(layer, infos))
        n, h, w, c = p.shape
        _multiple(layer, "the padded height", h, by)
        _multiple(layer, "the padded width", w, bx)
        y = p.reshape(n, h // by, by, w // bx, bx, c).transpose(2, 4, 0, 1, 3, 5)
        return [y.reshape(n * by * bx, h // by, w // bx, c)]
    return forward


def batch_to_space(layer, xs, infos):
    """out[n, i * by + y, j * bx + x, c] = in[(y * bx + x) * N' + n, i, j, c], then cropped."""
    n, h, w, c = _nhwc(layer, xs[0])
    by, bx = _blocks(layer)
    t, b, l, r = (int_param(layer, k, 0) for k in ("crop_top", "crop_bottom", "crop_left", "crop_right"))
    _multiple(layer, "the batch", n, by * bx)
    y = xs[0].reshape(by, bx, n // (by * bx), h, w, c).transpose(2, 3, 0, 4, 1, 5)
    y = y.reshape(n // (by * bx), h * by, w * bx, c)
    return [y[:, t:h * by - b, l:w * bx - r, :]]


def tile(layer, xs, infos):
    reps = layer.param("repeats")
    if not isinstance(reps, list) or len(reps) < xs[0].ndim or min(reps, default=0) < 0:
        raise layer.error(f"repeats {reps} must be {xs[0].ndim} or more non-negative counts", "repeats")
    return [np.tile(xs[0], reps)]


def repeat(layer, xs, infos):
    """Element i along `axis` (or of the flattened input) repeated counts[i] times, then
    the integer/real 0 appended up to the top's IR size along that axis."""
    x, counts = xs[0], np.asarray(xs[1]).reshape(-1)
    if layer.param("axis", None) is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = _axis(layer, x.ndim)
    counts = _index(layer, counts, 1 << 62, "repeat counts")
    if counts.size != x.shape[axis] or (np.asarray(xs[1]) < 0).any():
        raise layer.error(f"{counts.size} non-negative repeat counts needed for an axis of {x.shape[axis]}")
    y = np.repeat(x, counts, axis=axis)
    room = layer.top_shapes[0][axis] - y.shape[axis]
    if room < 0:
        raise layer.error(f"the counts sum to {y.shape[axis]}, past the top's {layer.top_shapes[0][axis]}")
    widths = [(0, 0)] * y.ndim
    widths[axis] = (0, room)
    return [np.pad(y, widths)]


def gather(layer, xs, infos):
    """out = data[:axis] x indices[batch_dims:] x data[axis+1:], the first batch_dims axes paired."""
    data, idx = xs[0], np.asarray(xs[1])
    axis = _axis(layer, data.ndim)
    bd = int_param(layer, "batch_dims", 0)
    bd = bd + idx.ndim if bd < 0 else bd
    if not 0 <= bd <= min(axis, idx.ndim) or data.shape[:bd] != idx.shape[:bd]:
        raise layer.error(f"batch_dims {bd} does not fit data {list(data.shape)}, indices {list(idx.shape)}",
                          "batch_dims")
    k = _index(layer, idx, data.shape[axis])
    batch = int(np.prod(data.shape[:bd], dtype=np.int64))
    d = data.reshape((batch,) + data.shape[bd:])
    k = k.reshape(batch, -1)
    parts = [np.take(d[b], k[b], axis=axis - bd) for b in range(batch)]
    return [np.stack(parts).reshape(data.shape[:axis] + idx.shape[bd:] + data.shape[axis + 1:])]


def gather_elements(layer, xs, infos):
    data, idx = xs[0], np.asarray(xs[1])
    axis = _axis(layer, data.ndim, default=0)
    if idx.ndim != data.ndim:
        raise layer.error(f"indices of rank {idx.ndim} for data of rank {data.ndim}")
    k = _index(layer, idx, data.shape[axis])
    sub = tuple(slice(0, s) for s in idx.shape)
    return [np.take_along_axis(data[sub[:axis] + (slice(None),) + sub[axis + 1:]], k, axis=axis)]


def gather_nd(layer, xs, infos):
    """Index tuples (the indices' last axis, depth k) into data's axes batch_dims..batch_dims+k."""
    data, idx = xs[0], np.asarray(xs[1])
    bd = int_param(layer, "batch_dims", 0)
    depth = idx.shape[-1]
    if bd < 0 or bd + depth > data.ndim or data.shape[:bd] != idx.shape[:bd]:
        raise layer.error(f"indices {list(idx.shape)} with batch_dims {bd} do not fit data {list(data.shape)}")
    batch = int(np.prod(data.shape[:bd], dtype=np.int64))
    d = data.reshape((batch,) + data.shape[bd:])
    tuples = idx.reshape(batch, -1, depth)
    comps = tuple(_index(layer, tuples[..., j], data.shape[bd + j], f"indices[..., {j}]") for j in range(depth))
    out = np.stack([d[(b,) + tuple(c[b] for c in comps)] for b in range(batch)])
    return [out.reshape(idx.shape[:-1] + data.shape[bd + depth:])]


def arg_min_max(layer, xs, infos):
    """First index of the max/min along `axis` (the last with select_last_index), axis kept."""
    x = xs[0]
    axis = _axis(layer, x.ndim, default=-1)
    method = str(layer.param("method")).upper()
    if method not in ("MAX", "MIN"):
        raise layer.error(f"unsupported method '{method}' (MAX, MIN)", "method")
    last = _flag(layer, "select_last_index", False)
    y = np.flip(x, axis) if last else x
    k = (np.argmax if method == "MAX" else np.argmin)(y, axis=axis)
    k = x.shape[axis] - 1 - k if last else k
    return [np.expand_dims(k, axis).astype(np.int64)]


def top_k(layer, xs, infos):
    """Values sorted (descending when largest) and their indices; ties: select_index `last`
    (default) lists equal values from the highest index down, `first` from the lowest up."""
    x = xs[0]
    axis = _axis(layer, x.ndim, default=-1)
    k = int(np.asarray(xs[1]).reshape(-1)[0]) if len(xs) > 1 else int_param(layer, "k")
    k = min(k, x.shape[axis])
    largest = _flag(layer, "largest", True)
    select = str(layer.param("select_index", "last")).lower()
    if select not in ("last", "first"):
        raise layer.error(f"select_index '{select}' is not supported (last, first)", "select_index")
    rows = np.moveaxis(x, axis, -1)
    n = rows.shape[-1]
    pos = np.broadcast_to(np.arange(n), rows.shape)
    # sort by value, then by position (ascending for `first`, descending for `last`)
    secondary = pos if select == "first" else n - 1 - pos
    keys = -rows if largest else rows
    order = np.lexsort((secondary, keys), axis=-1)
    vals = np.take_along_axis(rows, order, axis=-1)[..., :k]
    return [np.moveaxis(vals, -1, axis), np.moveaxis(order[..., :k], -1, axis).astype(np.int64)]


def constant_of_shape(layer, xs, infos):
    shape = _index(layer, np.asarray(xs[0]).reshape(-1), 1 << 62, "shape")
    value = layer.param("value")
    return [np.full(tuple(int(s) for s in shape), value)]


# ---- Cumulate ------------------------------------------------------------------------
def _rows(layer, x):
    axis = _axis(layer, x.ndim)
    method = str(layer.param("method")).upper()
    if method not in ("SUM", "PROD"):
        raise layer.error(f"unsupported method '{method}' (SUM, PROD)", "method")
    rows = np.moveaxis(x, axis, -1)
    if _flag(layer, "reverse", False):
        rows = np.flip(rows, -1)
    if _flag(layer, "exclusive", False):
        first = np.zeros if method == "SUM" else np.ones
        rows = np.concatenate([first(rows.shape[:-1] + (1,), rows.dtype), rows[..., :-1]], axis=-1)
    return rows, axis, method


def _unrows(layer, y, axis):
    if _flag(layer, "reverse", False):
        y = np.flip(y, -1)
    return np.ascontiguousarray(np.moveaxis(y, -1, axis))


def cumulate(layer, xs, infos):
    """Running sum/product in float32 (float64 in a float64 layer), one step at a time."""
    rows, axis, method = _rows(layer, computing_float(xs[0]))
    acc = (np.zeros if method == "SUM" else np.ones)(rows.shape[:-1], rows.dtype)
    cols = []
    for j in range(rows.shape[-1]):
        acc = acc + rows[..., j] if method == "SUM" else acc * rows[..., j]
        cols.append(acc)
    return [_unrows(layer, np.stack(cols, -1), axis)]


def cumulate_int(layer, xs, infos):
    """A = q + zp. SUM: S_j = sum of A up to j (float32 steps, integral), out_j =
    requantize(S_j, scale_value, shift_value). PROD: P_j = P_{j-1} * A_j (float32), then
    halved (arithmetic shift) until within the 16-bit range of the input's signedness,
    counting halvings H; out_j = requantize(P_j, scale[j], shift[j] - H)."""
    a = shifted(xs[0], infos[0], layer).astype(np.float32)
    rows, axis, method = _rows(layer, a)
    zp, lo, hi = top_bounds(layer)
    n = rows.shape[-1]
    cols = []
    if method == "SUM":
        m, s = stored_ints(layer, "scale", "scale_value"), stored_ints(layer, "shift", "shift_value")
        acc = np.zeros(rows.shape[:-1], np.float32)
        for j in range(n):
            acc = acc + rows[..., j]
            cols.append(requantize(layer, acc.astype(np.int64), m, s, zp, lo, hi))
    else:
        m = np.asarray(stored_ints(layer, "scale", "scale_value")).reshape(-1)
        s = np.asarray(stored_ints(layer, "shift", "shift_value")).reshape(-1)
        if m.size != n or s.size != n:
            raise layer.error(f"scale/shift hold {m.size}/{s.size} entries for an axis of {n}", "scale")
        bits_lo, bits_hi = (-(1 << 15), (1 << 15) - 1) if infos[0].dtype.qmin < 0 else (0, (1 << 16) - 1)
        acc = np.ones(rows.shape[:-1], np.float32)
        halvings = np.zeros(rows.shape[:-1], np.int64)
        for j in range(n):
            p = (acc * rows[..., j]).astype(np.int64)
            while True:
                out = (p > bits_hi) | (p < bits_lo)
                if not out.any():
                    break
                p = np.where(out, p >> 1, p)
                halvings += out
            acc = p.astype(np.float32)
            cols.append(requantize(layer, p, m[j], s[j] - halvings, zp, lo, hi))
    return [_unrows(layer, np.stack(cols, -1), axis)]


def constant_of_shape_int(layer, xs, infos):
    return [constant_of_shape(layer, xs, infos)[0].astype(np.int64)]


def top_k_int(layer, xs, infos):
    """Values keep the input's integers and scale/zp; indices are plain integers."""
    scale, zp = infos[0].quant(layer)
    if (layer.top_scales[0], layer.top_zps[0]) != (scale, zp):
        raise layer.error("the values' scale/zp differ from the input's; TopK does not rescale")
    return top_k(layer, xs, infos)


def _moves(move):
    """The integer form of a movement: the integers move unchanged."""
    def forward(layer, xs, infos):
        same_quantization(layer, infos[0])
        return move(layer, xs, infos)
    forward.__doc__ = f"{move.__name__}: the integers move unchanged (tops share the input's scale/zp)."
    return forward


def _real_zero(layer, infos):
    return np.float32(0.0) if not infos[0].is_int else -infos[0].quant(layer)[1]


MOVES = {"ChannelShuffle": channel_shuffle, "SpaceToDepth": space_to_depth, "DepthToSpace": depth_to_space,
         "SpaceToBatch": _space_to_batch(_real_zero), "BatchToSpace": batch_to_space, "Tile": tile,
         "Repeat": repeat, "Gather": gather, "GatherElements": gather_elements, "GatherND": gather_nd}
FLOAT = dict(MOVES, ArgMinMax=arg_min_max, TopK=top_k, ConstantOfShape=constant_of_shape, Cumulate=cumulate)
INT = dict({k: _moves(f) for k, f in MOVES.items()}, ArgMinMax=arg_min_max, TopK=top_k_int,
           ConstantOfShape=constant_of_shape_int, Cumulate=cumulate_int)
