"""Indexing layers and shapes that follow the data: NonZero, Unique, Compress, Filter,
Shape, OneHot, Dummy, ScatterElements and ScatterND. Indices come from layers that compute
them per sample (TopK, ArgMinMax) or from batch-free constants addressing non-batch axes,
so that a batch computes what its samples compute alone; NonZero, Unique, Compress and
Filter cases also take the batch as one, as the tool chain runs it."""
import numpy as np
import torch

from op_cases.common import Case, uniform_inputs

REDUCTIONS = ("NONE", "ADD", "MUL", "MAX", "MIN")
ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")


def _coarse(rng, shapes, n, value_range, run):
    """Multiples of 1/4: repeated values for Unique, exact zeros for NonZero."""
    return [np.round(x * 4) / 4 for x in uniform_inputs(rng, shapes, n, value_range, run)]


def _apart(rng, shapes, n, value_range, run):
    """Inputs on different grids: the second one half as wide, the third 1.5 times."""
    return [x * f for x, f in zip(uniform_inputs(rng, shapes, n, value_range, run), (1.0, 0.5, 1.5))]


def _const(b, name, values, dtype=torch.int32):
    return b.layer("Constant", name, [], {}, {"weights": torch.tensor(values, dtype=dtype)})[0]


def _nonzero(b, rng, x):
    """NonZero of RELU(x) [N,4,6] (bounds [3, 24] and [1]) and its coordinates as tuples
    (Transpose). (The tool chain's GatherND cannot take them: it reshapes its top to the
    IR's shape.)"""
    relu = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))[0]
    idx, count = b.layer("NonZero", "nonzero", [relu], {}, n_tops=2, top_shapes=[[3, 24], [1]])
    return [idx, count, b.layer("Transpose", "tuples", [idx], dict(perm=[1, 0]))[0]]


def _as_row(b, top):
    """A 1-D top as [1, n] (Tile): the tool chain's OptForward reshapes a graph output of
    one axis to the IR's shape, which a shape that follows the data does not have."""
    return b.layer("Tile", f"{top}_row", [top], dict(repeats=[1, 1]))[0]


def _unique(b, rng, x):
    """Unique of x [N,4,6] (multiples of 1/4) sorted and in order of first occurrence; of
    the slices along axis 1 of x's rows repeated ([N,8,6]), sorted and not. Each 1-D top
    as a row (_as_row)."""
    tops = []
    for name, keep in (("sorted", True), ("unsorted", False)):
        tops += [_as_row(b, t) for t in b.layer("Unique", f"unique_{name}", [x[0]], dict(sorted=keep), n_tops=4,
                                                top_shapes=[[24], [24], [24], [24]])]
    rows = b.layer("Concat", "rows", [x[0], x[0]], dict(axis=1))[0]
    for name, keep in (("sorted", True), ("unsorted", False)):
        y, *ints = b.layer("Unique", f"unique_rows_{name}", [rows], dict(sorted=keep, axis=1), n_tops=4,
                           top_shapes=[[1, 8, 6], [8], [8], [8]])
        tops += [y] + [_as_row(b, t) for t in ints]
    return tops


def _sample_passes(b, x):
    """[N] uint8: whether a sample's mean is positive (a Reduce keeping its axes, then a
    Reshape: the tool chain's Reduce keeps them whatever keepdims says)."""
    mean = b.layer("Reduce", "mean", [x], dict(method="MEAN", axis=[1, 2], keepdims=True))[0]
    mean = b.layer("Reshape", "means", [mean], dict(shape=[1]))[0]
    zero = b.layer("Constant", "zero", [], {}, {"weights": torch.tensor([0.0])})[0]
    return b.layer("Logical", "passes", [mean, zero], dict(method="GREATER"))[0]


def _compress(b, rng, x):
    """Compress of x [N,5,6] along axis 1 by a constant condition (longer than the axis:
    cut), and of the samples (axis 0) whose mean is positive (a condition
    computed from the batch, so a top that follows the data)."""
    keep = _const(b, "keep", [1, 0, 0, 1, 1, 1, 0], torch.uint8)
    tops = b.layer("Compress", "compress_const", [x[0], keep], dict(axis=1))
    passes = _sample_passes(b, x[0])
    tops += b.layer("Compress", "compress_samples", [x[0], passes], dict(axis=0), top_shapes=[[1, 5, 6]])
    return tops


def _filter(b, rng, x):
    """Filter of x [N,5,6] and x's RELU along axis 1 by a constant selector, and of the
    samples along axis 0 whose mean is positive."""
    relu = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))[0]
    selector = _const(b, "selector", [0, 1, 1, 0, 1], torch.uint8)
    tops = b.layer("Filter", "filter_rows", [x[0], relu, selector], dict(num=2, axis=1), n_tops=3)
    passes = _sample_passes(b, x[0])
    tops += b.layer("Filter", "filter_samples", [relu, passes], dict(num=1, axis=0), n_tops=2)
    return tops


def _shape_onehot(b, rng, x):
    """Shape of x [N,4,6] (all axes, and the last two), a ConstantOfShape of it and its
    sizes as floats; OneHot of x's ArgMax over axis 1 ([N,1,6], classes 0..3) with depth 3
    (class 3 is off everywhere) and float values, with integral values and the classes
    first, and with axis -2 (the tool chain's placement); OneHot of the sizes."""
    sizes = b.layer("Shape", "sizes", [x[0]], dict(start=0, end=3))[0]
    last = b.layer("Shape", "last_sizes", [x[0]], dict(start=1, end=3))[0]
    tops = [sizes, b.layer("ConstantOfShape", "filled", [sizes], dict(value=0.75))[0],
            b.layer("Cast", "sizes_float", [last], dict(to_dtype="float32", clip_mode="TRUNCATION",
                                                         ignore_scale_zp=True))[0]]
    idx = b.layer("ArgMinMax", "argmax", [x[0]], dict(method="MAX", axis=1, select_last_index=False))[0]
    for name, params in (("onehot", dict(depth=3, axis=-1, values=[-0.5, 2.0])),
                         ("onehot_first", dict(depth=4, axis=0, values=[0.0, 1.0])),
                         ("onehot_minus2", dict(depth=4, axis=-2, values=[-1.0, 3.0])),
                         ("onehot_ints", dict(depth=5, axis=1, values=[2, 7]))):
        tops.append(b.layer("OneHot", name, [idx], params)[0])
    tops.append(b.layer("OneHot", "onehot_sizes", [last], dict(depth=8, axis=-1, values=[0.0, 1.0]))[0])
    return tops


def _dummy(b, rng, x):
    """Dummy joining x0's RELU [N,5,6] and x1's Sigmoid [N,3] (the parser's join of separate
    parts), then a layer after each top."""
    a = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))[0]
    s = b.layer("Activation", "sigmoid", [x[1]], dict(method="SIGMOID"))[0]
    joined = b.layer("Dummy", "join", [a, s], {}, n_tops=2)
    return [b.layer("Activation", "after0", [joined[0]], dict(method="TANH"))[0],
            b.layer("Activation", "after1", [joined[1]], dict(method="RELU"))[0]]


def _scatter_elements(b, rng, x):
    """ScatterElements into data x0 [N,5,6] along axis 1: of updates x1 [N,3,6] at distinct
    indices (TopK of x2 along axis 1: 3 of 5 rows per column), every reduction; of the
    smallest three values of x2 along its last axis ([N,5,3]) at their indices there
    (0..5, the 5s clamped into the 5 rows: repeats), ADD/MUL/MAX/MIN."""
    _, distinct = b.layer("TopK", "top_rows", [x[2]], dict(k=3, axis=1, largest=True, sorted=True), n_tops=2)
    tops = [b.layer("ScatterElements", f"scatter_{m.lower()}", [x[0], distinct, x[1]], dict(axis=1, reduction=m))[0]
            for m in REDUCTIONS]
    smallest, cols = b.layer("TopK", "top_cols", [x[2]], dict(k=3, axis=2, largest=False, sorted=True), n_tops=2)
    tops += [b.layer("ScatterElements", f"repeat_{m.lower()}", [x[0], cols, smallest], dict(axis=1, reduction=m))[0]
             for m in REDUCTIONS[1:]]
    return tops


def _scatter_nd(b, rng, x):
    """ScatterND into x0 [N,5,6] moved to [5,6,N] (the batch last, untouched by the index
    tuples): tuples (row, column) with a repeat, one past the end (clamped) and a
    negative one, of updates x1 [N,4] moved to [4,N], every reduction; and whole rows
    (tuples of one) from x2 [N,2,6] moved to [2,6,N]."""
    data = b.layer("Transpose", "data", [x[0]], dict(perm=[1, 2, 0]))[0]
    cells = _const(b, "cells", [[0, 1], [3, 7], [0, 1], [-1, 2]])
    values = b.layer("Transpose", "cell_values", [x[1]], dict(perm=[1, 0]))[0]
    tops = []
    for m in REDUCTIONS:
        y = b.layer("ScatterND", f"cells_{m.lower()}", [data, cells, values], dict(reduction=m))[0]
        tops.append(b.layer("Transpose", f"back_{m.lower()}", [y], dict(perm=[2, 0, 1]))[0])
    rows = _const(b, "rows", [[4], [1]])
    row_values = b.layer("Transpose", "row_values", [x[2]], dict(perm=[1, 2, 0]))[0]
    for m in ("NONE", "MUL"):
        y = b.layer("ScatterND", f"rows_{m.lower()}", [data, rows, row_values], dict(reduction=m))[0]
        tops.append(b.layer("Transpose", f"rows_back_{m.lower()}", [y], dict(perm=[2, 0, 1]))[0])
    return tops


CASES = [
    Case("nonzero", "NonZero of a RELU (coordinates [3, count] and count, bounded by [3, 24] and [1]) and "
         "its coordinates as tuples", [(4, 6)], _nonzero, data=_coarse),
    Case("unique", "Unique of values and of slices along an axis, sorted and in order of first occurrence",
         [(4, 6)], _unique, data=_coarse),
    Case("compress", "Compress by a constant condition and of the samples a computed condition passes",
         [(5, 6)], _compress),
    Case("filter", "Filter of two inputs by a constant selector, and of the samples a computed selector passes",
         [(5, 6)], _filter),
    Case("shape_onehot", "Shape (a ConstantOfShape of it, its sizes as floats) and OneHot of indices and sizes "
         "with float and integer values, along every axis form", [(4, 6)], _shape_onehot),
    Case("dummy", "Dummy joining two separate parts of a graph", [(5, 6), (3,)], _dummy),
    Case("scatter_elements", "ScatterElements with every reduction at distinct and at repeated (clamped) indices",
         [(5, 6), (3, 6), (5, 6)], _scatter_elements, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0), data=_apart),
    Case("scatter_elements_asym", "the same with asymmetric activations", [(5, 6), (3, 6), (5, 6)],
         _scatter_elements, ASYM, calib_range=(-0.5, 2.0), run_range=(-0.5, 2.0), data=_apart),
    Case("scatter_nd", "ScatterND of cells (a repeat, one past the end, a negative) and of rows, every reduction",
         [(5, 6), (4,), (2, 6)], _scatter_nd, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0), data=_apart),
    Case("scatter_nd_asym", "the same with asymmetric activations", [(5, 6), (4,), (2, 6)], _scatter_nd, ASYM,
         calib_range=(-0.5, 2.0), run_range=(-0.5, 2.0), data=_apart),
]
