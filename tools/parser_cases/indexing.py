"""Indexing layers as the tool chain's parser writes them from ONNX: NonZero, Unique,
Compress, OneHot, ScatterElements, ScatterND, Shape (in the parser's dynamic-shape mode;
otherwise it folds Shape into a constant) and the Dummy it joins separate parts of a graph
with. Indices come from TopK/ArgMax of an input or from constants that address non-batch
axes, so that a batch computes what its samples compute alone; outputs whose shapes follow
the data have two axes or more (the tool chain's OptForward reshapes a graph output of one
axis to the IR's shape)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from op_cases.common import Case, uniform_inputs

OPSET = 18
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _save(path, nodes, inputs, outputs, constants=()):
    """An ONNX model of `nodes`; inputs [(name, shape)], outputs [(name, elem type)],
    constants {name: array} as initializers."""
    graph = helper.make_graph(nodes, "case", [helper.make_tensor_value_info(n, FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in dict(constants).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.save(model, path)


def _coarse(rng, shapes, n, value_range, run):
    """Multiples of 1/4: zeros for NonZero, repeats for Unique."""
    return [np.round(x * 4) / 4 for x in uniform_inputs(rng, shapes, n, value_range, run)]


def _nonzero(rng, path):
    nodes = [helper.make_node("Relu", ["in0"], ["relu"]), helper.make_node("NonZero", ["relu"], ["coords"]),
             helper.make_node("Transpose", ["coords"], ["tuples"], perm=[1, 0])]
    _save(path, nodes, [("in0", [1, 4, 6])], [("coords", INT64), ("tuples", INT64)])


def _unique(rng, path):
    """Unique of the slices along axis 2, sorted and not; the distinct slices' first
    positions and counts as one-hot rows (two axes)."""
    nodes, outputs = [], []
    for name, keep in (("sorted", 1), ("unsorted", 0)):
        y, first, inverse, counts = (f"{name}_{t}" for t in ("y", "first", "inverse", "counts"))
        nodes += [helper.make_node("Unique", ["in0"], [y, first, inverse, counts], axis=2, sorted=keep),
                  helper.make_node("OneHot", [first, "six", "off_on"], [f"{first}_hot"], axis=-1),
                  helper.make_node("OneHot", [counts, "six", "off_on"], [f"{counts}_hot"], axis=-1)]
        outputs += [(y, FLOAT), (inverse, INT64), (f"{first}_hot", FLOAT), (f"{counts}_hot", FLOAT)]
    _save(path, nodes, [("in0", [1, 3, 6])], outputs,
          {"six": np.array(6, np.int64), "off_on": np.array([0.0, 1.0], np.float32)})


def _repeated_columns(rng, shapes, n, value_range, run):
    """Columns along the last axis drawn from four of {-1, 0, 1}^rows, the same picks in
    every sample: slices along that axis repeat, also over a batch."""
    columns = rng.integers(-1, 2, (n,) + shapes[0][:-1] + (4,)).astype(np.float32)
    return [columns[..., rng.integers(0, 4, shapes[0][-1])]]


def _compress(rng, path):
    _save(path, [helper.make_node("Compress", ["in0", "keep"], ["kept"], axis=1)], [("in0", [1, 5, 6])],
          [("kept", FLOAT)], {"keep": np.array([True, False, False, True, True])})


def _onehot(rng, path):
    """OneHot of ArgMax indices with float values along axis 1, and with integer values last."""
    nodes = [helper.make_node("ArgMax", ["in0"], ["idx"], axis=2, keepdims=0),
             helper.make_node("OneHot", ["idx", "depth", "floats"], ["hot_floats"], axis=1),
             helper.make_node("OneHot", ["idx", "depth", "ints"], ["hot_ints"], axis=-1)]
    _save(path, nodes, [("in0", [1, 5, 6])], [("hot_floats", FLOAT), ("hot_ints", INT64)],
          {"depth": np.array(5, np.int64), "floats": np.array([-0.5, 2.0], np.float32),
           "ints": np.array([0, 3], np.int64)})


def _scatter_elements(rng, path):
    """ScatterElements of in1 [1,3,6] into in0 [1,5,6] along axis 1 at the rows TopK picks
    from in2, every reduction."""
    nodes = [helper.make_node("TopK", ["in2", "three"], ["top", "rows"], axis=1)]
    outputs = []
    for m in ("none", "add", "mul", "max", "min"):
        nodes.append(helper.make_node("ScatterElements", ["in0", "rows", "in1"], [f"scatter_{m}"], axis=1,
                                      reduction=m))
        outputs.append((f"scatter_{m}", FLOAT))
    _save(path, nodes, [("in0", [1, 5, 6]), ("in1", [1, 3, 6]), ("in2", [1, 5, 6])], outputs,
          {"three": np.array(3, np.int64)})  # a scalar k: the parser's TopK cannot read ONNX's [k]


def _scatter_nd(rng, path):
    """ScatterND of cells (a repeat) into in0 moved to [5,6,1], every reduction but none
    (repeats make it ambiguous in ONNX), and of whole rows with none. The parser writes
    the moves as Reshapes (of batch 1), so the index tuples address one sample: the case
    runs one (the tool chain would scatter into the first sample of a batch only)."""
    nodes = [helper.make_node("Transpose", ["in0"], ["data"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["in1"], ["cell_values"], perm=[1, 0]),
             helper.make_node("Transpose", ["in2"], ["row_values"], perm=[1, 2, 0])]
    outputs = []
    for m in ("add", "mul", "max", "min"):
        nodes += [helper.make_node("ScatterND", ["data", "cells", "cell_values"], [f"cells_{m}"], reduction=m),
                  helper.make_node("Transpose", [f"cells_{m}"], [f"back_{m}"], perm=[2, 0, 1])]
        outputs.append((f"back_{m}", FLOAT))
    nodes += [helper.make_node("ScatterND", ["data", "rows", "row_values"], ["rows_none"]),
              helper.make_node("Transpose", ["rows_none"], ["rows_back"], perm=[2, 0, 1])]
    _save(path, nodes, [("in0", [1, 5, 6]), ("in1", [1, 3]), ("in2", [1, 2, 6])], outputs + [("rows_back", FLOAT)],
          {"cells": np.array([[0, 1], [3, 5], [0, 1]], np.int64), "rows": np.array([[4], [1]], np.int64)})


def _shape(rng, path):
    nodes = [helper.make_node("Shape", ["in0"], ["sizes"], start=1),
             helper.make_node("Cast", ["sizes"], ["sizes_f"], to=FLOAT), helper.make_node("Relu", ["in0"], ["relu"])]
    _save(path, nodes, [("in0", [1, 4, 6])], [("sizes_f", FLOAT), ("relu", FLOAT)])


def _dummy(rng, path):
    """Two separate parts: the parser joins their outputs through a Dummy."""
    _save(path, [helper.make_node("Relu", ["in0"], ["a"]), helper.make_node("Sigmoid", ["in1"], ["b"])],
          [("in0", [1, 5, 6]), ("in1", [1, 3])], [("a", FLOAT), ("b", FLOAT)])


CASES = [
    Case("parser_nonzero", "the parser's NonZero of a RELU and its coordinates as tuples", [(4, 6)], _nonzero,
         data=_coarse),
    Case("parser_unique", "the parser's Unique of slices, sorted and not, with OneHot of its indices and counts",
         [(3, 6)], _unique, data=_repeated_columns),
    Case("parser_compress", "the parser's Compress by a constant condition", [(5, 6)], _compress),
    Case("parser_onehot", "the parser's OneHot with float and integer values", [(5, 6)], _onehot),
    Case("parser_scatter_elements", "the parser's ScatterElements, every reduction", [(5, 6), (3, 6), (5, 6)],
         _scatter_elements),
    Case("parser_scatter_nd", "the parser's ScatterND of cells and rows", [(5, 6), (3,), (2, 6)], _scatter_nd,
         run_samples=1),
    Case("parser_shape", "the parser's Shape (dynamic-shape mode) cast to floats", [(4, 6)], _shape,
         parser=dict(ds_mode="true")),
    Case("parser_dummy", "the Dummy the parser joins two separate parts with", [(5, 6), (3,)], _dummy),
]
