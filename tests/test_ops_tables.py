"""The table and statistics layers (SegmentReduce, EmbeddingLookupSparse, AccidentalHits,
InTopK, Count, SufficientStatistics, NormalizedMoments, ZeroFraction): float forwards
against TensorFlow's results (written here) and NumPy references, their one-line IRErrors
(also through `npuopt --cfg` and `npuopt-run`: nothing written), and the shapes that
follow the data."""
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from npuopt.dtype import Dtype
from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from test_ops_float import close

from conftest import REPO, assert_op_test_edit_stops_npuopt, edit_ir

D = torch.tensor([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]])


def ints(values):
    return torch.tensor(values, dtype=torch.int32)


def run(optype, inputs, params=None, n_tops=1, top_shapes=None, batch=None):
    """A one-layer graph of `optype` over graph inputs of the given values (their dtypes);
    forwarded on them (or on `batch`, values of another batch)."""
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x, Dtype.of_torch(x.dtype)) for i, x in enumerate(inputs)]
    tops = b.layer(optype, "op", names, params, n_tops=n_tops, top_shapes=top_shapes)
    outs = b.build(tops).forward(list(batch or inputs))
    return outs if n_tops > 1 else outs[0]


# ---- float forwards ----------------------------------------------------------------------
@pytest.mark.parametrize("method, want", [  # tf.math.segment_* of D by ids [0, 0, 2]
    ("SUM", [[4, -2], [0, 0], [5, 6]]), ("MEAN", [[2, -1], [0, 0], [5, 6]]), ("MAX", [[3, 2], [0, 0], [5, 6]]),
    ("MIN", [[1, -4], [0, 0], [5, 6]]), ("PROD", [[3, -8], [1, 1], [5, 6]])])
def test_segment_reduce_is_tensorflows(method, want):
    got = run("SegmentReduce", [D, ints([0, 0, 2])], dict(method=method), top_shapes=[[3, 2]])
    close(got, torch.tensor(want, dtype=torch.float32))


def test_segment_ids_cut_and_padded_as_the_tool_chain():
    """Ids longer than the rows are cut to them, shorter ones padded with the last id."""
    long = run("SegmentReduce", [D, ints([0, 1, 1, 5])], {}, top_shapes=[[2, 2]])
    close(long, torch.tensor([[1.0, 2.0], [8.0, 2.0]]))
    short = run("SegmentReduce", [D, ints([0, 1])], {}, top_shapes=[[2, 2]])
    close(short, torch.tensor([[1.0, 2.0], [8.0, 2.0]]))


def _embedding_reference(table, rows, ids, weights, how):
    count = rows[-1] + 1
    sums = np.zeros((count, table.shape[1]))
    divisor = np.zeros((count, 1))
    for r, i, w in zip(rows, ids, weights):
        sums[r] += table[i] * w
        divisor[r] += w if how == "MEAN" else w * w
    if how == "SUM":
        return sums
    with np.errstate(divide="ignore", invalid="ignore"):
        out = sums / (divisor if how == "MEAN" else np.sqrt(divisor))
    return np.where(np.isfinite(out), out, 0.0)


@pytest.mark.parametrize("how", ["SUM", "MEAN", "SQRTN"])
def test_embedding_lookup_sparse_combines_as_tensorflow(how):
    """Row 2 has no id (zeros); row 3's weights sum to 0 (MEAN gives 0, as divide_no_nan)."""
    table = torch.randn(6, 3)
    rows, ids = [0, 0, 1, 3, 3, 4], [5, 1, 1, 0, 2, 4]
    weights = torch.tensor([0.5, -1.5, 2.0, 1.0, -1.0, 0.25])
    got = run("EmbeddingLookupSparse", [table, ints(rows), ints(ids), weights], dict(combiner=how.lower()),
              top_shapes=[[5, 3]])
    want = _embedding_reference(table.numpy().astype(np.float64), rows, ids, weights.numpy(), how)
    close(got, torch.from_numpy(want).to(torch.float32))


def test_accidental_hits_as_tensorflow():
    """tf.nn.compute_accidental_hits([[1, 2], [2, 2]], [2, 5, 1], 2): indices [0, 0, 1, 1], ids
    [2, 0, 0, 0]; an IR length of 3 keeps the first three."""
    true, sampled = ints([[1, 2], [2, 2]]), ints([2, 5, 1])
    rows, ids, count = run("AccidentalHits", [true, sampled], n_tops=3, top_shapes=[[4], [4], [1]])
    assert rows.tolist() == [0, 0, 1, 1] and ids.tolist() == [2, 0, 0, 0] and count.tolist() == [4]
    rows, ids, count = run("AccidentalHits", [true, sampled], n_tops=3, top_shapes=[[3], [3], [1]])
    assert rows.tolist() == [0, 0, 1] and ids.tolist() == [2, 0, 0] and count.tolist() == [3]


def test_in_top_k_counts_ties_and_refuses_targets_outside():
    predictions = torch.tensor([[0.1, 0.5, 0.5, 0.2], [0.4, 0.3, 0.2, 0.1], [1.0, 0.0, 0.0, 0.0]])
    targets = ints([2, 2, 7])
    assert run("InTopK", [predictions, targets], dict(k=1)).tolist() == [1, 0, 0]
    assert run("InTopK", [predictions, targets], dict(k=3)).tolist() == [1, 1, 0]
    assert run("InTopK", [predictions, targets], dict(k=9)).dtype == torch.uint8


def test_count_bins_as_torch_histc():
    x = torch.tensor([[-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 0.99]])
    up = run("Count", [x], dict(min=-1.0, max=1.0, nbins=4, discrete=True))
    assert up.tolist() == [[1, 1, 2, 3]] and up.dtype == torch.int32   # 2.0 outside, 1.0 in the last bin
    down = run("Count", [x], dict(min=1.0, max=-1.0, nbins=4, discrete=True))
    assert down.tolist() == [[3, 2, 1, 1]]
    edges = run("Count", [x], dict(min=-1.0, max=1.0, nbins=4, discrete=False))
    assert edges.tolist() == [[1, 1, 2, 2]]   # not discrete: 1.0 (the last edge) is outside


def test_moments_from_sufficient_statistics_and_normalized_moments():
    """tf.nn.moments as the parser writes it: the mean and variance of x over axis 1."""
    x, shift = torch.randn(2, 5, 3), torch.randn(2, 1, 3)
    sums, squares = run("SufficientStatistics", [x, shift], dict(axis=[1]), n_tops=2)
    close(sums, (x - shift).sum(1, keepdim=True))
    close(squares, ((x - shift) ** 2).sum(1, keepdim=True))
    mean, var = run("NormalizedMoments", [sums, squares, shift], dict(counts=5.0), n_tops=2)
    close(mean, x.mean(1, keepdim=True))
    close(var, x.var(1, unbiased=False, keepdim=True), tol=1e-4)


def test_zero_fraction_per_sample():
    """A 0-d top (the parser's) holds one sample's fraction; a batch gives one per sample."""
    x = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])
    assert run("ZeroFraction", [x]).shape == () and float(run("ZeroFraction", [x])) == 0.75
    batch = [torch.cat([x, torch.ones_like(x)])]
    assert run("ZeroFraction", [x], batch=batch).tolist() == [0.75, 0.0]


# ---- one-line errors ------------------------------------------------------------------------
X = torch.randn(3, 2)
ERRORS = [
    ("SegmentReduce", [X, ints([0, 1, 1])], dict(method="AVG"), 1, None, "unsupported method 'AVG'"),
    ("SegmentReduce", [X, ints([0, 1, -1])], {}, 1, [[2, 2]], "must end with a non-negative id"),
    ("SegmentReduce", [X], {}, 1, [[2, 2]], "takes 2 inputs"),
    ("EmbeddingLookupSparse", [X, ints([0, 0]), ints([0, 1]), torch.ones(2)], dict(combiner="MAX"), 1, [[1, 2]],
     "unsupported combiner 'MAX'"),
    ("EmbeddingLookupSparse", [X, ints([0, 0]), ints([0, 1]), torch.ones(2)], dict(combiner="SUM", max_norm=1.5),
     1, [[1, 2]], "max_norm 1.5 is not supported"),
    ("EmbeddingLookupSparse", [X, ints([0, 0]), ints([0, 3]), torch.ones(2)], dict(combiner="SUM"), 1, [[1, 2]],
     r"ids must lie in \[0, 3\)"),
    ("EmbeddingLookupSparse", [X, ints([1, 0]), ints([0, 1]), torch.ones(2)], dict(combiner="SUM"), 1, [[2, 2]],
     "the indices must ascend"),
    ("AccidentalHits", [ints([1, 2]), ints([2])], {}, 3, [[2], [2], [1]], "true classes must be 2-D"),
    ("AccidentalHits", [ints([[1, 2]]), ints([2])], {}, 2, [[2], [2]], "needs three tops"),
    ("InTopK", [X, ints([0, 1, 1])], dict(k=-1), 1, None, "k must be at least 0"),
    ("InTopK", [X, ints([0, 1])], dict(k=1), 1, None, "one target per row"),
    ("Count", [X], dict(min=1.0, max=1.0, nbins=2), 1, None, "min and max must differ"),
    ("Count", [X], dict(min=0.0, max=1.0, nbins=0), 1, None, "nbins must be at least 1"),
    ("Count", [X], dict(min=0.0, max=1.0, nbins=2, discrete="maybe"), 1, None, "discrete must be true or false"),
    ("SufficientStatistics", [X, X], dict(axis=[2]), 2, None, "axis"),
    ("SufficientStatistics", [X, torch.randn(2, 3)], dict(axis=[1]), 2, None, "do not broadcast"),
    ("SufficientStatistics", [X, X], dict(axis=[1]), 1, None, "needs two tops"),
    ("NormalizedMoments", [X, X, X], dict(counts=0.5), 2, None, "counts must be a number of at least 1"),
    ("NormalizedMoments", [X, X], dict(counts=2.0), 2, None, "takes 3 inputs"),
    ("ZeroFraction", [X, X], {}, 1, None, "takes 1 inputs"),
]


@pytest.mark.parametrize("optype,inputs,params,n_tops,top_shapes,message", ERRORS)
def test_one_line_errors(optype, inputs, params, n_tops, top_shapes, message):
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\).*{message}") as e:
        run(optype, inputs, params, n_tops=n_tops, top_shapes=top_shapes)
    assert "\n" not in str(e.value)


BAD_PARAMS = [
    ("segment_reduce", "sum_sorted", "method", "AVG", "unsupported method 'AVG'"),
    ("embedding_lookup_sparse", "mean", "combiner", "MAX", "unsupported combiner 'MAX'"),
    ("embedding_lookup_sparse", "sum", "max_norm", "2.0", "max_norm 2.0 is not supported"),
    ("in_top_k", "in_top_2", "k", "-3", "k must be at least 0"),
    ("count", "bins8", "nbins", "0", "nbins must be at least 1"),
    ("sufficient_statistics", "both_axes", "axis", "[1,5]", "axis"),
    ("normalized_moments", "given", "counts", "0.0", "counts must be a number of at least 1"),
]


@pytest.mark.parametrize("case, layer, key, value, message", BAD_PARAMS)
def test_bad_params_stop_npuopt_with_one_line(tmp_path, case, layer, key, value, message):
    """Through `npuopt --cfg` (in this process): one error line naming the layer, exit 1, no
    traceback, nothing written."""
    assert_op_test_edit_stops_npuopt(tmp_path, case, layer, key, value, message, calibration_batch_size=1)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The op tests embedding_lookup_sparse and sufficient_statistics quantized by npuopt."""
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    out = tmp_path_factory.mktemp("tables")
    for case in ("embedding_lookup_sparse", "sufficient_statistics"):
        OptMaster(load_config(str(REPO / "op_tests" / case / "opt.cfg"), {"output_dir": str(out)})).run()
    return out


@pytest.mark.parametrize("case, layer, key, value, message", [
    ("embedding_lookup_sparse", "sqrtn", "combiner", "MAX", "unsupported combiner 'MAX'"),
    ("embedding_lookup_sparse", "sqrtn", "scale_value", "[3]", "scale_value must hold 2 multipliers"),
    ("sufficient_statistics", "both_axes", "scale_value", "[1,2]", "scale_value must hold 4 multipliers"),
])
def test_npuopt_run_bad_params_are_one_line(quantized, tmp_path, case, layer, key, value, message):
    """npuopt-run on a quantized IR with a bad param: one error line naming the layer, nothing written."""
    ir = tmp_path / f"{case}_o.txt"
    shutil.copyfile(quantized / f"{case}_o.txt", ir)
    shutil.copyfile(quantized / f"{case}_o.bin", ir.with_suffix(".bin"))
    edit_ir(ir, layer, key, value)
    folder = REPO / "op_tests" / case
    inputs = [a for p in sorted(folder.glob("in*.npy")) for a in ("--input", str(p))]
    result = subprocess.run([sys.executable, "-m", "npuopt_run.cli", str(ir), *inputs, "-o", str(tmp_path / "o.npz")],
                            capture_output=True, text=True)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("npuopt-run: error:") and f"layer '{layer}'" in lines[0] and message in lines[0]
    assert not (tmp_path / "o.npz").exists()


def test_segment_rows_follow_the_ids_within_the_irs_bound():
    """Ids the data choose: fewer segments than the IR's bound, and a batch run as one."""
    from npuopt.errors import GraphError
    b = GraphBuilder("seg")
    b.input("x", [3, 2], torch.zeros(3, 2))
    b.input("ids", [3], torch.zeros(3, dtype=torch.int32), Dtype.INT32)
    graph = b.build(b.layer("SegmentReduce", "op", ["x", "ids"], dict(method="SUM"), top_shapes=[[3, 2]]))
    assert graph.forward([D, ints([0, 0, 1])])[0].tolist() == [[4.0, -2.0], [5.0, 6.0]]
    with pytest.raises(GraphError, match=r"computed shape \[5, 2\] .* exceeds the IR's \[3, 2\]"):
        graph.forward([D, ints([0, 0, 4])])
