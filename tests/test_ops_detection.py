"""Detection post-processing (DecodeBox, NMS, DetectionOutput, FilterBoxes, PostNMS1,
BoundingBox): float forwards on hand-checked examples, npuopt-run's score order against
torch's, the one-line errors for impossible params (in the forward, and through `npuopt`:
one line, no traceback, nothing written). Bit-exactness against the tool chain is
tests/test_conformance.py's job (op cases ssd_*, two_stage_*, bounding_box, parser_ssd*)."""
import shutil

import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from npuopt_run.ops.scoresort import tool_chain_order

from conftest import REPO, edit_ir, run_in_process


def forward(optype, inputs, params, tops, constants=None):
    """One layer built with GraphBuilder (its tops' IR shapes given) and run on `inputs`."""
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x) for i, x in enumerate(inputs)]
    out = b.layer(optype, "op", names, params, constants, n_tops=len(tops), top_shapes=tops)
    return b.build(out).forward(list(inputs))


def ints(values):
    return torch.tensor(values, dtype=torch.int32)


NMS = dict(method="HARD", iou_threshold=0.5, score_threshold=float("-inf"), max_output_size=8)


def test_nms_keeps_the_best_and_drops_what_it_overlaps():
    """Class slot 0: boxes 1 (best) and 0 overlap by IoU 0.6 (0 dropped), box 2 apart;
    slot 1 empty; slot 2: one box, its corners given in the other order."""
    boxes = torch.tensor([[[0, 0, 10, 10], [0, 2, 10, 12], [20, 20, 30, 30], [5, 5, 0, 0]]], dtype=torch.float32)
    scores = torch.tensor([[0.7, 0.9, 0.3, 0.5]])
    out_boxes, counts, out_scores, keep = forward("NMS", [boxes, ints([[3, 0, 1]]), ints([[3]]), scores], NMS,
                                                  [[1, 4, 4], [1, 3], [1, 4], [1, 4]])
    assert counts.tolist() == [[2, 0, 1]] and keep.tolist() == [[1, 2, 0, 0]]
    assert out_scores[0].tolist() == pytest.approx([0.9, 0.3, 0.5, 0.0])
    assert out_boxes[0, :3].tolist() == [[0, 2, 10, 12], [20, 20, 30, 30], [5, 5, 0, 0]]


def test_soft_nms_decays_overlapping_scores():
    """GAUSSIAN: box 0 (IoU 0.6 with the best) keeps exp(-0.36 / (2 * 0.5)) of its score."""
    boxes = torch.tensor([[[0, 0, 10, 10], [0, 2, 10, 12]]], dtype=torch.float32)
    scores = torch.tensor([[0.7, 0.9]])
    _, counts, out_scores, keep = forward("NMS", [boxes, ints([[2]]), ints([[1]]), scores],
                                          dict(NMS, method="GAUSSIAN", soft_nms_sigma=0.5, score_threshold=0.1),
                                          [[1, 2, 4], [1, 1], [1, 2], [1, 2]])
    iou = 80.0 / 120.0
    assert counts.tolist() == [[2]] and keep.tolist() == [[1, 0]]
    assert out_scores[0].tolist() == pytest.approx([0.9, 0.7 * np.exp(-iou * iou / (2 * 0.5))], rel=1e-6)


ANCHORS = {"ycenter": torch.tensor([0.5, 0.25]), "xcenter": torch.tensor([0.5, 0.75]),
           "ha": torch.tensor([0.4, 0.2]), "wa": torch.tensor([0.2, 0.4])}
DECODE = dict(class_num=2, score_threshold=0.4)
DECODE_TOPS = [[1, 3, 4], [1, 3], [1, 1], [1, 3], [1, 3]]


def test_decodebox_decodes_and_groups_by_class():
    """Column 0 is the background; pairs above 0.4 grouped by class, boxes decoded with
    the default variance [10, 10, 5, 5] and clipped to [0, 1]."""
    scores = torch.tensor([[[0.9, 0.5, 0.6], [0.1, 0.8, 0.2]]])
    codes = torch.tensor([[[1.0, -2.0, 5.0 * np.log(1.5), 0.0], [0.0, 0.0, 0.0, 5.0 * np.log(4.0)]]])
    boxes, counts, total, out_scores, labels = forward("DecodeBox", [scores, codes], DECODE, DECODE_TOPS, ANCHORS)
    assert counts.tolist() == [[2, 1, 0]] and total.tolist() == [[2]] and labels.tolist() == [[0, 1, 0]]
    assert out_scores[0].tolist() == pytest.approx([0.5, 0.8, 0.6])
    first = [0.5 + 0.1 * 0.4 - 0.3, 0.5 - 0.2 * 0.2 - 0.1, 0.5 + 0.1 * 0.4 + 0.3, 0.5 - 0.2 * 0.2 + 0.1]
    second = [0.15, 0.25, 0.35, 1.0]   # width 1.6 clamped to 1 around 0.75, clipped
    assert boxes[0].tolist() == [pytest.approx(first, abs=1e-6), pytest.approx(second, abs=1e-6),
                                 pytest.approx(first, abs=1e-6)]


def test_filterboxes_and_postnms1():
    """FilterBoxes drops a low score and a thin box, packs the slots left; PostNMS1 picks
    offset + keep (offsets from the kept counts) and normalizes by the longer side."""
    boxes = torch.tensor([[[0, 0, 10, 10], [0, 0, 10, 1], [5, 5, 20, 20], [1, 1, 9, 9]]], dtype=torch.float32)
    scores = torch.tensor([[0.9, 0.9, 0.1, 0.8]])
    tops = [[1, 4, 4], [1, 4], [1, 2], [1, 2], [1, 1]]
    fb, fs, fc, fl, ft = forward("FilterBoxes", [boxes, scores, ints([[3, 1]]), ints([[4, 7]]), ints([[2]])],
                                 dict(score_threshold=0.2, min_size=[2.0, 2.0], maxnum=4), tops)
    assert fc.tolist() == [[1, 1]] and fl.tolist() == [[4, 7]] and ft.tolist() == [[2]]
    assert fb[0, :2].tolist() == [[0, 0, 10, 10], [1, 1, 9, 9]] and fs[0].tolist() == pytest.approx([0.9, 0.8, 0, 0])
    gathered, normalized = forward("PostNMS1", [boxes, ints([[1, 0, 0]]), ints([[1, 1]])],
                                   dict(proposal_cnt=3, image_height=20, image_width=40), [[1, 3, 4], [1, 3, 4]])
    assert gathered[0].tolist() == [[0, 0, 10, 1], [0, 0, 10, 1], [0, 0, 0, 0]]
    assert normalized[0, 0].tolist() == pytest.approx([0, 0, 0.25, 0.025])


def test_bounding_box_applies_deltas():
    boxes = torch.tensor([[[0.2, 0.2, 0.6, 0.4]]])
    deltas = torch.tensor([[[1.0, -2.0, 5.0 * np.log(0.5), 0.0]]])
    (out,) = forward("BoundingBox", [boxes, deltas], dict(coordinate_order="YX"), [[1, 1, 4]])
    assert out[0, 0].tolist() == pytest.approx([0.34, 0.16, 0.54, 0.36], abs=1e-6)


@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_npuopt_run_sorts_scores_as_torch_does(descending, dtype):
    """Equal scores come out as torch's CPU argsort leaves them: random ties, a sequence
    that drives the introsort into its heapsort, long integer sorts (radix)."""
    rng = np.random.default_rng(1)
    half = 512
    killer = np.zeros(2 * half, np.int64)   # Musser's median-of-3 killer, then ties
    for i in range(1, half + 1):
        if i % 2:
            killer[i - 1], killer[i] = i, half + i
        killer[half + i - 1] = 2 * i
    cases = [rng.integers(0, k, n) for n, k in ((17, 3), (300, 7), (2000, 40))]
    cases += [np.concatenate([killer, killer[:9]]), rng.integers(0, 5, 40000)]
    for x in cases:
        t = torch.from_numpy(x).to(dtype)
        assert np.array_equal(tool_chain_order(t.numpy(), descending, not dtype.is_floating_point),
                              t.argsort(descending=descending).numpy())


# ---- impossible params: one line naming the layer and the param ---------------------------------
def _nms_inputs():
    return [torch.zeros(1, 4, 4), ints([[4]]), ints([[1]]), torch.zeros(1, 4)]


NMS_TOPS = [[1, 4, 4], [1, 1], [1, 4], [1, 4]]
TWO = [torch.zeros(1, 2, 3), torch.zeros(1, 2, 4)]
DETECT = [torch.zeros(1, 2, 3), torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 4)]
DETECT_TOPS = [[1, 4], [1, 4, 4], [1, 2], [1, 2], [1, 1]]
FILTER = [torch.zeros(1, 4, 4), torch.zeros(1, 4), ints([[4]]), ints([[0]]), ints([[1]])]
FILTER_TOPS = [[1, 4, 4], [1, 4], [1, 1], [1, 1], [1, 1]]
DETECT_PARAMS = dict(image_height=10, image_width=10, score_threshold=0.5, variance=[1, 1, 1, 1])
ERRORS = [
    ("DecodeBox", TWO, dict(DECODE, class_num=4), DECODE_TOPS, ANCHORS, "class_num must be an integer in \\[1, 3\\]"),
    ("DecodeBox", TWO, dict(DECODE, variance=[10, 10, 5]), DECODE_TOPS, ANCHORS, "variance must be a list of 4"),
    ("DecodeBox", TWO, dict(DECODE, variance=[10, 0, 5, 5]), DECODE_TOPS, ANCHORS, "variance must be a list of 4"),
    ("DecodeBox", TWO, dict(DECODE, clip="maybe"), DECODE_TOPS, ANCHORS, "clip must be true or false"),
    ("DecodeBox", TWO, dict(DECODE, proposal_normalized=False), DECODE_TOPS, ANCHORS, "missing parameter 'image_h"),
    ("DecodeBox", TWO, DECODE, DECODE_TOPS, dict(ANCHORS, ha=torch.ones(3)), "'ha' has 3 anchors for 2 boxes"),
    ("DecodeBox", TWO, dict(class_num=2), DECODE_TOPS, ANCHORS, "missing parameter 'score_threshold'"),
    ("DecodeBox", TWO, DECODE, DECODE_TOPS[:4], ANCHORS, "takes 2 inputs and gives 5 tops"),
    ("NMS", _nms_inputs(), dict(NMS, method="SOFTER"), NMS_TOPS, None, "unsupported method 'SOFTER'"),
    ("NMS", _nms_inputs(), dict(NMS, method="GAUSSIAN"), NMS_TOPS, None, "GAUSSIAN needs soft_nms_sigma > 0"),
    ("NMS", _nms_inputs(), dict(NMS, max_output_size=0), NMS_TOPS, None, "max_output_size must be at least 1"),
    ("NMS", _nms_inputs(), dict(NMS, iou_threshold="high"), NMS_TOPS, None, "iou_threshold must be a number"),
    ("NMS", _nms_inputs()[:3], NMS, NMS_TOPS, None, "takes 4 inputs"),
    ("NMS", [torch.zeros(1, 4, 4), ints([[5]]), ints([[1]]), torch.zeros(1, 4)], NMS, NMS_TOPS, None,
     "class slot 0 with 5 boxes does not fit 4 boxes"),
    ("DetectionOutput", DETECT, dict(DETECT_PARAMS, anchor_mode="corner"), DETECT_TOPS, None,
     "unsupported anchor_mode 'corner'"),
    ("DetectionOutput", DETECT, dict(DETECT_PARAMS, variance=[1, 1]), DETECT_TOPS, None, "variance must be a list"),
    ("DetectionOutput", DETECT, dict(DETECT_PARAMS, image_height=None), DETECT_TOPS, None,
     "missing parameter .image_height."),
    ("DetectionOutput", [torch.zeros(1, 2, 3), torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 4)], DETECT_PARAMS,
     DETECT_TOPS, None, "do not fit"),
    ("FilterBoxes", FILTER, dict(score_threshold=0.1, min_size=[1.0], maxnum=4), FILTER_TOPS, None,
     "min_size must be a list of 2"),
    ("FilterBoxes", FILTER, dict(score_threshold=0.1, min_size=[1.0, 1.0], maxnum=3), FILTER_TOPS, None,
     "maxnum 3 differs from tops 0 and 1's 4 boxes"),
    ("PostNMS1", [torch.zeros(1, 4, 4), ints([[0]]), ints([[1]])], dict(proposal_cnt=5, image_height=8, image_width=8),
     [[1, 4, 4], [1, 4, 4]], None, "proposal_cnt 5 differs from top 0's 4 boxes"),
    ("BoundingBox", [torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)], dict(coordinate_order="ZX"), [[1, 2, 4]], None,
     "unsupported coordinate_order 'ZX'"),
    ("BoundingBox", [torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)], dict(std_div=[10, 10, 0, 5]), [[1, 2, 4]], None,
     "std_div must be a list of 4 positive numbers"),
    ("BoundingBox", [torch.zeros(1, 2, 4), torch.zeros(1, 3, 4)], {}, [[1, 2, 4]], None, "differ"),
]


@pytest.mark.parametrize("optype,inputs,params,tops,constants,message", ERRORS)
def test_impossible_params(optype, inputs, params, tops, constants, message):
    params = {k: v for k, v in params.items() if v is not None}
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\): .*{message}") as e:
        forward(optype, inputs, params, tops, constants)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case,layer,key,value,fragment", [
    ("ssd_nms", "nms", "method", "SOFTER", "layer 'nms' (NMS): unsupported method 'SOFTER'"),
    ("ssd_nms", "decode", "class_num", "9", "layer 'decode' (DecodeBox): class_num must be an integer in [1, 5]"),
    ("two_stage_caffe", "filter", "maxnum", "12", "layer 'filter' (FilterBoxes): maxnum 12 differs"),
])
def test_npuopt_stops_on_a_bad_param_with_one_line(tmp_path, case, layer, key, value, fragment):
    folder = tmp_path / case
    shutil.copytree(REPO / "op_tests" / case, folder, ignore=shutil.ignore_patterns("work"))
    edit_ir(folder / f"{case}.txt", layer, key, value)
    before = sorted(p.name for p in folder.iterdir())
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={folder / 'work'}")
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("npuopt: error:")]
    assert len(lines) == 1 and fragment in lines[0], result.output
    assert sorted(p.name for p in folder.iterdir()) == before
