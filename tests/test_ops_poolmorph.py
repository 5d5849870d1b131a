"""Dilation, Erosion, MaxPoolingWithArgMax, MaxUnpool, UpsampleByIndex, FractionalPool and
Meshgrid: float forwards against references written from the definitions (TensorFlow's
morphology formulas, PyTorch's pooling indices and unpooling, NumPy's meshgrid), the
FractionalPool boundaries the tool chain draws, and the one-line errors of bad params
(in process, and through `npuopt` and `npuopt-run` as a user runs them)."""
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import npuopt.ops  # noqa: F401
from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from npuopt.ops._pooling_sequences import MT19937, boundaries

from conftest import REPO, assert_one_line_error, edit_ir, run_in_process, start_npuopt
from test_ops_float import close, nhwc
from test_refrun import run_cli

OP_TESTS = REPO / "op_tests"


def run(optype, inputs, params, constants=None, n_tops=1, top_shapes=None):
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x) for i, x in enumerate(inputs)]
    tops = b.layer(optype, "op", names, params, constants, n_tops=n_tops, top_shapes=top_shapes)
    outs = b.build(tops).forward(list(inputs))
    return outs if n_tops > 1 else outs[0]


def window(k, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0)):
    return dict(kernel_y=k[0], kernel_x=k[1], stride_y=stride[0], stride_x=stride[1], dilation_y=dilation[0],
                dilation_x=dilation[1], pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3])


# ---- Dilation / Erosion ----------------------------------------------------------------
def morphology_reference(x, w, p, erosion):
    """TensorFlow's definitions tap by tap (NHWC x, w [kh, kw, C]): dilation2d's max of
    x[y*s + i*d] + w[i, j]; erosion2d's min of x[y*s + i*d] - w[kh-1-i, kw-1-j]; taps
    outside the input never count."""
    n, h, wd, c = x.shape
    kh, kw = w.shape[:2]
    oh = (h + p["pad_top"] + p["pad_bottom"] - p["dilation_y"] * (kh - 1) - 1) // p["stride_y"] + 1
    ow = (wd + p["pad_left"] + p["pad_right"] - p["dilation_x"] * (kw - 1) - 1) // p["stride_x"] + 1
    out = np.zeros((n, oh, ow, c))
    for oy in range(oh):
        for ox in range(ow):
            vals = []
            for i in range(kh):
                for j in range(kw):
                    r = oy * p["stride_y"] - p["pad_top"] + i * p["dilation_y"]
                    q = ox * p["stride_x"] - p["pad_left"] + j * p["dilation_x"]
                    if 0 <= r < h and 0 <= q < wd:
                        vals.append(x[:, r, q] - w[kh - 1 - i, kw - 1 - j] if erosion else x[:, r, q] + w[i, j])
            out[:, oy, ox] = np.min(vals, 0) if erosion else np.max(vals, 0)
    return torch.from_numpy(out.astype(np.float32))


@pytest.mark.parametrize("kind", ["Dilation", "Erosion"])
@pytest.mark.parametrize("k, stride, dilation, pads", [((3, 2), (1, 2), (2, 1), (2, 2, 0, 1)),
                                                       ((2, 3), (2, 1), (1, 2), (1, 0, 2, 2)),
                                                       ((1, 1), (1, 1), (1, 1), (0, 0, 0, 0))])
def test_morphology_against_the_definition(kind, k, stride, dilation, pads):
    x = torch.randn(2, 7, 8, 3)
    w = torch.randn(3, k[0], k[1], 1)
    p = window(k, stride, dilation, pads)
    got = run(kind, [x], p, {"weights": w})
    want = morphology_reference(x.numpy(), w[..., 0].permute(1, 2, 0).numpy(), p, kind == "Erosion")
    close(got, want)


# ---- MaxPoolingWithArgMax, MaxUnpool, UpsampleByIndex ------------------------------------------
def argmax_params(k, flatten, storage_order=0, ceil_mode=False, **kw):
    return dict(window(k, **kw), flatten_dim=flatten, storage_order=storage_order, ceil_mode=ceil_mode)


def test_argmax_indices_are_pytorchs():
    """Without pads, HW indices are max_pool2d's (ties: the first in the window), NCHW ones
    ONNX MaxPool's (the whole tensor's), HWC and NHWC count channels last; storage_order 1
    is column-major."""
    x = torch.randint(-3, 3, (2, 3, 6, 7)).float()   # many ties
    values, idx = F.max_pool2d(x, (3, 2), (2, 1), return_indices=True)
    n, c, h, w = x.shape
    tops = {f: run("MaxPoolingWithArgMax", [nhwc(x)], argmax_params((3, 2), f, stride=(2, 1)), n_tops=2)
            for f in ("HW", "HWC", "NHWC", "NCHW")}
    close(tops["HW"][0], nhwc(values))
    assert torch.equal(tops["HW"][1], nhwc(idx).int())
    batch = torch.arange(n).reshape(-1, 1, 1, 1) * (h * w * c)
    channel = torch.arange(c).reshape(1, -1, 1, 1)
    assert torch.equal(tops["NCHW"][1], nhwc(idx + batch + channel * h * w).int())
    assert torch.equal(tops["HWC"][1], nhwc(idx * c + channel).int())
    assert torch.equal(tops["NHWC"][1], nhwc(idx * c + channel + batch).int())
    _, col = run("MaxPoolingWithArgMax", [nhwc(x)], argmax_params((3, 2), "HW", 1, stride=(2, 1)), n_tops=2)
    assert torch.equal(col, nhwc((idx % w) * h + idx // w).int())


def test_argmax_pads_ceil_mode_and_an_empty_window():
    """Pads and the ceil-mode overhang never win; a window of padding alone gives 0 and index 0."""
    x = torch.randn(1, 2, 5, 5) - 10.0
    p = argmax_params((2, 2), "HW", ceil_mode=True, stride=(2, 2), pads=(2, 0, 0, 1))
    values, idx = run("MaxPoolingWithArgMax", [nhwc(x)], p, n_tops=2)
    assert values.shape == (1, 4, 3, 2)
    assert torch.equal(values[0, 0], torch.zeros(3, 2)) and torch.equal(idx[0, 0], torch.zeros(3, 2, dtype=torch.int32))
    want, want_idx = F.max_pool2d(x, 2, 2, return_indices=True)   # our rows 1-2, columns 0-1: no padding
    close(values[:, 1:3, :2], nhwc(want))
    assert torch.equal(idx[:, 1:3, :2], nhwc(want_idx).int())


@pytest.mark.parametrize("flatten", ["HW", "NCHW"])
def test_maxunpool_is_pytorchs(flatten):
    x = torch.randn(2, 3, 6, 8)
    pooled, idx = F.max_pool2d(x, 2, 2, return_indices=True)
    index = nhwc(idx)
    if flatten == "NCHW":
        n, c, h, w = x.shape
        index = index + nhwc(torch.arange(n).reshape(-1, 1, 1, 1) * c * h * w + torch.arange(c).reshape(1, -1, 1, 1)
                             * h * w)
    got = run("MaxUnpool", [nhwc(pooled), index.int()], dict(output_shape=[1, 6, 8, 3], flatten_dim=flatten),
              top_shapes=[[1, 6, 8, 3]])
    close(got, nhwc(F.max_unpool2d(pooled, idx, 2, 2)))


def test_upsample_by_index_drops_indices_past_the_end_and_keeps_the_last_of_a_position():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0]).reshape(1, 2, 2, 1)
    index = torch.tensor([5, 5, 40, -1], dtype=torch.int32).reshape(1, 2, 2, 1)
    got = run("UpsampleByIndex", [values, index], dict(flatten_dim="NHWC", shape=[1, 4, 4, 1]),
              top_shapes=[[1, 4, 4, 1]])
    want = torch.zeros(16)
    want[5], want[15] = 2.0, 4.0
    close(got, want.reshape(1, 4, 4, 1))


# ---- FractionalPool ---------------------------------------------------------------------
def test_mt19937_is_the_standard_generator():
    g = MT19937(5489)
    assert [g() for _ in range(3)] == [3499211612, 581869302, 3890346734]
    draws = [MT19937(42)() for _ in range(2)]
    assert draws[0] == draws[1] == 1608637542


@pytest.mark.parametrize("pseudo", [False, True])
def test_fractional_boundaries(pseudo):
    """What the tool chain draws for these seeds (its own generator's outputs); every
    step k or k + 1 for random sequences, within [k - 1, k + 2] for pseudo-random ones."""
    known = {False: ((9, 6, 87654321), [0, 2, 4, 5, 6, 8, 9]), True: ((9, 4, 7), [0, 2, 4, 7, 9])}
    (length, count, seed), want = known[pseudo]
    assert boundaries(length, count, pseudo, seed) == want
    for length, count, seed in ((17, 5, 3), (30, 30, 1), (50, 7, 99)):
        b = boundaries(length, count, pseudo, seed)
        k = length // count
        steps = np.diff(b)
        assert b[0] == 0 and b[-1] == length and len(b) == count + 1
        assert steps.min() >= (max(k - 1, 1) if pseudo else k) and steps.max() <= (k + 2 if pseudo else k + 1)


@pytest.mark.parametrize("method", ["MAX", "AVG"])
@pytest.mark.parametrize("overlap", [False, True])
def test_fractional_pool_windows(method, overlap):
    x = torch.randn(2, 9, 11, 3)
    outs = run("FractionalPool", [x], dict(method=method, pseudo=True, overlap=overlap, seed=5), n_tops=3,
               top_shapes=[[1, 5, 6, 3], [6], [7]])
    rows, cols = boundaries(9, 5, True, 5), boundaries(11, 6, True, 5)
    assert outs[1].tolist() == rows and outs[2].tolist() == cols and outs[1].dtype == torch.int32
    for i in range(5):
        for j in range(6):
            block = x[:, rows[i]:min(rows[i + 1] + overlap, 9), cols[j]:min(cols[j + 1] + overlap, 11)]
            want = block.amax((1, 2)) if method == "MAX" else block.double().mean((1, 2)).float()
            close(outs[0][:, i, j], want)


def test_fractional_seed_zero_takes_the_default_seed():
    x = torch.randn(1, 9, 11, 3)
    shapes = [[1, 6, 7, 3], [7], [8]]
    zero = run("FractionalPool", [x], dict(method="MAX", pseudo=False, overlap=False, seed=0), n_tops=3,
               top_shapes=shapes)
    default = run("FractionalPool", [x], dict(method="MAX", pseudo=False, overlap=False, seed=5489), n_tops=3,
                  top_shapes=shapes)
    assert all(torch.equal(a, b) for a, b in zip(zero, default))


# ---- Meshgrid ------------------------------------------------------------------------------
@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
def test_meshgrid_is_numpys(indexing, sparse):
    x, y = torch.randn(3), torch.arange(4, dtype=torch.int32)
    got = run("Meshgrid", [x, y], dict(indexing=indexing, sparse=sparse, copy=True), n_tops=2)
    want = np.meshgrid(x.numpy(), y.numpy(), indexing=indexing, sparse=sparse)
    for g, w in zip(got, want):
        assert g.dtype == torch.from_numpy(w).dtype
        np.testing.assert_array_equal(g.numpy(), w)


# ---- one-line errors ------------------------------------------------------------------------
W32 = {"weights": torch.randn(3, 3, 2, 1)}
X = torch.randn(1, 6, 7, 3)
IDX = torch.zeros(1, 3, 3, 3, dtype=torch.int32)
ERRORS = [
    ("Dilation", [X], window((3, 3)), W32, {}, "weights [3, 3, 2, 1] do not fit a 3x3 kernel"),
    ("Erosion", [X], window((3, 2), stride=(0, 1)), W32, {}, "stride_y must be a positive integer, got 0"),
    ("Dilation", [X], window((3, 2), dilation=(4, 1)), W32, {}, "does not fit the padded 6x7 input"),
    ("Erosion", [X], window((3, 2), pads=(0, -1, 0, 0)), W32, {}, "pad_bottom must be a non-negative integer"),
    ("Dilation", [torch.randn(1, 6, 3)], window((3, 2)), W32, {}, "takes an NHWC input, got 3-D"),
    ("MaxPoolingWithArgMax", [X], argmax_params((2, 2), "CHW"), None, dict(n_tops=2), "unsupported flatten_dim 'CHW'"),
    ("MaxPoolingWithArgMax", [X], argmax_params((2, 2), "HW", 2), None, dict(n_tops=2),
     "storage_order must be 0 or 1, got 2"),
    ("MaxPoolingWithArgMax", [X], argmax_params((2, 2), "HW", ceil_mode="yes"), None, dict(n_tops=2),
     "ceil_mode must be true or false"),
    ("MaxPoolingWithArgMax", [X], argmax_params((2, 2), "HW"), None, {}, "needs two tops (values, indices), has 1"),
    ("MaxPoolingWithArgMax", [X], argmax_params((8, 2), "HW"), None, dict(n_tops=2), "window does not fit"),
    ("MaxUnpool", [torch.randn(1, 3, 3, 3), IDX], dict(output_shape=[1, 6, 6, 4], flatten_dim="NCHW"), None,
     dict(top_shapes=[[1, 6, 6, 4]]), "the top has 4 channels, the values 3"),
    ("MaxUnpool", [torch.randn(1, 3, 3, 3), IDX], dict(output_shape=[1, 6, 7, 3], flatten_dim="NCHW"), None,
     dict(top_shapes=[[1, 6, 6, 3]]), "output_shape [1, 6, 7, 3] differs from the top's shape [1, 6, 6, 3]"),
    ("MaxUnpool", [torch.randn(1, 3, 3, 3), IDX[:, :2]], dict(output_shape=[1, 6, 6, 3], flatten_dim="NCHW"), None,
     dict(top_shapes=[[1, 6, 6, 3]]), "indices [1, 2, 3, 3] and values [1, 3, 3, 3] differ in shape"),
    ("UpsampleByIndex", [torch.randn(1, 3, 3, 3), IDX - 200], dict(flatten_dim="NHWC"), None,
     dict(top_shapes=[[1, 6, 6, 3]]), "index -200 lies before the start of a top of 108 elements"),
    ("UpsampleByIndex", [torch.randn(1, 3, 3, 3), IDX], dict(flatten_dim="WH"), None,
     dict(top_shapes=[[1, 6, 6, 3]]), "unsupported flatten_dim 'WH'"),
    ("UpsampleByIndex", [torch.randn(1, 3, 3, 3)], dict(flatten_dim="HW"), None,
     dict(top_shapes=[[1, 6, 6, 3]]), "takes 2 inputs (values, indices), the IR gives 1"),
    ("FractionalPool", [X], dict(method="MIN", seed=1), None, dict(n_tops=3, top_shapes=[[1, 4, 5, 3], [5], [6]]),
     "unsupported method 'MIN'"),
    ("FractionalPool", [X], dict(method="MAX", seed=1), None, dict(n_tops=3, top_shapes=[[1, 7, 5, 3], [8], [6]]),
     "the top's height 7 must lie in [1, 6]"),
    ("FractionalPool", [X], dict(method="MAX", seed=1), None, dict(n_tops=3, top_shapes=[[1, 4, 5, 3], [5], [5]]),
     "top 2 holds the 6 width boundaries, the IR says [5]"),
    ("FractionalPool", [X], dict(method="MAX", seed=1.5), None, dict(n_tops=3, top_shapes=[[1, 4, 5, 3], [5], [6]]),
     "seed must be an integer, got 1.5"),
    ("FractionalPool", [X], dict(method="AVG", seed=1, pseudo="maybe"), None,
     dict(n_tops=3, top_shapes=[[1, 4, 5, 3], [5], [6]]), "pseudo must be true or false"),
    ("FractionalPool", [X], dict(method="AVG", seed=1), None, dict(top_shapes=[[1, 4, 5, 3]]),
     "needs three tops (values, row and column boundaries), has 1"),
    ("Meshgrid", [torch.randn(3), torch.randn(4)], dict(indexing="xz"), None, dict(n_tops=2),
     "unsupported indexing 'xz'"),
    ("Meshgrid", [torch.randn(3), torch.randn(4)], dict(indexing="xy", sparse=2), None, dict(n_tops=2),
     "sparse must be true or false, got 2"),
    ("Meshgrid", [torch.randn(3), torch.randn(4), torch.randn(2)], dict(indexing="xy"), None, dict(n_tops=2),
     "takes 2 inputs and gives 2 tops, the IR has 3 and 2"),
    ("Meshgrid", [torch.randn(3), torch.randn(2, 4)], dict(indexing="ij"), None, dict(n_tops=2),
     "takes 1-D inputs, got [3] and [2, 4]"),
]


@pytest.mark.parametrize("optype, inputs, params, constants, extra, message", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_bad_params_are_one_line_errors(optype, inputs, params, constants, extra, message):
    one_line_ir_error(optype, message, lambda: run(optype, inputs, params, constants, **extra))


def one_line_ir_error(optype, message, forward):
    """forward() raises one IRError line naming layer 'op' of `optype` and holding `message`."""
    with pytest.raises(IRError) as e:
        forward()
    assert str(e.value).startswith(f"layer 'op' ({optype}): ") and message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


# op test, layer, param, bad value, the error's words: through `npuopt --cfg`
CLI_ERRORS = [
    ("morphology", "dilation", "kernel_x", "3", "layer 'dilation' (Dilation): weights [4, 3, 2, 1] do not fit a 3x3"),
    ("morphology", "erosion_padded", "dilation_x", "0", "layer 'erosion_padded' (Erosion): dilation_x must be"),
    ("argmax_pool", "hwc", "flatten_dim", "CHWN", "layer 'hwc' (MaxPoolingWithArgMax): unsupported flatten_dim"),
    ("unpool", "unpool_hw", "output_shape", "[1,6,8,3]", "layer 'unpool_hw' (MaxUnpool): output_shape"),
    ("unpool", "upsample_x2", "flatten_dim", "WHC", "layer 'upsample_x2' (UpsampleByIndex): unsupported flatten_dim"),
    ("fractional_pool", "avg_pseudo", "method", "MEDIAN", "layer 'avg_pseudo' (FractionalPool): unsupported method"),
    ("meshgrid", "ij", "indexing", "ji", "layer 'ij' (Meshgrid): unsupported indexing 'ji'"),
]


def broken_op_test(root, case, layer, key, value):
    """A copy of op test `case` with `key` of `layer` set to `value`; its folder."""
    folder = root / case
    shutil.copytree(OP_TESTS / case, folder, ignore=shutil.ignore_patterns("work"))
    edit_ir(folder / f"{case}.txt", layer, key, value)
    return folder


def npuopt_rejects(case, layer, key, value, words, tmp_path):
    """`npuopt --cfg` (in process) on op test `case` with `key` of `layer` set to `value`: exit
    1, one error line holding `words`, no traceback, nothing written."""
    folder = broken_op_test(tmp_path, case, layer, key, value)
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={folder / 'work'}")
    errors = [line for line in result.stderr.splitlines() if line.startswith("npuopt: error:")]
    assert result.exit_code == 1 and errors == [result.stderr.rstrip("\n").splitlines()[-1]], result.stderr
    assert words in errors[0] and "Traceback" not in result.output, result.output
    assert not (folder / "work").exists()


@pytest.mark.parametrize("case, layer, key, value, words", CLI_ERRORS,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CLI_ERRORS])
def test_bad_params_through_npuopt(case, layer, key, value, words, tmp_path):
    npuopt_rejects(case, layer, key, value, words, tmp_path)


def test_bad_param_as_a_user_runs_npuopt(tmp_path):
    """The same through `python -m npuopt` in a process of its own."""
    case, layer, key, value, words = CLI_ERRORS[-1]
    folder = broken_op_test(tmp_path, case, layer, key, value)
    assert_one_line_error(start_npuopt("--cfg", "opt.cfg", cwd=folder).result(), words, only_line=False)
    assert not (folder / "work").exists()


def quantized_op_test(folder, out):
    """The op test's quantized IR (written into `out`) and its inputs."""
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={out}")
    assert result.exit_code == 0, result.output
    return out / f"{folder.name}_o.txt", sorted(folder.glob("in*.npy"))


def npuopt_run_rejects(breaks, tmp_path, capsys):
    """npuopt-run on op tests' quantized IRs whose params were broken after quantizing
    (`breaks`: case, layer, param, value, the error's words): one error line naming the layer."""
    for case, layer, key, value, words in breaks:
        txt, inputs = quantized_op_test(OP_TESTS / case, tmp_path / case)
        edit_ir(txt, layer, key, value)
        capsys.readouterr()
        argv = [str(txt), *[a for x in inputs for a in ("--input", str(x))], "-o", str(tmp_path / "o.npz")]
        assert run_cli(argv) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("npuopt-run: error: ") and words in lines[0], lines
        assert f"layer '{layer}'" in lines[0]


def test_npuopt_run_bad_params_are_one_line(tmp_path, capsys):
    npuopt_run_rejects([("argmax_pool", "hw", "storage_order", "3", "storage_order must be 0 or 1"),
                        ("morphology", "erosion", "scale_value", "[1,2]", "scale_value must be"),
                        ("unpool", "unpool_nhwc", "flatten_dim", "HCW", "flatten_dim 'HCW'"),
                        ("fractional_pool", "max_random", "method", "SUM", "method 'SUM'"),
                        ("meshgrid", "xy", "indexing", "yx", "indexing")], tmp_path, capsys)
