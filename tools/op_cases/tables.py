"""Tables, statistics and recommender layers: SegmentReduce, EmbeddingLookupSparse,
AccidentalHits, InTopK, Count, SufficientStatistics, NormalizedMoments, ZeroFraction.

Cases marked "one sample" calibrate on single samples (calibration_batch_size 1) and run
one: their layers take axis 0 as rows of their own (segments, embedding ids, true
classes), and the tool chain runs a batch as one (its Count and ZeroFraction give the
IR's batch only)."""
import numpy as np
import torch

from op_cases.common import Case, uniform_inputs

ONE_SAMPLE = dict(calibration_batch_size="1")
ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")


def one_sample(rng, shapes, n, value_range, run):
    """Multiples of 1/8 (exact zeros and ties), n calibration samples, one run sample."""
    return [np.round(x * 8) / 8 for x in uniform_inputs(rng, shapes, 1 if run else n, value_range, run)]


def coarse(rng, shapes, n, value_range, run):
    """Multiples of 1/4: ties among predictions."""
    return [np.round(x * 4) / 4 for x in uniform_inputs(rng, shapes, n, value_range, run)]


def _ints(b, name, values):
    return b.layer("Constant", name, [], {}, {"weights": torch.tensor(values, dtype=torch.int32)})[0]


def _ids(b, name, x, axis):
    """int32 ids: the ArgMax of x along `axis`, flattened."""
    arg = b.layer("ArgMinMax", f"{name}_argmax", [x], dict(method="MAX", axis=axis, select_last_index=False))[0]
    return b.layer("Reshape", name, [arg], dict(shape=[-1]))[0]


def _segment_reduce(b, rng, x):
    """SUM of x0 [6,4] (the sample's rows) by sorted ids with an empty segment, by ids
    shorter than the rows (padded with the last), of a RELU (unsigned), and by ids the
    data choose (ArgMax of x1 [6,3]: unsorted, at most 3 segments)."""
    data = b.layer("Reshape", "rows", [x[0]], dict(shape=[6, 4]))[0]
    relu = b.layer("Activation", "relu", [data], dict(method="RELU"))[0]
    sorted_ids, short_ids = _ints(b, "sorted_ids", [0, 0, 1, 3, 3, 3]), _ints(b, "short_ids", [0, 1, 1, 2])
    tops = b.layer("SegmentReduce", "sum_sorted", [data, sorted_ids], dict(method="SUM"))
    tops += b.layer("SegmentReduce", "sum_short", [data, short_ids], dict(method="SUM"))
    tops += b.layer("SegmentReduce", "sum_relu", [relu, sorted_ids], dict(method="SUM"))
    chosen = _ids(b, "chosen_ids", x[1], 2)
    tops += b.layer("SegmentReduce", "sum_chosen", [data, chosen], dict(method="SUM"), top_shapes=[[3, 4]])
    return tops


def _segment_methods(b, rng, x):
    """MEAN, MAX, MIN and PROD of x0 [6,4] by sorted ids with an empty segment."""
    data = b.layer("Reshape", "rows", [x[0]], dict(shape=[6, 4]))[0]
    ids = _ints(b, "ids", [0, 1, 1, 3, 3, 3])
    return [b.layer("SegmentReduce", m.lower(), [data, ids], dict(method=m))[0] for m in ("MEAN", "MAX", "MIN", "PROD")]


def _embedding(b, rng, x):
    """A table [8,3] looked up at the ArgMax of x0 [6,8] (6 ids), indices ascending with an
    empty row, weights x1 [6] (signed) for SUM and SQRTN, weights RELU(x1) (unsigned, a row
    of zero weights) for MEAN; and SUM by the first column of [6,2] indices."""
    table = b.layer("Constant", "table", [], {}, {"weights": torch.from_numpy(
        rng.standard_normal((8, 3)).astype(np.float32))})[0]
    ids = _ids(b, "ids", x[0], 2)
    weights = b.layer("Reshape", "weights", [x[1]], dict(shape=[-1]))[0]
    positive = b.layer("Activation", "positive", [weights], dict(method="RELU"))[0]
    rows = _ints(b, "rows", [0, 0, 1, 3, 3, 4])
    tops = []
    for how, w in (("SUM", weights), ("SQRTN", weights), ("MEAN", positive)):
        tops += b.layer("EmbeddingLookupSparse", how.lower(), [table, rows, ids, w], dict(combiner=how,
                                                                                           max_norm="NONE"),
                        top_shapes=[[5, 3]])
    pairs = _ints(b, "pairs", [[0, 2], [1, 0], [1, 1], [2, 0], [2, 2], [2, 1]])
    tops += b.layer("EmbeddingLookupSparse", "sum_pairs", [table, pairs, ids, weights], dict(combiner="sum"),
                    top_shapes=[[3, 3]])
    return tops


def _accidental_hits(b, rng, x):
    """True classes: the top 2 of each of x0's 4 rows of 6; candidates: the top 3 of x1 [6];
    all hits (IR length 8), and the first 3 (IR length 3)."""
    _, true = b.layer("TopK", "true", [x[0]], dict(k=2, axis=2, largest=True, sorted=True), n_tops=2)
    true = b.layer("Reshape", "true_classes", [true], dict(shape=[4, 2]))[0]
    _, sampled = b.layer("TopK", "sampled", [x[1]], dict(k=3, axis=1, largest=True, sorted=True), n_tops=2)
    sampled = b.layer("Reshape", "candidates", [sampled], dict(shape=[3]))[0]
    tops = b.layer("AccidentalHits", "hits", [true, sampled], n_tops=3, top_shapes=[[8], [8], [1]])
    return tops + b.layer("AccidentalHits", "first_hits", [true, sampled], n_tops=3, top_shapes=[[3], [3], [1]])


def _in_top_k(b, rng, x):
    """Predictions x0 [N,6] (ties), targets the ArgMax of x1 [N,6]; k 1, 2, 6 and 9; each
    top [N] as [N,1] (the tool chain's OptForward reshapes 1-D graph outputs to the IR's shape)."""
    target = b.layer("ArgMinMax", "target_argmax", [x[1]], dict(method="MAX", axis=1, select_last_index=False))[0]
    target = b.layer("Reshape", "target", [target], dict(shape=[1]))[0]
    hits = [b.layer("InTopK", f"in_top_{k}", [x[0], target], dict(k=k))[0] for k in (1, 2, 6, 9)]
    return [b.layer("Reshape", f"{h}_column", [h], dict(shape=[1, 1]))[0] for h in hits]


def _count(b, rng, x):
    """Histograms of x0 [20]: discrete from -1 to 1 in 8 bins, not discrete from -0.8 to
    0.8 in 6; of the class ids ArgMax(x1 [10,6]) from 0 to 5."""
    tops = b.layer("Count", "bins8", [x[0]], dict(min=-1.0, max=1.0, nbins=8, discrete=True))
    tops += b.layer("Count", "edges6", [x[0]], dict(min=-0.8, max=0.8, nbins=6, discrete=False))
    classes = b.layer("ArgMinMax", "classes", [x[1]], dict(method="MAX", axis=2, select_last_index=False))[0]
    return tops + b.layer("Count", "class_counts", [classes], dict(min=0.0, max=5.0, nbins=5, discrete=True))


def _count_down(b, rng, x):
    """A histogram of x0 [20] from 0.9 down to -0.6 in 5 bins (listed from the top down)."""
    return b.layer("Count", "down5", [x[0]], dict(min=0.9, max=-0.6, nbins=5, discrete=True))


def _sufficient_statistics(b, rng, x):
    """Sums and sums of squares of x0 [N,4,6] - x1 [N,1,6] over axes [1, 2] and [2], with
    a zero shift constant, and of RELU(x0) (unsigned) minus x1."""
    zero = b.layer("Constant", "zero_shift", [], {}, {"weights": torch.zeros(1, 4, 6)})[0]
    relu = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))[0]
    tops = b.layer("SufficientStatistics", "both_axes", [x[0], x[1]], dict(axis=[1, 2]), n_tops=2)
    tops += b.layer("SufficientStatistics", "last_axis", [x[0], zero], dict(axis=[2]), n_tops=2)
    return tops + b.layer("SufficientStatistics", "relu_axis", [relu, x[1]], dict(axis=[1]), n_tops=2)


def _normalized_moments(b, rng, x):
    """tf.nn.moments as the parser writes it: SufficientStatistics of x0 [N,4,6] over axis
    [1] with shift x1 [N,1,6], then NormalizedMoments (counts 4) with that shift; and of
    inputs of their own: sums x2 [N,6], squares RELU(x3) [N,6], a zero shift, counts 3."""
    sums, squares = b.layer("SufficientStatistics", "stats", [x[0], x[1]], dict(axis=[1]), n_tops=2)
    tops = b.layer("NormalizedMoments", "moments", [sums, squares, x[1]], dict(counts=4.0), n_tops=2)
    zero = b.layer("Constant", "zero_shift", [], {}, {"weights": torch.zeros(1, 6)})[0]
    positive = b.layer("Activation", "positive", [x[3]], dict(method="RELU"))[0]
    return tops + b.layer("NormalizedMoments", "given", [x[2], positive, zero], dict(counts=3.0), n_tops=2)


def _zero_fraction(b, rng, x):
    """The share of zeros of RELU(x0) [4,6] (a 0-d top, as the parser writes it) and of x0
    itself (multiples of 1/8: some zeros; a top [1])."""
    relu = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))[0]
    return b.layer("ZeroFraction", "relu_zeros", [relu]) + b.layer("ZeroFraction", "zeros", [x[0]],
                                                                    top_shapes=[[1]])


CASES = [
    Case("segment_reduce", "SegmentReduce SUM by sorted ids with an empty segment, by short ids, of a RELU, and "
         "by ids the data choose (one sample)", [(6, 4), (6, 3)], _segment_reduce, ONE_SAMPLE, data=one_sample,
         run_samples=1),
    Case("segment_reduce_asym", "the same with asymmetric activations (one sample)", [(6, 4), (6, 3)],
         _segment_reduce, dict(ONE_SAMPLE, **ASYM), data=one_sample, run_samples=1),
    Case("segment_reduce_methods", "SegmentReduce MEAN, MAX, MIN, PROD (kept in float: the tool chain has SUM "
         "only; one sample)", [(6, 4)], _segment_methods, ONE_SAMPLE, data=one_sample, run_samples=1),
    Case("embedding_lookup_sparse", "EmbeddingLookupSparse SUM, SQRTN, MEAN with signed and unsigned weights, and "
         "by a column of 2-D indices (one sample)", [(6, 8), (6,)], _embedding, ONE_SAMPLE, data=one_sample,
         run_samples=1),
    Case("embedding_lookup_sparse_asym", "the same with asymmetric activations (one sample)", [(6, 8), (6,)],
         _embedding, dict(ONE_SAMPLE, **ASYM), data=one_sample, run_samples=1),
    Case("accidental_hits", "AccidentalHits of TopK classes and candidates, all hits and the first 3 (one sample)",
         [(4, 6), (6,)], _accidental_hits, ONE_SAMPLE, data=one_sample, run_samples=1),
    Case("in_top_k", "InTopK with ties, k 1, 2, all and past the classes", [(6,), (6,)], _in_top_k, data=coarse),
    Case("count", "Count: discrete bins, not discrete, of class ids (one sample)", [(20,), (10, 6)],
         _count, ONE_SAMPLE, data=one_sample, run_samples=1),
    Case("count_asym", "the same with asymmetric activations (one sample)", [(20,), (10, 6)], _count,
         dict(ONE_SAMPLE, **ASYM), data=one_sample, run_samples=1),
    Case("count_down", "Count from max down to min (one sample)", [(20,)], _count_down, ONE_SAMPLE,
         data=one_sample, run_samples=1),
    Case("sufficient_statistics", "SufficientStatistics over two axes and one, with a zero shift, of a RELU",
         [(4, 6), (1, 6)], _sufficient_statistics),
    Case("sufficient_statistics_asym", "the same with asymmetric activations", [(4, 6), (1, 6)],
         _sufficient_statistics, ASYM),
    Case("normalized_moments", "NormalizedMoments after SufficientStatistics (tf.nn.moments) and of inputs of "
         "its own with a zero shift", [(4, 6), (1, 6), (6,), (6,)], _normalized_moments),
    Case("normalized_moments_asym", "the same with asymmetric activations", [(4, 6), (1, 6), (6,), (6,)],
         _normalized_moments, ASYM),
    Case("zero_fraction", "ZeroFraction of a RELU and of values with zeros (one sample: a 0-d top)", [(4, 6)],
         _zero_fraction, ONE_SAMPLE, data=one_sample, run_samples=1),
]
