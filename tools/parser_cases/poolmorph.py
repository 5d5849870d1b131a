"""Parser-written IRs of morphology and index pooling: ONNX MaxPool with indices and
MaxUnpool (MaxPoolingWithArgMax and MaxUnpool, flatten_dim NCHW), and TensorFlow's
dilation2d/erosion2d (Dilation, Erosion), fractional_max_pool/fractional_avg_pool
(FractionalPool) and max_pool_with_argmax (MaxPoolingWithArgMax, flatten_dim NHWC and HWC).

No Meshgrid case: the parser writes Meshgrid only from ONNX's meshgrid pattern over 1-D
graph inputs (the torch front end's route crashes beside TensorFlow here), an IR whose
inputs have no batch axis; npuopt takes the first axis of every input as the batch, and
the grid of two such inputs grows along two axes.

Cases whose indices are graph outputs run one sample: NCHW and NHWC indices count the
samples of the batch run, so a batch of several is not its samples run apart."""
import numpy as np

from op_cases.common import Case, uniform_inputs

TF = {"model_type": "tf"}


def one_sample(rng, shapes, n, value_range, run):
    return [np.round(x * 8) / 8 for x in uniform_inputs(rng, shapes, 1, value_range, run)]


def _save_onnx(nodes, inputs, outputs, path, initializers=()):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _maxunpool(rng, path):
    """Two MaxPools with indices: one unpooled by MaxUnpool (its output shape an input), one
    column-major with pads and ceil_mode whose indices are an output."""
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1, 3, 6, 7], np.int64), "unpooled_shape")
    nodes = [helper.make_node("MaxPool", ["in0"], ["pooled", "index"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["pooled", "index", "unpooled_shape"], ["unpooled"], kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("MaxPool", ["in0"], ["pooled2", "index2"], kernel_shape=[3, 2], strides=[2, 1],
                              pads=[1, 0, 1, 1], ceil_mode=1, storage_order=1)]
    outputs = [("unpooled", TensorProto.FLOAT, [1, 3, 6, 7]), ("pooled2", TensorProto.FLOAT, [1, 3, 4, 7]),
               ("index2", TensorProto.INT64, [1, 3, 4, 7])]
    _save_onnx(nodes, [("in0", [1, 3, 6, 7])], outputs, path, [shape])


def _frozen(fn, shape, path):
    """fn(x) of a float32 placeholder `in0` frozen into a GraphDef at `path`."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    concrete = tf.function(fn, input_signature=[tf.TensorSpec([1, *shape], tf.float32, name="in0")])
    graph = convert_variables_to_constants_v2(concrete.get_concrete_function()).graph.as_graph_def()
    tf.io.write_graph(graph, *path.rsplit("/", 1), as_text=False)


def _morphology(rng, path):
    import tensorflow as tf

    kernels = [(rng.standard_normal((kh, kw, 4)) * 0.3).astype(np.float32) for kh, kw in ((3, 2), (2, 3), (2, 2))]

    def fn(x):
        return (tf.nn.dilation2d(x, kernels[0], [1, 1, 2, 1], "SAME", "NHWC", [1, 2, 1, 1]),
                tf.nn.dilation2d(x, kernels[2], [1, 2, 2, 1], "VALID", "NHWC", [1, 1, 1, 1]),
                tf.nn.erosion2d(x, kernels[1], [1, 2, 1, 1], "VALID", "NHWC", [1, 1, 1, 1]),
                tf.nn.erosion2d(x, kernels[0], [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 2, 1]))
    _frozen(fn, (7, 9, 4), path)


def _fractional(rng, path):
    import tensorflow as tf

    def fn(x):
        pools = [tf.compat.v1.nn.fractional_max_pool(x, [1.0, 1.5, 1.4, 1.0], False, False, seed=7, seed2=1),
                 tf.compat.v1.nn.fractional_max_pool(x, [1.0, 2.0, 1.7, 1.0], True, True, seed=123, seed2=4),
                 tf.compat.v1.nn.fractional_avg_pool(x, [1.0, 1.3, 2.0, 1.0], True, False, seed=99, seed2=2),
                 tf.compat.v1.nn.fractional_avg_pool(x, [1.0, 1.8, 1.2, 1.0], False, True, seed=31337, seed2=3)]
        return tuple(t for p in pools for t in p)
    _frozen(fn, (9, 11, 3), path)


def _argmax(rng, path):
    import tensorflow as tf

    def fn(x):
        return (tf.nn.max_pool_with_argmax(x, 3, 2, "SAME", include_batch_in_index=True)
                + tf.nn.max_pool_with_argmax(x, [2, 3], [1, 2], "VALID", include_batch_in_index=False))
    _frozen(fn, (6, 7, 3), path)


def _outputs(*names):
    return {**TF, "output": ",".join(names)}


CASES = [
    Case("parser_maxunpool", "ONNX MaxPool with indices and MaxUnpool (NCHW indices), column-major indices with "
         "pads and ceil_mode", [(3, 6, 7)], _maxunpool, data=one_sample),
    Case("parser_tf_morphology", "TensorFlow dilation2d and erosion2d, SAME and VALID, strided and dilated",
         [(7, 9, 4)], _morphology, parser=_outputs("Identity", "Identity_1", "Identity_2", "Identity_3")),
    Case("parser_tf_fractional_pool", "TensorFlow fractional_max_pool and fractional_avg_pool, random and "
         "pseudo-random, overlapping", [(9, 11, 3)], _fractional,
         parser=_outputs(*(["Identity"] + [f"Identity_{i}" for i in range(1, 12)]))),
    Case("parser_tf_argmax_pool", "TensorFlow max_pool_with_argmax with and without the batch in the index",
         [(6, 7, 3)], _argmax, data=one_sample, parser=_outputs("Identity", "Identity_1", "Identity_2", "Identity_3")),
]
