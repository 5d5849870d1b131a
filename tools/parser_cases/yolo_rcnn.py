"""Parser-written IRs of detection post-processing: ONNX MaxRoiPool (MaxRoiPool after the
parser's Gather of the ROIs' coordinates).

MaxRoiPool's top has one row per ROI, whatever the batch: its cases run one sample."""
import numpy as np

from op_cases.common import uniform
from op_cases.common import Case


def _save_onnx(nodes, inputs, outputs, path, initializers=()):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _maxroipool(rng, path):
    """Features [1, 4, 9, 12] (NCHW) and 6 ROIs (batch, x1, y1, x2, y2) reshaped from an input,
    pooled to 3x2 at 1/8."""
    from onnx import helper, numpy_helper

    shape = numpy_helper.from_array(np.array([6, 5], np.int64), "rois_shape")
    nodes = [helper.make_node("Reshape", ["in1", "rois_shape"], ["rois"]),
             helper.make_node("MaxRoiPool", ["in0", "rois"], ["pooled"], pooled_shape=[3, 2], spatial_scale=0.125)]
    _save_onnx(nodes, [("in0", [1, 4, 9, 12]), ("in1", [1, 30])], [("pooled", [6, 4, 3, 2])], path, [shape])


def _rois(rng, shapes, n, value_range, run):
    """Features in value_range; 6 ROIs of batch 0 with corners in [-8, 100] pixels (x1, y1, x2,
    y2 in any order); one sample in the run."""
    n = 1 if run else n
    corners = rng.uniform(-8.0, 100.0, (n, 6, 4)).astype(np.float32)
    rois = np.concatenate([np.zeros((n, 6, 1), np.float32), corners], axis=-1).reshape(n, 30)
    return [uniform(rng, value_range, (n,) + shapes[0]), rois]


CASES = [
    Case("parser_maxroipool", "ONNX MaxRoiPool of 6 ROIs (an input) on a 9x12 map at 1/8, 3x2 bins",
         [(4, 9, 12), (30,)], _maxroipool, data=_rois),
]
