"""Signal, colour, layout and BEV layers as the tool chain's parser writes them:
OverlapAdd from TensorFlow's signal.overlap_and_add, BatchToSpaceND from a 5-D
batch_to_space (frozen graphs); RgbToYuv and YuvToRgb inserted before an ONNX model's input
by the parser's `gamut_preprocess` option (BT709, and the cfg's own coefficients); the
QueryRebatch and SlotUpdate it merges from BEVFormer's patterns of Gathers and ScatterNDs
over six cameras (ONNX, their index lists TopK indices of a second input).

The parser writes a Preprocess layer after the graph inputs only where a parser plugin of
that name is installed (its back pass `insert_preprocess`; the plugin's code defines what it
computes): the Preprocess case installs one beside its model (an `aipubt_*` module in the
parser's working folder) that copies each input, as the parser's own ArmPreprocessOp does.

The colour, BatchToSpaceND and BEV cases run one sample: the tool chain's forwards of those
layers take the IR's batch, and the BEV index lists are computed from the first sample."""
import numpy as np

from op_cases.common import Case, uniform_inputs

TF = {"model_type": "tf"}
CAMERAS = 6


def _frozen(fn, shapes, path):
    """fn of float32 placeholders in0, in1, ... ([1] + shape) frozen into a GraphDef at `path`,
    every constant written out in full: the parser cannot read TensorFlow's compressed
    constants (a fill written as one value)."""
    import tensorflow as tf
    from tensorflow.python.framework import tensor_util
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    signature = [tf.TensorSpec([1, *s], tf.float32, name=f"in{i}") for i, s in enumerate(shapes)]
    concrete = tf.function(fn, input_signature=signature).get_concrete_function()
    graph = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    for node in graph.node:
        if node.op == "Const":
            value = tensor_util.MakeNdarray(node.attr["value"].tensor)
            node.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(value))
    tf.io.write_graph(graph, *path.rsplit("/", 1), as_text=False)


def _outputs(count):
    return {**TF, "output": ",".join(["Identity"] + [f"Identity_{i}" for i in range(1, count)])}


def _overlap_add(rng, path):
    """Frames [1, 3, 4, 6] at steps 2 and 1, and of a RELU at step 3 (a step of the frame
    length is a Reshape in TensorFlow's graph)."""
    import tensorflow as tf
    _frozen(lambda x: (tf.signal.overlap_and_add(x, 2), tf.signal.overlap_and_add(x, 1),
                       tf.signal.overlap_and_add(tf.nn.relu(x), 3)), [(3, 4, 6)], path)


def _batch_to_space_nd(rng, path):
    """[1, 8, 2, 3, 2, 3] as a batch of 8, through batch_to_space with blocks of 2x2x2 and crops."""
    import tensorflow as tf
    _frozen(lambda x: tf.batch_to_space(tf.reshape(x, [8, 2, 3, 2, 3]), [2, 2, 2], [[0, 1], [1, 0], [1, 2]]),
            [(8, 2, 3, 2, 3)], path)


def _onnx(nodes, inputs, outputs, path, constants=()):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(nodes, "case", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                              for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in dict(constants).items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _relu_model(shape):
    def build(rng, path):
        from onnx import helper
        _onnx([helper.make_node("Relu", ["in0"], ["y"])], [("in0", [1, *shape])], ["y"], path)
    return build


def _camera_indices(nodes, constants, lengths, scores="in1"):
    """Per camera i, the TopK indices (int64, 1-D) of lengths[i] of the first sample's scores
    row i: index lists that follow the data, as BEVFormer's do."""
    from onnx import helper
    constants["sample"] = np.array(0, np.int64)
    nodes.append(helper.make_node("Gather", [scores, "sample"], ["scores0"], axis=0))
    names = []
    for i, k in enumerate(lengths):
        # k a scalar: the parser's TopK cannot read ONNX's [k]
        constants[f"camera{i}"], constants[f"k{i}"] = np.array(i, np.int64), np.array(k, np.int64)
        nodes += [helper.make_node("Gather", ["scores0", f"camera{i}"], [f"row{i}"], axis=0),
                  helper.make_node("TopK", [f"row{i}", f"k{i}"], [f"top{i}", f"index{i}"])]
        names.append(f"index{i}")
    return names


def _query_rebatch(rng, path):
    """BEVFormer's rebatching of queries [1, 5, 4] for six cameras into [1, 6, 5, 4] (one
    list of all five queries, so the top has the IR's shape)."""
    from onnx import helper
    lengths, queries, channels = [3, 5, 2, 4, 1, 3], 5, 4
    nodes, constants = [], {}
    index = _camera_indices(nodes, constants, lengths)
    nodes.append(helper.make_node("Gather", ["in0", "sample"], ["sample_queries"], axis=0))
    constants["slots"] = np.zeros((1, CAMERAS, queries, channels), np.float32)
    data = "slots"
    for i, k in enumerate(lengths):
        constants[f"shape{i}"] = np.array([k, channels], np.int64)
        constants[f"where{i}"] = np.array([[0, i, j] for j in range(k)], np.int64)
        nodes += [helper.make_node("Gather", ["sample_queries", index[i]], [f"picked{i}"], axis=0),
                  helper.make_node("Reshape", [f"picked{i}", f"shape{i}"], [f"rows{i}"]),
                  helper.make_node("ScatterND", [data, f"where{i}", f"rows{i}"], [f"rebatched{i}"])]
        data = f"rebatched{i}"
    _onnx(nodes, [("in0", [1, queries, channels]), ("in1", [1, CAMERAS, queries])], [data], path, constants)


def _slot_update(rng, path):
    """BEVFormer's update of five slots [1, 5, 4] from the cameras' queries [1, 6, 5, 4]:
    slots[0, index_i] += queries[0, i, :len(index_i)], camera by camera (as in BEVFormer, a
    camera has as many rows as there are slots: the parser infers the top's shape so)."""
    from onnx import helper
    lengths, slots, channels = [3, 2, 5, 1, 2, 4], 5, 4
    nodes, constants = [], {}
    index = _camera_indices(nodes, constants, lengths)
    constants["empty"] = np.zeros((1, slots, channels), np.float32)
    constants["empty_rows"] = np.zeros((slots, channels), np.float32)
    nodes.append(helper.make_node("Gather", ["in0", "sample"], ["sample_queries"], axis=0))
    data = "empty"
    for i, k in enumerate(lengths):
        constants.update({f"start{i}": np.array([0], np.int64), f"end{i}": np.array([k], np.int64),
                          f"axes{i}": np.array([0], np.int64), f"steps{i}": np.array([1], np.int64),
                          f"shape{i}": np.array([k, channels], np.int64),
                          f"batch{i}": np.zeros((k, 1), np.int64), f"unsqueeze{i}": np.array([1], np.int64)})
        current = "empty_rows" if i == 0 else f"current{i}"
        if i:
            nodes.append(helper.make_node("Gather", [data, "sample"], [current], axis=0))
        nodes += [helper.make_node("Gather", [current, index[i]], [f"old{i}"], axis=0),
                  helper.make_node("Gather", ["sample_queries", "sample" if i == 0 else f"camera{i}"],
                                   [f"camera_queries{i}"], axis=0),
                  helper.make_node("Slice", [f"camera_queries{i}", f"start{i}", f"end{i}", f"axes{i}",
                                             f"steps{i}"], [f"new{i}"]),
                  helper.make_node("Add", [f"old{i}", f"new{i}"], [f"sum{i}"]),
                  helper.make_node("Reshape", [f"sum{i}", f"shape{i}"], [f"rows{i}"]),
                  helper.make_node("Unsqueeze", [index[i], f"unsqueeze{i}"], [f"column{i}"]),
                  helper.make_node("Concat", [f"batch{i}", f"column{i}"], [f"where{i}"], axis=1),
                  helper.make_node("ScatterND", [data, f"where{i}", f"rows{i}"], [f"slots{i}"])]
        data = f"slots{i}"
    _onnx(nodes, [("in0", [1, CAMERAS, slots, channels]), ("in1", [1, CAMERAS, slots])], [data], path, constants)


PREPROCESS_PLUGIN = """\
from AIPUBuilder.Parser.plugin_loader import PluginType, register_plugin
from AIPUBuilder.Parser.plugin_op import ParserOp


@register_plugin(PluginType.Parser, '1.0')
class Preprocess(ParserOp):
    op_type = 'Preprocess'

    def infer_shape(self, input_tensors, *args):
        return [t.copy() for t in input_tensors]
"""


def _preprocess(rng, path):
    """Two inputs, a layer after each; the parser plugin beside the model makes the parser put
    a Preprocess after the inputs."""
    import os

    from onnx import helper
    with open(os.path.join(os.path.dirname(path), "aipubt_preprocess.py"), "w") as f:
        f.write(PREPROCESS_PLUGIN)
    _onnx([helper.make_node("Relu", ["in0"], ["relu"]), helper.make_node("Sigmoid", ["in1"], ["sigmoid"])],
          [("in0", [1, 4, 5]), ("in1", [1, 3])], ["relu", "sigmoid"], path)


def _pixels(rng, shapes, n, value_range, run):
    """Pixel values over 0..255 for the uint8 input the parser makes: uint8 calibration data,
    float32 run data (npuopt-run quantizes floats with the input's scale 1)."""
    return [rng.integers(0, 256, (n,) + s).astype(np.float32 if run else np.uint8) for s in shapes]


def _gamut(kind, **fields):
    return {"gamut_preprocess": kind, **fields}


INT_RGB_TO_YUV = "[0, 0, 0, 0, 128, 128, 218, 732, 74, -118, -395, 512, 512, -465, -47]"
INT_YUV_TO_RGB = "[0, 128, 128, 0, 0, 0, 256, 0, 403, 256, -48, -120, 256, 475, 0]"
SELF = dict(gamut_conversion="SELF", coefficient_dtype="int16")

# the data shapes of the colour cases are those of the IR the parser makes (its input replaced)
CASES = [
    Case("parser_tf_overlap_add", "TensorFlow's signal.overlap_and_add at steps 2, 1 and 3", [(3, 4, 6)],
         _overlap_add, parser=_outputs(3)),
    Case("parser_tf_batch_to_space_nd", "TensorFlow's 5-D batch_to_space with crops", [(8, 2, 3, 2, 3)],
         _batch_to_space_nd, parser=TF, run_samples=1),
    Case("parser_rgb_to_yuv", "the parser's gamut_preprocess RgbToYuv (BT709) before a 4x6 image's I420 input",
         [(4, 6, 3)], _relu_model([36]), data=_pixels, run_samples=1,
         parser=_gamut("RgbToYuv", rgb_shape="[1,4,6,3]", input_shape="[1,36]")),
    Case("parser_rgb_to_yuv_self", "the parser's gamut_preprocess RgbToYuv with the cfg's integer coefficients",
         [(4, 6, 3)], _relu_model([36]), data=_pixels, run_samples=1,
         parser=_gamut("RgbToYuv", rgb_shape="[1,4,6,3]", input_shape="[1,36]",
                       coefficient=INT_RGB_TO_YUV, coefficient_shift="10", **SELF)),
    Case("parser_yuv_to_rgb", "the parser's gamut_preprocess YuvToRgb (BT709) before an NCHW 4x6 image input",
         [(36,)], _relu_model([3, 4, 6]), data=_pixels, run_samples=1,
         parser=_gamut("YuvToRgb", input_shape="[1,3,4,6]")),
    Case("parser_yuv_to_rgb_self", "the parser's gamut_preprocess YuvToRgb with the cfg's integer coefficients",
         [(36,)], _relu_model([3, 4, 6]), data=_pixels, run_samples=1,
         parser=_gamut("YuvToRgb", input_shape="[1,3,4,6]", coefficient=INT_YUV_TO_RGB,
                       coefficient_shift="8", **SELF)),
    Case("parser_preprocess", "the Preprocess the parser puts after two inputs with a Preprocess parser plugin",
         [(4, 5), (3,)], _preprocess),
    Case("parser_query_rebatch", "BEVFormer's query rebatching over six cameras (QueryRebatch)",
         [(5, 4), (CAMERAS, 5)], _query_rebatch, run_samples=1),
    Case("parser_slot_update", "BEVFormer's slot update from six cameras (SlotUpdate)",
         [(CAMERAS, 5, 4), (CAMERAS, 5)], _slot_update, run_samples=1),
]
