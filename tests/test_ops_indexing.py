"""The indexing layers (ScatterElements, ScatterND, OneHot, NonZero, Unique, Compress,
Filter, Shape, Dummy): float forwards against NumPy references, their one-line IRErrors
(also through `npuopt --cfg`: nothing written), and the shapes that follow the data
(registry.has_data_dependent_shapes): bounds in npuopt and npuopt-run, a batch run as one,
a plugin's layer type declaring it."""
import numpy as np
import pytest
import torch

from npuopt.errors import GraphError, IRError
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.registry import OP_FORWARDS, has_data_dependent_shapes, op_register, register_optype
from test_ops_float import close, run

from conftest import REPO, assert_edit_stops_npuopt_run, assert_op_test_edit_stops_npuopt

torch.manual_seed(0)
REDUCE = {"ADD": np.add, "MUL": np.multiply, "MAX": np.maximum, "MIN": np.minimum}


def ints(values):
    return torch.tensor(values, dtype=torch.int32)


# ---- float forwards -----------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["NONE", "ADD", "MUL", "MAX", "MIN"])
def test_scatter_elements_matches_numpy(reduction):
    """Indices along axis 1 that repeat, one negative (counted from the end) and one past
    the end (clamped to the last row, as the tool chain does)."""
    data, updates = torch.randn(2, 4, 3), torch.randn(2, 2, 3)
    idx = ints([[[0, 3, -1], [2, 9, 1]], [[1, 1, 0], [3, 2, 2]]])
    if reduction == "NONE":  # distinct indices per column: the order of writes does not matter
        idx = ints([[[0, 3, -1], [2, 1, 1]], [[1, 0, 0], [3, 2, 2]]])
    got = run("ScatterElements", [data, idx, updates], dict(axis=1, reduction=reduction))
    want = data.numpy().copy()
    k = np.clip(np.where(idx.numpy() < 0, idx.numpy() + 4, idx.numpy()), 0, 3)
    for (n, i, c), row in np.ndenumerate(k):
        v = updates.numpy()[n, i, c]
        want[n, row, c] = v if reduction == "NONE" else REDUCE[reduction](want[n, row, c], v)
    close(got, torch.from_numpy(want))


@pytest.mark.parametrize("reduction", ["NONE", "ADD", "MUL", "MAX", "MIN"])
def test_scatter_nd_applies_tuples_in_order(reduction):
    data = torch.randn(4, 3, 2)
    idx = ints([[1, 2], [0, 0], [1, 2], [-1, 5]])  # a repeat, a negative one, one past the end
    updates = torch.randn(4, 2)
    got = run("ScatterND", [data, idx, updates], dict(reduction=reduction))
    want = data.numpy().copy()
    for (a, b), v in zip([(1, 2), (0, 0), (1, 2), (3, 2)], updates.numpy()):
        want[a, b] = v if reduction == "NONE" else REDUCE[reduction](want[a, b], v)
    close(got, torch.from_numpy(want))


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2, -3])
def test_onehot_places_the_classes_as_the_tool_chain(axis):
    idx = ints([[0, 2, 5], [1, -1, 3]])
    got = run("OneHot", [idx], dict(depth=4, axis=axis, values=[-1.0, 2.0]))
    hot = (idx.numpy()[..., None] == np.arange(4)).astype(np.float32)   # index 5 and -1: off everywhere
    if axis in (0, 1):
        hot = np.moveaxis(hot, -1, axis)
    elif axis == -3:   # below -1: classes last, the input's last axis at axis + rank + 1 = 0
        hot = np.moveaxis(hot, 1, 0)
    close(got, torch.from_numpy(hot * 3.0 - 1.0))
    ints_top = run("OneHot", [idx], dict(depth=4, axis=-1, values=[0, 7]))
    assert ints_top.dtype == torch.int32 and ints_top.tolist()[0][1] == [0, 0, 7, 0]


def test_nonzero_and_its_count():
    x = torch.tensor([[0.0, 1.5, 0.0], [-2.0, 0.0, 3.0]])
    coords, count = run("NonZero", [x], n_tops=2)
    assert coords.tolist() == [list(c) for c in np.nonzero(x.numpy())] and count.tolist() == [3]


@pytest.mark.parametrize("keep_sorted", [True, False])
@pytest.mark.parametrize("axis", [None, 1])
def test_unique_matches_numpy(keep_sorted, axis):
    x = torch.tensor([[[2.0, 1.0], [0.5, 2.0], [2.0, 1.0], [-1.0, 0.5]]])
    params = dict(sorted=keep_sorted) if axis is None else dict(sorted=keep_sorted, axis=axis)
    y, first, inverse, counts = run("Unique", [x], params, n_tops=4)
    want_y, want_first, want_inverse, want_counts = np.unique(x.numpy(), True, True, True, axis=axis)
    if not keep_sorted:
        order = np.argsort(want_first)
        want_y = np.take(want_y, order, axis=0 if axis is None else axis)
        want_inverse = np.argsort(order)[want_inverse.reshape(-1)]
        want_first, want_counts = want_first[order], want_counts[order]
    close(y, torch.from_numpy(want_y))
    assert first.tolist() == want_first.tolist() and counts.tolist() == want_counts.tolist()
    assert inverse.tolist() == want_inverse.reshape(-1).tolist()


def test_compress_filter_shape_dummy():
    x = torch.randn(1, 5, 2)
    close(run("Compress", [x, torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.uint8)], dict(axis=1)),
          torch.from_numpy(np.compress([1, 0, 1, 1, 0], x.numpy(), axis=1)))
    picked, count = run("Filter", [x[0], torch.tensor([0, 1, 0, 0, 1], dtype=torch.uint8)], dict(num=1, axis=0),
                        n_tops=2)
    close(picked, torch.cat([x[0][[1, 4]], torch.zeros(3, 2)]))
    assert count.dim() == 0 and int(count) == 2
    assert run("Shape", [x], dict(start=1, end=3)).tolist() == [5, 2]
    a, b = run("Dummy", [x, x[0]], n_tops=2)
    close(a, x)
    close(b, x[0])


# ---- one-line errors -------------------------------------------------------------------
X = torch.randn(1, 4, 3)
ERRORS = [
    ("ScatterElements", [X, ints([[[0]]]), X], dict(axis=1, reduction="AVG"), 1, "unsupported reduction 'AVG'"),
    ("ScatterElements", [X, ints([[0]]), X], dict(axis=1), 1, r"indices \[1, 1\] do not fit data"),
    ("ScatterElements", [X, ints([[[0]]]), X], dict(axis=3), 1, "axis 3 is out of range"),
    ("ScatterND", [X, ints([[0, 1, 2, 0]]), torch.randn(1)], {}, 1, "do not fit data"),
    ("ScatterND", [X, ints([[0, 1]]), torch.randn(2, 3)], {}, 1, "do not fit data"),
    ("ScatterND", [X, ints([[-2]]), torch.randn(1, 4, 3)], {}, 1, "below -size"),
    ("ScatterND", [X, ints([[0]])], {}, 1, "takes 3 inputs"),
    ("OneHot", [ints([1, 2])], dict(depth=0), 1, "depth must be at least 1"),
    ("OneHot", [ints([1, 2])], dict(depth=3, values=[1.0]), 1, "values must be"),
    ("OneHot", [ints([1, 2])], dict(depth=3, axis=2), 1, "axis 2 is out of range"),
    ("NonZero", [X], {}, 1, "needs two tops"),
    ("Unique", [X], dict(sorted="maybe"), 4, "sorted must be true or false"),
    ("Unique", [X], {}, 2, "needs four tops"),
    ("Compress", [X, torch.ones(2, 2)], dict(axis=1), 1, "must be 1-D"),
    ("Compress", [X, torch.ones(2)], {}, 1, "missing parameter 'axis'"),
    ("Filter", [X, torch.ones(1)], dict(num=2, axis=0), 3, "num=2 needs 3 inputs"),
    ("Filter", [X, torch.ones(5)], dict(num=1, axis=1), 2, "picks 5 slices"),
    ("Shape", [X], dict(start=0), 1, "missing parameter 'end'"),
    ("Shape", [X], dict(start=0.5, end=2), 1, "start must be an integer"),
    ("Dummy", [X, X], {}, 1, "2 inputs for 1 tops"),
]


@pytest.mark.parametrize("optype,inputs,params,n_tops,message", ERRORS)
def test_one_line_errors(optype, inputs, params, n_tops, message):
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\).*{message}") as e:
        run(optype, inputs, params, n_tops=n_tops)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case, layer, key, value, message", [
    ("scatter_nd", "cells_add", "reduction", "AVG", "unsupported reduction 'AVG'"),
    ("shape_onehot", "onehot", "depth", "-2", "depth must be at least 1"),
    ("filter", "filter_rows", "num", "3", "num=3 needs 4 inputs"),
    ("unique", "unique_sorted", "sorted", "sometimes", "sorted must be true or false"),
])
def test_bad_params_stop_npuopt_with_one_line(tmp_path, case, layer, key, value, message):
    """Through `npuopt --cfg` (in this process): one error line naming the layer, exit 1, no
    traceback, nothing written."""
    assert_op_test_edit_stops_npuopt(tmp_path, case, layer, key, value, message)


# ---- shapes that follow the data -------------------------------------------------------
def nonzero_graph(bound: int):
    """x [1, 6] -> NonZero (bounds [2, bound] and [1]) -> Transpose."""
    b = GraphBuilder("nz")
    b.input("x", [1, 6], torch.zeros(1, 6))
    idx, count = b.layer("NonZero", "nz", ["x"], {}, n_tops=2, top_shapes=[[2, bound], [1]])
    return b.build([b.layer("Transpose", "t", [idx], dict(perm=[1, 0]))[0], count])


def test_bounds_not_shapes_and_a_batch_runs_as_one():
    graph = nonzero_graph(6)
    assert graph.data_dependent_tensors() == {"nz_0", "nz_1", "t"}
    assert graph.node("t").outputs[0].ir_shape == (6, 2)   # the builder's bound, through Transpose
    x = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0, 0.0, 4.0]])
    tuples, count = graph.forward([x])
    assert graph.keeps_samples_apart()   # never split: NonZero's first coordinate names the sample
    assert tuples.tolist() == [[0, 1], [0, 3], [1, 0], [1, 5]] and count.tolist() == [4]
    with pytest.raises(GraphError, match=r"'nz' \(NonZero\): computed shape \[2, 6\] .* exceeds the IR's \[2, 3\]"):
        nonzero_graph(3).forward([torch.ones(1, 6)])


def test_npuopt_run_takes_the_bounds_and_the_whole_batch(tmp_path):
    """npuopt-run on the quantized nonzero op test: a batch of 4 in one run (whatever
    --batch-size says) gives npuopt's coordinates over the whole batch."""
    import subprocess
    import sys
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    folder = REPO / "op_tests" / "nonzero"
    OptMaster(load_config(str(folder / "opt.cfg"), {"output_dir": str(tmp_path)})).run()
    ir = tmp_path / "nonzero_o.txt"
    x = np.load(folder / "in0.npy")
    result = subprocess.run([sys.executable, "-m", "npuopt_run.cli", str(ir), "--input", str(folder / "in0.npy"),
                             "-o", str(tmp_path / "out.npz"), "--batch-size", "1"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    graph = read_graph(str(ir))
    want = graph.forward([torch.from_numpy(x)])
    with np.load(tmp_path / "out.npz") as got:
        for t, value in zip(graph.output_tensors, want):
            assert got[t.name].tolist() == value.tolist()
    assert want[0].shape[1] > 24   # more coordinates than one sample's bound: the batch's


def test_a_plugin_layer_type_declares_data_dependent_shapes(tmp_path):
    """A user's op registered with data_dependent_shapes=True: its top is checked as a
    bound, and it survives the IR's round trip."""
    register_optype("KeepPositive")

    @op_register("KeepPositive", "1.0", data_dependent_shapes=True)
    def keep_positive(self, *args):
        x = self.inputs[0].betensor
        self.outputs[0].betensor = x[x > 0]
        return self.outputs[0].betensor

    try:
        assert has_data_dependent_shapes("KeepPositive") and not has_data_dependent_shapes("Transpose")
        b = GraphBuilder("plugin")
        b.input("x", [1, 5], torch.ones(1, 5))
        b.layer("KeepPositive", "keep", ["x"], top_shapes=[[5]])
        write_graph(b.build(["keep"]), str(tmp_path / "plugin.txt"))
        graph = read_graph(str(tmp_path / "plugin.txt"))
        assert graph.forward([torch.tensor([[1.0, -1.0, 2.0, 0.0, 3.0]])])[0].tolist() == [1.0, 2.0, 3.0]
    finally:
        OP_FORWARDS.remove_source(keep_positive.__code__.co_filename)


@pytest.fixture(scope="module")
def quantized_scatter_nd(tmp_path_factory):
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    out = tmp_path_factory.mktemp("scatter_nd")
    OptMaster(load_config(str(REPO / "op_tests" / "scatter_nd" / "opt.cfg"), {"output_dir": str(out)})).run()
    return out / "scatter_nd_o.txt"


@pytest.mark.parametrize("layer, key, value, message", [
    ("cells_add", "reduction", "AVG", "unsupported reduction 'AVG'"),
    ("cells_mul", "shift_value", "[3,1]", "shift_value must hold 3 values"),
])
def test_npuopt_run_bad_params_are_one_line(quantized_scatter_nd, tmp_path, layer, key, value, message):
    """npuopt-run on a quantized IR with a bad param: one error line naming the layer, nothing written."""
    inputs = [REPO / "op_tests" / "scatter_nd" / f"in{i}.npy" for i in range(3)]
    assert_edit_stops_npuopt_run(quantized_scatter_nd, tmp_path, inputs, layer, key, value, message)
