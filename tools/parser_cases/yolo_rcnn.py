"""Parser-written IRs of detection post-processing: YOLO heads through the parser's
detection_postprocess (yolo2: Region and NMS; yolo3_tiny and yolo3_full: Regions, RegionFuse
and NMS) and ONNX MaxRoiPool (after the parser's Gather of the ROIs' coordinates).

The cases run one sample: the tool chain's RegionFuse fills only the first batch item, and
MaxRoiPool's top has one row per ROI, whatever the batch."""
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


def _heads(rng, path, grids, channels):
    """1x1 convolutions of inputs in0, in1, ... [1, 4, g, g] to `channels` outputs each (NCHW):
    the YOLO heads the parser's post-processing expects."""
    from onnx import helper, numpy_helper

    nodes, inputs, outputs, weights = [], [], [], []
    for i, g in enumerate(grids):
        w = numpy_helper.from_array((rng.standard_normal((channels, 4, 1, 1)) * 0.8).astype(np.float32), f"w{i}")
        b = numpy_helper.from_array((rng.standard_normal(channels) * 0.3).astype(np.float32), f"b{i}")
        nodes.append(helper.make_node("Conv", [f"in{i}", f"w{i}", f"b{i}"], [f"head{i}"], kernel_shape=[1, 1]))
        inputs.append((f"in{i}", [1, 4, g, g]))
        outputs.append((f"head{i}", [1, channels, g, g]))
        weights += [w, b]
    _save_onnx(nodes, inputs, outputs, path, weights)


def _one_sample(rng, shapes, n, value_range, run):
    return [uniform(rng, value_range, (1 if run else n,) + s) for s in shapes]


def _small(rng, shapes, n, value_range, run):
    """One sample to run, two to calibrate (large inputs)."""
    return [uniform(rng, value_range, (1 if run else 2,) + s) for s in shapes]


def _rois(rng, shapes, n, value_range, run):
    """Features in value_range; 6 ROIs of batch 0 with corners in [-8, 100] pixels (x1, y1, x2,
    y2 in any order); one sample in the run."""
    n = 1 if run else n
    corners = rng.uniform(-8.0, 100.0, (n, 6, 4)).astype(np.float32)
    rois = np.concatenate([np.zeros((n, 6, 1), np.float32), corners], axis=-1).reshape(n, 30)
    return [uniform(rng, value_range, (n,) + shapes[0]), rois]


CASES = [
    Case("parser_yolo2", "the parser's yolo2 post-processing (Region, NMS) of a 13x13 head, 5 anchors, 2 classes",
         [(4, 13, 13)], lambda rng, path: _heads(rng, path, [13], 35), data=_one_sample,
         parser={"detection_postprocess": "yolo2", "obj_threshold": "0.5"}),
    Case("parser_yolo3_tiny", "the parser's yolo3_tiny post-processing (two Regions, RegionFuse, NMS) of 13x13 and "
         "26x26 heads, 80 classes, obj_threshold 0.1", [(4, 13, 13), (4, 26, 26)],
         lambda rng, path: _heads(rng, path, [13, 26], 255), data=_one_sample,
         parser={"detection_postprocess": "yolo3_tiny", "obj_threshold": "0.1"}),
    Case("parser_yolo3_full", "the parser's yolo3_full post-processing (three Regions, two RegionFuse, NMS) of "
         "13x13, 26x26 and 52x52 heads, 80 classes, obj_threshold 0.15", [(4, 13, 13), (4, 26, 26), (4, 52, 52)],
         lambda rng, path: _heads(rng, path, [13, 26, 52], 255), data=_small,
         parser={"detection_postprocess": "yolo3_full", "obj_threshold": "0.15"}),
    Case("parser_maxroipool", "ONNX MaxRoiPool of 6 ROIs (an input) on a 9x12 map at 1/8, 3x2 bins",
         [(4, 9, 12), (30,)], _maxroipool, data=_rois),
]
