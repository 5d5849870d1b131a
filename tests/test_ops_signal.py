"""The signal, colour, layout and BEV layers (OverlapAdd, RgbToYuv, YuvToRgb, Preprocess,
BatchToSpaceND, QueryRebatch, SlotUpdate): float forwards against NumPy references written
from their definitions (TensorFlow's overlap_and_add and batch_to_space_nd, BEVFormer's
rebatching and slot update, the parser's Preprocess, the tool chain's colour arithmetic on
pixels worked by hand), what their quantize functions write, the shapes QueryRebatch's
lists give, and their one-line errors (in process, through `npuopt --cfg` and through
npuopt-run: nothing written)."""
import re

import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from npuopt.ir.values import parse_value
from test_ops_float import close

from conftest import REPO, assert_edit_stops_npuopt_run, assert_op_test_edit_stops_npuopt

torch.manual_seed(0)


def run(optype, inputs, params=None, n_tops=1, top_shapes=None):
    """One layer (inputs: tensors, their first axis the batch) forwarded; its tops."""
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x) for i, x in enumerate(inputs)]
    tops = b.layer(optype, "op", names, params, n_tops=n_tops, top_shapes=top_shapes)
    outs = b.build(tops).forward(list(inputs))
    return outs if n_tops > 1 else outs[0]


def ints(values):
    return torch.tensor(values, dtype=torch.int32)


# ---- float forwards -----------------------------------------------------------------
@pytest.mark.parametrize("step", [1, 2, 5])
def test_overlap_add_adds_each_frame_at_its_step(step):
    frames = torch.randn(2, 3, 4, 5)
    want = np.zeros((2, 3, 3 * step + 5), np.float32)
    for f in range(4):
        want[..., f * step:f * step + 5] += frames.numpy()[..., f, :]
    close(run("OverlapAdd", [frames], dict(frame_step=step)), torch.from_numpy(want))
    if step == 1:
        close(run("OverlapAdd", [frames], {}), torch.from_numpy(want))   # frame_step's default


def test_batch_to_space_nd_as_tensorflow_defines_it():
    """Output sample n, position (d, h, w) reads batch (od * by * bx + oh * bx + ow) * N' + n
    at (d // bz, h // by, w // bx), od = d % bz and so on; then the crops."""
    x = torch.randn(8, 2, 3, 2, 3)
    got = run("BatchToSpaceND", [x], dict(block_size=[2, 1, 4], crops=[[0, 1], [1, 0], [2, 3]]))
    full = np.zeros((1, 4, 3, 8, 3), np.float32)
    for d, h, w in np.ndindex(4, 3, 8):
        full[0, d, h, w] = x.numpy()[(d % 2) * 4 + w % 4, d // 2, h, w // 4]
    close(got, torch.from_numpy(full[:, 0:3, 1:3, 2:5]))


def test_rgb_to_yuv_on_pixels_worked_by_hand():
    """The tool chain's integer BT709 coefficients, shift 10: Y = floor(218 R + 732 G + 74 B +
    512) / 1024, U and V of the top-left pixel of each 2x2 block (offset 128 * 1024 added)."""
    rgb = torch.zeros(1, 2, 2, 3)
    rgb[0, 0, 0] = torch.tensor([100.0, 50.0, 200.0])
    params = dict(format="I420", bits=8, conversion="SELF", coefficient_shift=10,
                  coefficient=[0, 0, 0, 0, 128, 128, 218, 732, 74, -118, -395, 512, 512, -465, -47])
    got = run("RgbToYuv", [rgb], params)
    y = np.floor(218 * 100 + 732 * 50 + 74 * 200 + 512) / 1024
    u = np.floor(-118 * 100 - 395 * 50 + 512 * 200 + 128 * 1024 + 512) / 1024
    v = np.floor(512 * 100 - 465 * 50 - 47 * 200 + 128 * 1024 + 512) / 1024
    assert got.shape == (1, 6)
    close(got, torch.tensor([[y, 0.5, 0.5, 0.5, u, v]], dtype=torch.float32))


def test_yuv_to_rgb_interpolates_chroma_and_rounds():
    """A 2x4 image: chroma [U0, U1] spread by nearest neighbour ([U0, U0, U1, U1]), the inner columns as
    round((3 left + right) / 4) (odd) and round((left + 3 right) / 4) (even); identity
    matrix at shift 8 with the +128 rounding: R = round((Y * 256 + 128) / 256) and so on."""
    yuv = torch.tensor([[10.0, 20, 30, 40, 50, 60, 70, 80, 100, 200, 7, 9]])
    params = dict(format="I420", bits=8, conversion="SELF", coefficient_shift=8,
                  coefficient=[0, 0, 0, 0, 0, 0, 256, 0, 0, 0, 256, 0, 0, 0, 256])
    got = run("YuvToRgb", [yuv], params, top_shapes=[[1, 2, 4, 3]])
    u = [100, round((3 * 100 + 200) / 4), round((100 + 3 * 200) / 4), 200]
    v = [7, round((3 * 7 + 9) / 4), round((7 + 3 * 9) / 4), 9]
    want = np.stack([np.array([[10, 20, 30, 40], [50, 60, 70, 80]]), np.array([u, u]), np.array([v, v])], axis=-1)
    close(got, torch.from_numpy(np.round((want * 256 + 128) / 256).astype(np.float32))[None])


def test_preprocess_copies_each_input():
    """The parser's definition (ArmPreprocessOp): one top per input, a copy of it."""
    a, c = torch.randn(2, 4, 5), torch.randn(2, 3)
    top_a, top_c = run("Preprocess", [a, c], n_tops=2)
    assert torch.equal(top_a, a) and torch.equal(top_c, c)


def test_query_rebatch_and_slot_update_as_bevformer():
    """queries_rebatch[j, i, :len(index_i)] = query[j, index_i]; slots[j, index_i] +=
    queries[j, i, :len(index_i)] (BEVFormer's spatial cross-attention)."""
    query = torch.randn(2, 6, 4)
    lists = [[0, 2, 5], [1, 3], [4, 0, 1, 2]]
    b = GraphBuilder("bev")
    b.input("query", [2, 6, 4], query)
    names = [b.layer("Constant", f"list{i}", [], {}, {"weights": ints(v)})[0] for i, v in enumerate(lists)]
    rebatched = b.layer("QueryRebatch", "rebatch", ["query"] + names, {}, top_shapes=[[2, 3, 6, 4]])
    slots = b.layer("SlotUpdate", "update", rebatched + names, {}, top_shapes=[[2, 6, 4]])
    got_rebatched, got_slots = b.build(rebatched + slots).forward([query])
    want_rebatched = np.zeros((2, 3, 4, 4), np.float32)   # the longest list: 4 rows, not the IR's 6
    want_slots = np.zeros((2, 6, 4), np.float32)
    for j in range(2):
        for i, index in enumerate(lists):
            want_rebatched[j, i, :len(index)] = query.numpy()[j, index]
            want_slots[j, index] += want_rebatched[j, i, :len(index)]
    close(got_rebatched, torch.from_numpy(want_rebatched))
    close(got_slots, torch.from_numpy(want_slots))


def test_the_parsers_numpy_reprs_read_as_numbers():
    """The parser under NumPy 2 writes list params as reprs of NumPy scalars."""
    assert parse_value("[np.int32(2),np.int64(-1)]") == [2, -1]
    assert parse_value("[[np.int32(0),np.int32(1)]]") == [[0, 1]]
    assert parse_value("np.float32(0.5)") == 0.5


# ---- quantized forms -------------------------------------------------------------------
def quantize_case(case, tmp_path, *overrides):
    """The op test `case` quantized by npuopt (settings as `--set` gives them)."""
    from npuopt.config import load_config
    from npuopt.ir import read_graph
    from npuopt.optmaster import OptMaster
    sets = dict(o.split("=", 1) for o in overrides)
    OptMaster(load_config(str(REPO / "op_tests" / case / "opt.cfg"), {"output_dir": str(tmp_path), **sets})).run()
    return read_graph(str(tmp_path / f"{case}_o.txt"))


@pytest.mark.parametrize("force_int", [False, True])
def test_colour_quantization_is_the_tool_chains(tmp_path, force_int):
    """The matrix on a 10-bit grid (whatever the float IR's shift), shift 10, int16; the top
    the pixel values themselves: uint8, or int8 with zero point 128 under force_dtype_int."""
    graph = quantize_case("rgb_to_yuv", tmp_path, f"force_dtype_int={str(force_int).lower()}")
    node = graph.node("bt709")
    assert node.params["coefficient"][6:] == [218, 732, 74, -117, -395, 512, 512, -465, -47]
    assert node.params["coefficient_shift"] == 10 and node.params["coefficient_dtype"] == "int16"
    top = node.outputs[0]
    assert (top.dtype.value, float(top.scale), int(top.zerop)) == (("int8", 1.0, 128) if force_int else
                                                                   ("uint8", 1.0, 0))
    assert graph.node("int_coefficients").params["coefficient"][6] == 218 * 1024   # the SELF integers scaled again


def test_rescaling_layers_write_activation_bits_multipliers(tmp_path):
    graph = quantize_case("overlap_add", tmp_path, "activation_bits=16")
    for name in ("step2", "step3_unsigned"):
        params = graph.node(name).params
        assert params["scale_type"] == "uint16" and 0 < params["scale_value"] < 1 << 15
    assert graph.node("step3_unsigned").outputs[0].dtype.value == "uint16"   # unsigned as its input
    slots = quantize_case("bev_rebatch_slots", tmp_path / "bev").node("update").params
    assert (slots["scale_type"], slots["shift_type"]) == ("uint8", "int8")


def test_preprocess_tops_keep_their_inputs_grids(tmp_path):
    graph = quantize_case("preprocess", tmp_path)
    node = graph.node("preprocess")
    for t, top in zip(node.inputs, node.outputs):
        assert (float(top.scale), int(top.zerop), top.dtype) == (float(t.scale), int(t.zerop), t.dtype)


# ---- one-line errors -------------------------------------------------------------------
X = torch.randn(1, 3, 4, 6)
RGB = torch.zeros(1, 2, 2, 3)
COLOUR = dict(coefficient=[0] * 15, coefficient_shift=10)
B2S = torch.randn(4, 1, 2, 2, 3)
ERRORS = [
    ("OverlapAdd", [X], dict(frame_step=7), None, "frame_step 7 is larger than the frame length 6"),
    ("OverlapAdd", [X], dict(frame_step=0), None, "frame_step must be at least 1"),
    ("OverlapAdd", [torch.randn(5)], {}, None, "must be at least 2-D"),
    ("RgbToYuv", [RGB], dict(COLOUR, format="NV12"), None, "format 'NV12' is not supported"),
    ("RgbToYuv", [RGB], dict(coefficient=[1, 2], coefficient_shift=10), None, "coefficient must be 15 numbers"),
    ("RgbToYuv", [RGB], dict(coefficient=[0] * 15), None, "missing parameter 'coefficient_shift'"),
    ("RgbToYuv", [torch.zeros(1, 2, 2, 4)], COLOUR, None, "needs an NHWC RGB input"),
    ("YuvToRgb", [torch.zeros(1, 11)], COLOUR, [[1, 2, 4, 3]], r"an I420 input of a 2x4 image is \[N, 12\]"),
    ("BatchToSpaceND", [B2S], dict(block_size=[2, 0, 2]), None, "block_size .* must be positive"),
    ("BatchToSpaceND", [B2S], dict(block_size=[2, 1, 2], crops=[[0, 1]]), None, "must be 3 pairs"),
    ("BatchToSpaceND", [B2S], dict(block_size=[2, 1, 2], crops=[[0, 0], [0, 2], [0, 0]]), None, "leave nothing"),
    ("BatchToSpaceND", [B2S], dict(block_size=[3, 1, 1]), None, "the batch 4 is not a multiple of 3"),
    ("QueryRebatch", [torch.randn(1, 6, 4), ints([0, 6])], {}, [[1, 1, 2, 4]], r"\[0, 6\] out of range"),
    ("QueryRebatch", [torch.randn(1, 6, 4), ints([0, 1])], {}, [[1, 2, 2, 4]], "1 index lists for a top of 2"),
    ("QueryRebatch", [torch.randn(1, 6, 4)], {}, [[1, 0, 2, 4]], "needs the queries and one index list"),
    ("SlotUpdate", [torch.randn(1, 2, 3, 4), ints([0])], {}, [[1, 5, 4]], "1 index lists for queries of 2"),
    ("SlotUpdate", [torch.randn(1, 1, 3, 4), ints([0, 1, 2, 3])], {}, [[1, 5, 4]], "has 4 entries for 3"),
    ("SlotUpdate", [torch.randn(1, 1, 3, 4), ints([0])], {}, [[1, 5, 2]], "do not fit the top"),
    ("Preprocess", [X, X], {}, None, "2 inputs for 1 tops"),
]


@pytest.mark.parametrize("optype,inputs,params,top_shapes,message", ERRORS)
def test_one_line_errors(optype, inputs, params, top_shapes, message):
    with pytest.raises(IRError) as e:
        run(optype, inputs, params, top_shapes=top_shapes)
    assert re.search(f"layer 'op' \\({optype}\\): .*{message}", str(e.value)) and "\n" not in str(e.value)


# the same bad params in the float IR (npuopt) and in the quantized one (npuopt-run), and what both say
EDITS = [
    ("overlap_add", "step2", "frame_step", "9", "frame_step 9"),
    ("rgb_to_yuv", "bt709", "format", "NV21", "format 'NV21' is not supported"),
    ("yuv_to_rgb", "bt709", "coefficient", "[1,2,3]", "coefficient must be 15 numbers"),
    ("batch_to_space_nd", "cropped", "crops", "[[0,1],[1,0]]", "must be 3 pairs"),
    ("bev_rebatch_slots", "update", "layer_top_shape", "[[1,6,5]]", "do not fit the top [1, 6, 5]"),
]


@pytest.mark.parametrize("case, layer, key, value, message", EDITS)
def test_bad_params_stop_npuopt_with_one_line(tmp_path, case, layer, key, value, message):
    assert_op_test_edit_stops_npuopt(tmp_path, case, layer, key, value, message)


@pytest.fixture(scope="module")
def quantized_cases(tmp_path_factory):
    """name -> the quantized IR of an op test (made once)."""
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    made = {}

    def make(case):
        if case not in made:
            out = tmp_path_factory.mktemp(case)
            OptMaster(load_config(str(REPO / "op_tests" / case / "opt.cfg"), {"output_dir": str(out)})).run()
            made[case] = out / f"{case}_o.txt"
        return made[case]
    return make


@pytest.mark.parametrize("case, layer, key, value, message", EDITS)
def test_npuopt_run_bad_params_are_one_line(quantized_cases, tmp_path, case, layer, key, value, message):
    inputs = sorted((REPO / "op_tests" / case).glob("in*.npy"))
    assert_edit_stops_npuopt_run(quantized_cases(case), tmp_path, inputs, layer, key, value, message)
