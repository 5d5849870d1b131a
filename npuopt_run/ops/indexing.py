"""Layers that pick, count and label (docs/ir-ops.md, "Indexing"): NonZero, Unique,
Compress, Filter, Shape, OneHot, Dummy. The integer forms do the same on the stored
integers (NonZero and Filter's selector test them for zero as stored, as the tool chain
does); values move unchanged, indices and counts are plain integers.

NonZero, Unique, Compress, Shape and Filter give tops whose shapes (or, for Shape and
Filter, the sizes and counts later layers may take as shapes) follow the data: the runner
checks them against the IR's shapes as bounds, and runs a batch of such a model as one."""
import numpy as np

from .stage import int_param

DATA_DEPENDENT_SHAPES = ("NonZero", "Unique", "Compress", "Shape", "Filter")


def _inputs(layer, xs, n):
    if len(xs) != n:
        raise layer.error(f"takes {n} input{'s' if n > 1 else ''}, the IR gives {len(xs)}", "layer_bottom")


def _axis(layer, ndim, default=None):
    axis = int_param(layer, "axis", default)
    if not -ndim <= axis < ndim:
        raise layer.error(f"axis {axis} out of range for {ndim} axes", "axis")
    return axis % ndim


def _same_grids(layer, pairs):
    """The integers move unchanged: each top must share its input's scale, zp and dtype."""
    for i, info in pairs:
        scale, zp = info.quant(layer)
        if (layer.top_scales[i], layer.top_zps[i], layer.top_types[i]) != (scale, zp, info.dtype):
            raise layer.error(f"top '{layer.tops[i]}' is not on input '{info.name}''s grid; this layer "
                              f"does not rescale")


# ---- NonZero ---------------------------------------------------------------------------
def nonzero(layer, xs, infos):
    """[rank, count] coordinates of the nonzero elements (C order), and [count]."""
    _inputs(layer, xs, 1)
    coords = np.array(np.nonzero(xs[0]), np.int64).reshape(xs[0].ndim, -1)
    return [coords, np.array([coords.shape[1]], np.int64)]


# ---- Unique ----------------------------------------------------------------------------
def unique(layer, xs, infos):
    """y, first indices, inverse (flattened), counts: sorted, or in order of first occurrence."""
    _inputs(layer, xs, 1)
    x = xs[0]
    axis = layer.param("axis", None)
    axis = None if axis is None or str(axis).upper() == "NONE" else _axis(layer, x.ndim)
    keep_sorted = layer.param("sorted", True)
    if keep_sorted not in (0, 1):
        raise layer.error(f"'sorted' must be true or false, got {keep_sorted!r}", "sorted")
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not keep_sorted:
        order = np.argsort(first, kind="stable")
        new_place = np.empty_like(order)
        new_place[order] = np.arange(order.size)
        y = np.take(y.reshape(-1) if axis is None else y, order, axis=0 if axis is None else axis)
        first, inverse, counts = first[order], new_place[inverse], counts[order]
    return [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


# ---- Compress and Filter -----------------------------------------------------------------
def compress(layer, xs, infos):
    """The slices along `axis` whose condition entry (1-D, cut to the axis) is nonzero."""
    _inputs(layer, xs, 2)
    x, condition = xs
    if condition.ndim != 1:
        raise layer.error(f"the condition must be 1-D, got shape {list(condition.shape)}", "layer_bottom_shape")
    axis = _axis(layer, x.ndim)
    return [np.take(x, np.flatnonzero(condition[:x.shape[axis]]), axis=axis)]


def filter_(layer, xs, infos):
    """Each data input's slices along `axis` at the selector's nonzero rows moved to the
    front, zeros after; then the number picked (0-d)."""
    num = int_param(layer, "num")
    if num < 1 or len(xs) != num + 1 or len(layer.tops) != num + 1:
        raise layer.error(f"num={num} needs num + 1 inputs and tops, the IR gives {len(xs)} and "
                          f"{len(layer.tops)}", "num")
    selector = np.asarray(xs[-1])
    rows = np.nonzero(selector.reshape(selector.shape[0], -1) if selector.ndim else selector.reshape(1))[0]
    tops = []
    for x in xs[:-1]:
        axis = _axis(layer, x.ndim)
        if rows.size > x.shape[axis] or (rows.size and rows.max() >= x.shape[axis]):
            raise layer.error(f"the selector picks {rows.size} slices of an axis of {x.shape[axis]}")
        y = np.zeros_like(x)
        front = [slice(None)] * x.ndim
        front[axis] = slice(0, rows.size)
        y[tuple(front)] = np.take(x, rows, axis=axis)
        tops.append(y)
    return tops + [np.array(rows.size, np.int64)]


# ---- Shape and Dummy -------------------------------------------------------------------
def shape(layer, xs, infos):
    _inputs(layer, xs, 1)
    return [np.array(xs[0].shape[int_param(layer, "start"):int_param(layer, "end")], np.int64)]


def dummy(layer, xs, infos):
    if len(xs) != len(layer.tops):
        raise layer.error(f"{len(xs)} inputs for {len(layer.tops)} tops", "layer_top")
    return list(xs)


# ---- OneHot ----------------------------------------------------------------------------
def one_hot(layer, xs, infos):
    """0/1 of depth classes (int64), placed as the tool chain places them: axis in [0, rank)
    puts the classes there; -1 or rank puts them last; an axis below -1 (a = axis + rank + 1)
    puts them last with the input's last axis moved to position a."""
    _inputs(layer, xs, 1)
    idx = np.asarray(xs[0]).astype(np.int64)
    rank, depth = idx.ndim, int_param(layer, "depth")
    axis = int_param(layer, "axis", -1)
    if depth < 1 or not -(rank + 1) <= axis <= rank:
        raise layer.error(f"depth {depth} and axis {axis} do not fit a {rank}-D input", "axis")
    hot = (idx[..., None] == np.arange(depth)) & ((idx >= 0) & (idx < depth))[..., None]
    if axis == -1 or axis >= rank:
        return hot.astype(np.int64)
    place = axis if axis >= 0 else axis + rank + 1
    hot = np.moveaxis(hot, rank - 1, place)
    return (np.swapaxes(hot, place, rank) if axis >= 0 else hot).astype(np.int64)


def _values(layer):
    values = layer.param("values", [0.0, 1.0])
    if not isinstance(values, list) or len(values) != 2 or any(isinstance(v, bool) for v in values):
        raise layer.error(f"values must be [off_value, on_value], got {values!r}", "values")
    return values


def one_hot_float(layer, xs, infos):
    off, on = _values(layer)
    y = one_hot(layer, xs, infos) * (float(on) - float(off)) + float(off)
    return [y if isinstance(off, float) or isinstance(on, float) else y.astype(np.int64)]


def one_hot_int(layer, xs, infos):
    """The stored values (integers, or integral floats) clamped into the top, truncated."""
    off, on = _values(layer)
    lo, hi = layer.top_range(0)
    y = np.clip(one_hot(layer, xs, infos) * (on - off) + off, lo, hi)
    return [np.trunc(y).astype(np.int64)]


# ---- integer forms ---------------------------------------------------------------------
def unique_int(layer, xs, infos):
    _same_grids(layer, [(0, infos[0])])
    return unique(layer, xs, infos)


def compress_int(layer, xs, infos):
    _same_grids(layer, [(0, infos[0])])
    return compress(layer, xs, infos)


def filter_int(layer, xs, infos):
    _same_grids(layer, list(enumerate(infos[:-1])))
    return filter_(layer, xs, infos)


def dummy_int(layer, xs, infos):
    _same_grids(layer, list(enumerate(infos)))
    return dummy(layer, xs, infos)


FLOAT = {"NonZero": nonzero, "Unique": unique, "Compress": compress, "Filter": filter_, "Shape": shape,
         "OneHot": one_hot_float, "Dummy": dummy}
INT = {"NonZero": nonzero, "Unique": unique_int, "Compress": compress_int, "Filter": filter_int, "Shape": shape,
       "OneHot": one_hot_int, "Dummy": dummy_int}
