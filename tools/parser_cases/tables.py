"""Parser-written IRs of the table and statistics layers, all from TensorFlow graphs (the
front end that writes them): tf.math.segment_sum (SegmentReduce SUM; the parser writes no
other method from any front end), tf.math.in_top_k (InTopK), tf.nn.sufficient_statistics
(SufficientStatistics, with a shift and without, when the parser inserts a zero one),
tf.nn.normalize_moments (NormalizedMoments), tf.math.zero_fraction (ZeroFraction),
tf.nn.compute_accidental_hits (AccidentalHits), and the sparse-segment form of
tf.nn.embedding_lookup_sparse (EmbeddingLookupSparse, every combiner).

The graphs are built in TensorFlow's graph mode and written as they are (no grappler
pass): the parser's patterns match the ops TensorFlow 1 wrote. Its EmbeddingLookupSparse
pattern needs the ids straight from a 1-D graph input (int32 [n], so the IR's input has
no batch axis: the case feeds exactly n ids), and its weighted pattern fails under NumPy
2 (np.product), so the weights are the parser's ones. No Count case: the parser writes
Count only inside its Mask R-CNN merge."""
import numpy as np

from op_cases.common import Case
from op_cases.tables import coarse, one_sample

TF = {"model_type": "tf"}
IDS = 5


def _graph(path, build, specs):
    """build(*placeholders) -> output tensors, in a TensorFlow graph written to `path`
    with the outputs as out0, out1, ... (Identity); specs [(name, dtype, shape)]."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        inputs = [tf.compat.v1.placeholder(getattr(tf, dtype), shape, name=name) for name, dtype, shape in specs]
        for i, t in enumerate(build(*inputs)):
            tf.identity(t, name=f"out{i}")
    tf.io.write_graph(graph.as_graph_def(), *path.rsplit("/", 1), as_text=False)


def _outputs(n: int, **fields):
    return {**TF, "output": ",".join(f"out{i}" for i in range(n)), **fields}


def _segment_sum(rng, path):
    import tensorflow as tf

    def build(x):
        rows = tf.reshape(x, [6, 4])
        return [tf.math.segment_sum(rows, tf.constant([0, 0, 1, 3, 3, 3])),
                tf.math.segment_sum(tf.nn.relu(rows), tf.constant([0, 1, 1, 2, 2, 2]))]
    _graph(path, build, [("in0", "float32", [1, 6, 4])])


def _in_top_k(rng, path):
    import tensorflow as tf

    def build(x, y):
        target = tf.reshape(tf.argmax(y, axis=1, output_type=tf.int32), [-1])
        return [tf.reshape(tf.cast(tf.math.in_top_k(target, x, k), tf.float32), [-1, 1]) for k in (1, 2, 4)]
    _graph(path, build, [("in0", "float32", [1, 6]), ("in1", "float32", [1, 6])])


def _sufficient_statistics(rng, path):
    import tensorflow as tf

    def build(x, shift):
        _, sums, squares, _ = tf.nn.sufficient_statistics(x, [1, 2], shift=shift, keepdims=True)
        _, sums2, squares2, _ = tf.nn.sufficient_statistics(x, [2], keepdims=False)
        return [sums, squares, sums2, squares2]
    _graph(path, build, [("in0", "float32", [1, 4, 6]), ("in1", "float32", [1, 1, 6])])


def _normalize_moments(rng, path):
    import tensorflow as tf

    def build(sums, squares, shift):
        mean, var = tf.nn.normalize_moments(5.0, sums, tf.nn.relu(squares) * 5.0, shift)
        mean2, var2 = tf.nn.normalize_moments(3.0, sums, tf.nn.relu(squares) * 3.0, None)
        return [mean, var, mean2, var2]
    _graph(path, build, [(f"in{i}", "float32", [1, 6]) for i in range(3)])


def _zero_fraction(rng, path):
    import tensorflow as tf

    def build(x):
        return [tf.math.zero_fraction(tf.nn.relu(x)), tf.math.zero_fraction(x)]
    _graph(path, build, [("in0", "float32", [1, 4, 6])])


def _accidental_hits(rng, path):
    import tensorflow as tf

    def build(x, y):
        true = tf.math.top_k(tf.reshape(x, [4, 6]), 2).indices
        sampled = tf.reshape(tf.math.top_k(y, 3).indices, [-1])
        return list(tf.nn.compute_accidental_hits(tf.cast(true, tf.int64), tf.cast(sampled, tf.int64), 2)[:2])
    _graph(path, build, [("in0", "float32", [1, 4, 6]), ("in1", "float32", [1, 6])])


def _embedding(rng, path):
    """A table [10,4] looked up at the ids of graph input in0 (int32 [5]) by sparse rows
    [0,0,1,3,3] (row 2 empty), one lookup per combiner (TensorFlow 1's graph: Unique,
    GatherV2, SparseSegment{Sum,Mean,SqrtN})."""
    import tensorflow as tf

    table = rng.standard_normal((10, 4)).astype(np.float32)
    rows = np.array([0, 0, 1, 3, 3], np.int32)
    segment = {"sum": tf.raw_ops.SparseSegmentSum, "mean": tf.raw_ops.SparseSegmentMean,
               "sqrtn": tf.raw_ops.SparseSegmentSqrtN}

    def build(ids):
        outs = []
        for op in segment.values():
            unique, position = tf.unique(ids)
            gathered = tf.gather(tf.constant(table), unique, axis=tf.constant(0))
            outs.append(op(data=gathered, indices=position, segment_ids=tf.constant(rows)))
        return outs
    _graph(path, build, [("in0", "int32", [IDS])])


def _ids(rng, shapes, n, value_range, run):
    """IDS ids in [0, 10) with repeats (the lookup's ids, not samples: the same count always):
    int32 to calibrate (npuopt takes a graph input's own dtype), as integral floats to run
    (npuopt-run quantizes float inputs, to the int32 input's scale 1)."""
    return [rng.integers(0, 10, IDS).astype(np.float32 if run else np.int32)]


CASES = [
    Case("parser_tf_segment_sum", "tf.math.segment_sum of rows and of their RELU (one sample)", [(6, 4)],
         _segment_sum, dict(calibration_batch_size="1"), data=one_sample, parser=_outputs(2), run_samples=1),
    Case("parser_tf_in_top_k", "tf.math.in_top_k of ArgMax targets (ties), k 1, 2, 4", [(6,), (6,)], _in_top_k,
         data=coarse, parser=_outputs(3)),
    Case("parser_tf_sufficient_statistics", "tf.nn.sufficient_statistics with a shift over two axes and without "
         "one over the last (a zero shift the parser inserts, a Reshape for keepdims false)", [(4, 6), (1, 6)],
         _sufficient_statistics, parser=_outputs(4)),
    Case("parser_tf_normalize_moments", "tf.nn.normalize_moments with a shift and without (a zero shift the parser "
         "inserts)", [(6,), (6,), (6,)], _normalize_moments, parser=_outputs(4)),
    Case("parser_tf_zero_fraction", "tf.math.zero_fraction of a RELU and of values with zeros (one sample: 0-d "
         "tops)", [(4, 6)], _zero_fraction, dict(calibration_batch_size="1"), data=one_sample, parser=_outputs(2),
         run_samples=1),
    Case("parser_tf_accidental_hits", "tf.nn.compute_accidental_hits of TopK classes and candidates (one sample)",
         [(4, 6), (6,)], _accidental_hits, dict(calibration_batch_size="1"), data=one_sample, parser=_outputs(2),
         run_samples=1),
    Case("parser_tf_embedding_lookup_sparse", "tf.nn.embedding_lookup_sparse's sparse segments, every combiner, "
         f"at {IDS} ids of a 1-D int32 graph input", [(IDS,)], _embedding, data=_ids,
         parser=_outputs(3, input_shape=f"[{IDS}]")),
]
