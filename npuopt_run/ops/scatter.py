"""ScatterElements and ScatterND (docs/ir-ops.md, "Indexing"; D = q_data + zp_data,
U = q_updates + zp_updates):

ScatterElements  indices along `axis` (negative + data's IR size there, then clamped into
                 it); NONE/ADD/MAX/MIN: scale_value = [M_out, M_d, M_u], one shift s:
                 D * M_d and U * M_u clamped to a (bits_d + bits_u)-bit accumulator,
                 scattered, requantize(., M_out, s). MUL: scale_value = [M0, M1],
                 shift_value = [s0, s1]: D' = requantize(D, M0, s0) in 16 bits, then per
                 index (along `axis` first, then C order): p = D' * U in int32, halved h
                 times until it fits 16 bits, D' = (p * M1 in int32) >> (s1 - h); the top
                 is D' clamped (no zero point).
ScatterND        index tuples one by one in C order (past the end: the last position;
                 negative: from the end); NONE/ADD/MAX/MIN: scale_value = [M_out, M_d, M_u],
                 one shift: D * M_d combined with U * M_u, each result clamped to 32 bits;
                 MUL: scale_value = [1, M_d, M_u], shift_value = [s_out, 0, s_u]: each
                 product rescaled by 2^-s_u; then the top's rescale. A top wider than 8
                 bits rescales by a floor shift of the rounded product, an 8-bit one to
                 the nearest."""
import numpy as np

from ..floats import computing_float
from ..intmath import as_float64, check_range, requantize
from .stage import int_param, shifted, stored_ints, top_bounds

REDUCTIONS = {"NONE": None, "ADD": np.add, "MUL": np.multiply, "MAX": np.maximum, "MIN": np.minimum}
INT32 = 1 << 32


def _reduction(layer, xs):
    if len(xs) != 3:
        raise layer.error(f"takes 3 inputs (data, indices, updates), the IR gives {len(xs)}", "layer_bottom")
    method = str(layer.param("reduction", "NONE")).upper()
    if method not in REDUCTIONS:
        raise layer.error(f"unsupported reduction '{method}' ({', '.join(REDUCTIONS)})", "reduction")
    return method


def _ints(layer, key, count):
    v = np.asarray(stored_ints(layer, "scale" if key == "scale_value" else "shift", key), np.int64).reshape(-1)
    if v.size != count:
        raise layer.error(f"{key} must hold {count} values, got {v.tolist()}", key)
    return [int(e) for e in v]


# ---- ScatterElements --------------------------------------------------------------------
def _element_targets(layer, xs, infos):
    """(axis, flat offsets into data, flat offsets into updates) of every index, in the
    tool chain's order: along `axis` first, then the other axes in C order."""
    data, idx, upd = xs
    axis = int_param(layer, "axis", 0)
    if not -data.ndim <= axis < data.ndim or not idx.ndim == data.ndim == upd.ndim or any(
            i > u or (a != axis % data.ndim and i > d) for a, (i, u, d) in enumerate(zip(idx.shape, upd.shape,
                                                                                        data.shape))):
        raise layer.error(f"indices {list(idx.shape)} do not fit data {list(data.shape)} and updates "
                          f"{list(upd.shape)} along axis {axis}", "axis")
    axis %= data.ndim
    size = int(infos[0].shape[axis]) if len(infos[0].shape) == data.ndim else data.shape[axis]
    k = np.asarray(idx).astype(np.int64)
    k = np.clip(np.where(k < 0, k + size, k), 0, max(size - 1, 0))
    grid = np.indices(idx.shape)                      # [ndim, *idx.shape]
    dest = grid.copy()
    dest[axis] = k
    order = lambda g: np.moveaxis(g, axis + 1, 1).reshape(idx.ndim, -1)  # noqa: E731
    return (axis, np.ravel_multi_index(tuple(order(dest)), data.shape),
            np.ravel_multi_index(tuple(order(grid)), upd.shape))


def _scatter_at(target: np.ndarray, offsets, values, method: str) -> np.ndarray:
    flat = target.reshape(-1).copy()
    if method == "NONE":
        for o, v in zip(offsets, values):
            flat[o] = v
    else:
        REDUCTIONS[method].at(flat, offsets, values)
    return flat.reshape(target.shape)


def scatter_elements(layer, xs, infos):
    method = _reduction(layer, xs)
    _, dest, src = _element_targets(layer, xs, infos)
    data = computing_float(xs[0])
    return [_scatter_at(data, dest, computing_float(xs[2]).reshape(-1)[src].astype(data.dtype), method)]


def _wrap32(v: int) -> int:
    return (v + INT32 // 2) % INT32 - INT32 // 2


def scatter_elements_int(layer, xs, infos):
    method = _reduction(layer, xs)
    _, dest, src = _element_targets(layer, xs, infos)
    d, u = shifted(xs[0], infos[0], layer), shifted(xs[2], infos[2], layer)
    zp, lo, hi = top_bounds(layer)
    signed = layer.top_types[0].signed
    if method == "MUL":
        (m0, m1), (s0, s1) = _ints(layer, "scale_value", 2), _ints(layer, "shift_value", 2)
        lo16, hi16 = (-(1 << 15), (1 << 15) - 1) if signed else (0, (1 << 16) - 1)
        acc = requantize(layer, d, m0, s0, 0, lo16, hi16).reshape(-1).tolist()
        flat_u = u.reshape(-1).tolist()
        for o, i in zip(dest.tolist(), src.tolist()):
            p, halvings = _wrap32(acc[o] * flat_u[i]), 0
            while not lo16 <= p <= hi16:
                p, halvings = p >> 1, halvings + 1
            p, shift = _wrap32(p * m1), s1 - halvings
            acc[o] = _wrap32(p >> shift if 0 <= shift < 32 else (-1 if p < 0 else 0))
        return [np.clip(np.array(acc, np.int64).reshape(d.shape), lo, hi)]
    m_out, m_d, m_u = _ints(layer, "scale_value", 3)
    (shift,) = _ints(layer, "shift_value", 1)
    bits = infos[0].dtype.bits + infos[2].dtype.bits
    inner = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    d, u = np.clip(d * m_d, *inner), np.clip(u * m_u, *inner)
    return [requantize(layer, _scatter_at(d, dest, u.reshape(-1)[src], method), m_out, shift, zp, lo, hi)]


# ---- ScatterND ---------------------------------------------------------------------------
def _tuples(layer, xs):
    """The index tuples ([n, k], valid as the tool chain makes them) and updates as n slices."""
    data, idx, upd = xs
    k = idx.shape[-1] if idx.ndim else 0
    if not 1 <= k <= data.ndim or upd.shape != idx.shape[:-1] + data.shape[k:]:
        raise layer.error(f"indices {list(idx.shape)} and updates {list(upd.shape)} do not fit data "
                          f"{list(data.shape)}", "layer_bottom_shape")
    t = np.asarray(idx).astype(np.int64).reshape(-1, k)
    sizes = np.array(data.shape[:k], np.int64)
    if (t < -sizes).any():
        raise layer.error(f"index {t.min()} below -size of data {list(data.shape)}")
    t = np.where(t < 0, t + sizes, np.minimum(t, sizes - 1))
    return [tuple(row) for row in t.tolist()], upd.reshape((-1,) + data.shape[k:])


def scatter_nd(layer, xs, infos):
    method = _reduction(layer, xs)
    tuples, slices = _tuples(layer, xs)
    y = computing_float(xs[0]).copy()
    slices = slices.astype(y.dtype)
    for i, at in enumerate(tuples):
        y[at] = slices[i] if method == "NONE" else REDUCTIONS[method](y[at], slices[i])
    return [y]


def _rescale_nd(layer, x, m, s, zp, lo, hi):
    """8-bit tops: requantize; wider ones: clamp((as_float64(x * m) >> s) - zp) (a floor)."""
    if layer.top_types[0].bits <= 8:
        return requantize(layer, x, m, s, zp, lo, hi)
    check_range(layer, int(np.abs(x).max(initial=0)) * abs(m), "a ScatterND product")
    p = as_float64(np.asarray(x, np.int64) * m)
    return np.clip((p >> s if s >= 0 else p << -s) - zp, lo, hi)


def scatter_nd_int(layer, xs, infos):
    method = _reduction(layer, xs)
    tuples, slices = _tuples(layer, xs)
    m_out, m_d, m_u = _ints(layer, "scale_value", 3)
    shifts = _ints(layer, "shift_value", 3 if method == "MUL" else 1)
    zp, lo, hi = top_bounds(layer)
    inner = (-(1 << 31), (1 << 31) - 1) if layer.top_types[0].signed else (0, (1 << 32) - 1)
    y = shifted(xs[0], infos[0], layer) * m_d
    u = (shifted(xs[2], infos[2], layer) * m_u).reshape(slices.shape)
    for i, at in enumerate(tuples):
        if method == "MUL":
            y[at] = _rescale_nd(layer, y[at] * u[i], 1, shifts[2], 0, *inner)
        elif method == "NONE":
            y[at] = np.clip(u[i], *inner)
        else:
            y[at] = np.clip(REDUCTIONS[method](y[at], u[i]), *inner)
    return [_rescale_nd(layer, y, m_out, shifts[0], zp, lo, hi)]


FLOAT = {"ScatterElements": scatter_elements, "ScatterND": scatter_nd}
INT = {"ScatterElements": scatter_elements_int, "ScatterND": scatter_nd_int}
