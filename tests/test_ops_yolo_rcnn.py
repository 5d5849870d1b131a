"""Region, RegionFuse, Proposal, GenerateProposals, MaxRoiPool and RefineDetDetection: their
float forwards against references written box by box (NumPy, torchvision's roi_pool), what
they do where the tool chain's forward fails (capped Region, a full RegionFuse, a foreign
ROI batch index), their speed on real YOLO heads, and their bad params as one-line errors
(also through `npuopt --cfg`: nothing written)."""
import shutil
import time

import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from npuopt.ir.builder import GraphBuilder
from npuopt.registry import OP_QUANTIZERS

from conftest import REPO, edit_ir, run_in_process

ANCHORS = [1.3, 1.7, 3.2, 4.0, 5.1, 8.1]


def build(optype, inputs, params, constants=None, n_tops=1, top_shapes=None):
    """One layer over graph inputs `inputs`; its tops' values."""
    b = GraphBuilder("t")
    names = [b.input(f"in{i}", list(x.shape), x) for i, x in enumerate(inputs)]
    tops = b.layer(optype, "op", names, params, constants, n_tops=n_tops, top_shapes=top_shapes)
    return [b.tensors[t].betensor for t in tops]


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


# ---- Region ----------------------------------------------------------------------------------
def region_reference(x, anchors, thresh, compensate):
    """Cell by cell, anchor by anchor, class by class (float64): (score, class, box) lists."""
    _, gh, gw, a, channels = x.shape
    shift = 0.5 if compensate and gh % 2 == 0 and gw % 2 == 0 else 0.0
    found = []
    for r in range(gh):
        for c in range(gw):
            for k in range(a):
                t = x[0, r, c, k].astype(np.float64)
                e = np.exp(t[5:] - t[5:].max())
                probs = sigmoid(t[4]) * e / e.sum()
                cx, cy = (c - shift + sigmoid(t[0])) / gw, (r - shift + sigmoid(t[1])) / gh
                w, h = anchors[2 * k] * np.exp(t[2]) / gw, anchors[2 * k + 1] * np.exp(t[3]) / gh
                box = np.clip([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], 0, 1)
                found += [(p, cls, box) for cls, p in enumerate(probs) if p > thresh]
    found.sort(key=lambda f: f[1])   # stable: by class, row-major within one
    return found


@pytest.mark.parametrize("grid, compensate", [((4, 6), True), ((3, 5), True), ((4, 4), False)])
def test_region_float_against_reference(grid, compensate):
    x = torch.randn(1, *grid, 3, 9) * 1.5
    score, boxes, counts, labels, total = build("Region", [x], dict(anchors=ANCHORS, obj_thresh=0.2, max_box_num=300,
                                                                     grid_compensate=compensate), n_tops=5)
    want = region_reference(x.numpy(), ANCHORS, 0.2, compensate)
    n = len(want)
    assert 0 < n < 300 and int(counts.sum()) == n
    np.testing.assert_allclose(score[0, :n].numpy(), [f[0] for f in want], rtol=1e-5)
    np.testing.assert_allclose(boxes[0, :n].numpy(), np.stack([f[2] for f in want]), atol=1e-6)
    present = sorted({f[1] for f in want})
    assert labels[0, :len(present)].tolist() == present and int(total) == len(present)
    assert counts[0, :len(present)].tolist() == [sum(f[1] == c for f in want) for c in present]
    assert not score[0, n:].any() and not labels[0, len(present):].any()


def test_region_keeps_the_best_max_box_num():
    """More boxes pass than max_box_num (< 5000, where the tool chain's forward fails): the
    best max_box_num by score, listed class by class."""
    x = torch.randn(1, 4, 4, 3, 9)
    score, _, counts, labels, _ = build("Region", [x], dict(anchors=ANCHORS, obj_thresh=0.0, max_box_num=10),
                                        n_tops=5)
    every = sorted((f[0] for f in region_reference(x.numpy(), ANCHORS, 0.0, True)), reverse=True)
    assert sorted(score[0].tolist(), reverse=True) == pytest.approx(every[:10], rel=1e-5)
    assert int(counts.sum()) == 10 and labels[0, 1:int((counts > 0).sum())].gt(labels[0, 0]).all()


def test_region_is_fast_on_real_heads():
    """A 52x52 YOLOv3 head (3 anchors, 80 classes) whose boxes fill max_box_num: well under a second."""
    x = torch.randn(1, 52, 52, 3, 85) * 2
    start = time.perf_counter()
    _, _, counts, _, _ = build("Region", [x], dict(anchors=ANCHORS, obj_thresh=0.02, max_box_num=5000), n_tops=5)
    assert int(counts.sum()) == 5000 and time.perf_counter() - start < 2.0


# ---- RegionFuse --------------------------------------------------------------------------------
def region_tops(labels_counts, capacity=6, classes=4, offset=0.0):
    """Tops of a Region that found `labels_counts` [(class, count), ...] (scores numbered)."""
    n = sum(c for _, c in labels_counts)
    score = torch.zeros(1, capacity)
    score[0, :n] = torch.arange(1, n + 1) + offset
    boxes = score[..., None].expand(1, capacity, 4).clone()
    counts, labels = torch.zeros(1, classes, dtype=torch.int32), torch.zeros(1, classes, dtype=torch.int32)
    for i, (label, count) in enumerate(labels_counts):
        labels[0, i], counts[0, i] = label, count
    return [score, boxes, counts, labels, torch.tensor([[len(labels_counts)]], dtype=torch.int32)]


def fuse(first, second, capacity):
    inputs = [t for pair in zip(first, second) for t in pair]
    shapes = [[1, capacity], [1, capacity, 4], [1, 4], [1, 4], [1, 1]]
    return build("RegionFuse", inputs, dict(class_num=4), n_tops=5, top_shapes=shapes)


def test_regionfuse_merges_class_by_class():
    """Class 1 of both (input 0's boxes first), class 0 of the second, class 3 of the first."""
    score, boxes, counts, labels, total = fuse(region_tops([(1, 2), (3, 1)]), region_tops([(0, 1), (1, 2)],
                                                                                          offset=10.0), 12)
    assert score[0, :6].tolist() == [11, 1, 2, 12, 13, 3] and boxes[0, :6, 0].tolist() == score[0, :6].tolist()
    assert labels[0, :3].tolist() == [0, 1, 3] and counts[0, :3].tolist() == [1, 4, 1] and int(total) == 3


def test_regionfuse_drops_what_does_not_fit():
    score, _, counts, _, _ = fuse(region_tops([(1, 2), (3, 1)]), region_tops([(0, 1), (1, 2)], offset=10.0), 4)
    assert score[0].tolist() == [11, 1, 2, 12] and counts[0, :3].tolist() == [1, 3, 0]


# ---- MaxRoiPool --------------------------------------------------------------------------------
def test_maxroipool_against_torchvision():
    """torchvision's roi_pool is Caffe's ROI pooling, the tool chain's float rule."""
    torchvision = pytest.importorskip("torchvision")
    features = torch.randn(2, 4, 9, 12)
    rois = torch.tensor([[0, 3.2, 4.7, 60.0, 40.0], [1, 0, 0, 95, 71], [0, 50, 20, 51, 22], [1, 80, 60, 30, 10]])
    spatial = 1 / 8
    b = GraphBuilder("t")
    x = b.input("in0", [2, 9, 12, 4], features.permute(0, 2, 3, 1).contiguous())
    r = b.layer("Constant", "rois", [], {}, {"weights": rois[:, [0, 2, 1, 4, 3]]})[0]
    top = b.layer("MaxRoiPool", "op", [x, r], dict(pooled_shape=[3, 2], spatial=[spatial, spatial]))[0]
    got = b.tensors[top].betensor
    want = torchvision.ops.roi_pool(features, rois, (3, 2), spatial)
    torch.testing.assert_close(got, want.permute(0, 2, 3, 1))


def test_maxroipool_foreign_batch_index_gives_zeros():
    b = GraphBuilder("t")
    x = b.input("in0", [1, 6, 6, 2], torch.rand(1, 6, 6, 2) + 1)
    r = b.layer("Constant", "rois", [], {}, {"weights": torch.tensor([[3.0, 0, 0, 5, 5], [0, 0, 0, 5, 5]])})[0]
    out = b.tensors[b.layer("MaxRoiPool", "op", [x, r], dict(pooled_shape=[2, 2], spatial=[1.0, 1.0]))[0]].betensor
    assert not out[0].any() and out[1].min() > 1


# ---- Proposal -------------------------------------------------------------------------------
def test_proposal_float_against_reference():
    n = 40
    scores = torch.softmax(torch.randn(1, n, 2), -1)
    deltas = torch.randn(1, n, 4)
    anchors = torch.rand(n, 4) * torch.tensor([50.0, 60.0, 20.0, 30.0]) + 5
    constants = {k: anchors[:, i].contiguous() for i, k in enumerate(("ycenter", "xcenter", "ha", "wa"))}
    params = dict(score_threshold=0.5, height=50, width=60, scale_anchor=[0.25, 0.5, 1.0, 2.0])
    out = build("Proposal", [scores, deltas], params, constants, n_tops=4,
                top_shapes=[[1, 30], [1, 30, 4], [1, 1], [1, 1]])
    d, a = deltas[0].double().numpy() / [10, 10, 5, 5], anchors.double().numpy()
    cy, cx = d[:, 0] * a[:, 2] + a[:, 0], d[:, 1] * a[:, 3] + a[:, 1]
    h, w = np.exp(d[:, 2]) * a[:, 2], np.exp(d[:, 3]) * a[:, 3]
    boxes = np.stack([np.clip(cy - h / 2, 0, 50), np.clip(cx - w / 2, 0, 60), np.clip(cy + h / 2, 0, 50),
                      np.clip(cx + w / 2, 0, 60)], -1)
    keep = np.flatnonzero(scores[0, :, 1].numpy() > 0.5)[:30]
    assert int(out[2][0, 0]) == len(keep) > 0
    np.testing.assert_allclose(out[1][0, :len(keep)].numpy(), boxes[keep], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out[0][0, :len(keep)].numpy(), scores[0, keep, 1].numpy())


# ---- GenerateProposals ----------------------------------------------------------------------------
def proposals_reference(scores, deltas, base, pre, post, min_size, iou, image):
    """Box by box (float64) on a square map: the usual tiling, top pre by score, size test,
    greedy NMS with +1 areas."""
    _, hgt, wid, a = scores.shape
    boxes, flat = [], []
    for r in range(hgt):
        for c in range(wid):
            for k in range(a):
                x1, y1, x2, y2 = base[k] + [16 * c, 16 * r, 16 * c, 16 * r]
                wa, ha = x2 - x1 + 1, y2 - y1 + 1
                tx, ty, tw, th = deltas[0, r, c, 4 * k:4 * k + 4]
                cx, cy, w, h = tx * wa + x1 + wa / 2, ty * ha + y1 + ha / 2, np.exp(tw) * wa, np.exp(th) * ha
                boxes.append(np.clip([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 0, image - 1))
                flat.append(scores[0, r, c, k])
    order = [i for i in np.argsort(-np.array(flat), kind="stable")[:pre]
             if all(boxes[i][2:] - boxes[i][:2] + 1 > min_size)]
    kept = []
    for i in order:
        def overlap(j):
            inter = np.prod(np.maximum(np.minimum(boxes[i][2:], boxes[j][2:]) - np.maximum(boxes[i][:2],
                                                                                          boxes[j][:2]) + 1, 0))
            area = [np.prod(boxes[m][2:] - boxes[m][:2] + 1) for m in (i, j)]
            return inter / (area[0] + area[1] - inter)
        if all(overlap(j) <= iou for j in kept):
            kept.append(i)
    return [flat[i] for i in kept[:post]], [boxes[i] for i in kept[:post]]


def test_generate_proposals_float_against_reference():
    base = np.array([[-8.0, -8.0, 23.0, 23.0], [-20.0, -8.0, 35.0, 23.0]])
    scores, deltas = torch.rand(1, 4, 4, 2), torch.randn(1, 4, 4, 8) * 0.5
    info = torch.tensor([[64.0, 64.0, 1.0]])
    params = dict(pre_nms_topn=20, post_nms_topn=8, min_size=4, iou_threshold=0.5, image_width=64, image_height=64)
    out = build("GenerateProposals", [scores, deltas, info], params,
                {"weights": torch.tensor(base, dtype=torch.float32)}, n_tops=4)
    want_scores, want_boxes = proposals_reference(scores.double().numpy(), deltas.double().numpy(), base, 20, 8, 4,
                                                  0.5, 64)
    n = len(want_scores)
    assert int(out[3][0, 0]) == n > 2
    np.testing.assert_allclose(out[0][0, :n].numpy(), want_scores, rtol=1e-6)
    np.testing.assert_allclose(out[1][0, :n].numpy(), np.stack(want_boxes), rtol=1e-5, atol=1e-4)


# ---- RefineDetDetection ------------------------------------------------------------------------
def refinedet_reference(arm_conf, odm_conf, arm_loc, odm_loc, priors, obj, conf, pre, post):
    """Prior by prior (float64): Caffe's centre-size decoding twice, per-class NMS, top boxes."""
    def decode(p, d):
        w, h = p[2] - p[0], p[3] - p[1]
        cx, cy = 0.1 * d[0] * w + (p[0] + p[2]) / 2, 0.1 * d[1] * h + (p[1] + p[3]) / 2
        w, h = np.exp(0.2 * d[2]) * w, np.exp(0.2 * d[3]) * h
        return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])

    def iou(a, b):
        inter = np.prod(np.clip(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0, None))
        area = lambda v: max(v[2] - v[0], 0) * max(v[3] - v[1], 0)   # noqa: E731
        return inter / (area(a) + area(b) - inter)
    boxes = [decode(decode(priors[0, i], arm_loc[0, i]), odm_loc[0, i]) for i in range(priors.shape[1])]
    found = []
    for c in range(1, odm_conf.shape[2]):
        cand = [i for i in range(len(boxes)) if arm_conf[0, i, 1] >= obj and odm_conf[0, i, c] > conf]
        cand = sorted(cand, key=lambda i: -odm_conf[0, i, c])[:pre]
        kept = []
        for i in cand:
            if all(iou(boxes[i], boxes[j]) <= 0.45 for j in kept):
                kept.append(i)
        found += [(odm_conf[0, i, c], c, i) for i in kept]
    found.sort(key=lambda f: (-f[0], f[1]))
    return np.array([boxes[f[2]] for f in found[:post]])


def test_refinedet_against_reference():
    n = 60
    centres = torch.rand(n, 2) * 0.8 + 0.1
    sizes = torch.rand(n, 2) * 0.3 + 0.05
    priors = torch.cat([centres - sizes / 2, centres + sizes / 2], -1)[None]
    arm_conf, odm_conf = torch.softmax(torch.randn(1, n, 2), -1), torch.softmax(torch.randn(1, n, 5) * 2, -1)
    arm_loc, odm_loc = torch.randn(1, n, 4), torch.randn(1, n, 4)
    params = dict(obj_thresh=0.3, conf_thresh=0.15, pre_nms_topk=15, post_nms_topk=12)
    (got,) = build("RefineDetDetection", [arm_conf, odm_conf, arm_loc, odm_loc, priors], params)
    want = refinedet_reference(*(t.double().numpy() for t in (arm_conf, odm_conf, arm_loc, odm_loc, priors)),
                               0.3, 0.15, 15, 12)
    assert len(want) == 12
    np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-5, atol=1e-6)


def test_refinedet_stays_float():
    """No integer form of the tool chain's exists: no quantize function (kept in float)."""
    assert OP_QUANTIZERS.best("RefineDetDetection") is None


# ---- bad params --------------------------------------------------------------------------------
def region_layer(**change):
    params = dict(anchors=ANCHORS, obj_thresh=0.3, max_box_num=50, grid_width=4, grid_height=4, box_per_grid=3,
                  class_num=4, grid_compensate=True)
    params.update(change)
    return "Region", [torch.randn(1, 4, 4, 3, 9)], params, None, 5


def roipool_layer(rois=None, **change):
    params = dict(pooled_shape=[2, 2], spatial=[0.5, 0.5])
    params.update(change)
    return "MaxRoiPool", [torch.randn(1, 6, 6, 2), torch.tensor([[0, 0, 0, 8.0, 8.0]]) if rois is None else rois], \
        params, None, 1


def proposal_layer(**change):
    constants = {k: torch.ones(8) * 8 for k in ("ycenter", "xcenter", "ha", "wa")}
    params = dict(score_threshold=0.5, height=32, width=32)
    params.update(change)
    return "Proposal", [torch.rand(1, 8, 2), torch.randn(1, 8, 4)], params, constants, 4


def proposals_layer(weights=None, **change):
    params = dict(pre_nms_topn=10, post_nms_topn=5, min_size=2, iou_threshold=0.5, image_width=32, image_height=32)
    params.update(change)
    return "GenerateProposals", [torch.rand(1, 2, 2, 2), torch.randn(1, 2, 2, 8), torch.ones(1, 3)], params, \
        {"weights": torch.ones(2, 4) if weights is None else weights}, 4


def refinedet_layer(**change):
    params = dict(obj_thresh=0.1, conf_thresh=0.1, pre_nms_topk=5, post_nms_topk=4)
    params.update(change)
    return "RefineDetDetection", [torch.rand(1, 6, 2), torch.rand(1, 6, 3), torch.randn(1, 6, 4),
                                  torch.randn(1, 6, 4), torch.rand(1, 6, 4)], params, None, 1


@pytest.mark.parametrize("layer, words", [
    (region_layer(anchors=ANCHORS[:4]), "anchors must be a list of 6 numbers"),
    (region_layer(grid_width=5), "grid_width 5 does not fit the input"),
    (region_layer(class_num=3), "class_num 3 does not fit the input"),
    (region_layer(max_box_num=0), "max_box_num must be an integer >= 1"),
    (region_layer(obj_thresh="high"), "obj_thresh must be a number"),
    (region_layer(grid_compensate="yes"), "grid_compensate must be true or false"),
    (roipool_layer(pooled_shape=[2]), "pooled_shape must be two positive integers"),
    (roipool_layer(spatial=[0.5]), "spatial must be two numbers"),
    (roipool_layer(rois=torch.zeros(1, 4)), "ROIs [R, 5]"),
    (proposal_layer(height="tall"), "height must be a number"),
    (proposal_layer(score_threshold=None), "score_threshold must be a number"),
    (proposals_layer(post_nms_topn=0), "post_nms_topn must be an integer >= 1"),
    (proposals_layer(weights=torch.ones(3, 4)), "weights holds 3 anchors"),
    (proposals_layer(iou_threshold=[0.5]), "iou_threshold must be a number"),
    (refinedet_layer(post_nms_topk=-1), "post_nms_topk must be an integer >= 1"),
    (refinedet_layer(conf_thresh="low"), "conf_thresh must be a number"),
])
def test_bad_params_are_one_line_errors(layer, words):
    optype, inputs, params, constants, n_tops = layer
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\)") as e:
        build(optype, inputs, params, constants, n_tops)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case, layer, key, value, words", [
    ("region_even", "region", "anchors", "[1.0,2.0]", "anchors must be a list of 10 numbers"),
    ("regionfuse_tiny", "region_fuse", "class_num", "2", "class_num 2 is smaller than the inputs' 3 and 3"),
    ("roipool", "pool_3x2", "pooled_shape", "[3,0]", "pooled_shape must be two positive integers"),
    ("proposal", "proposal", "width", "wide", "width must be a number"),
    ("generate_proposals", "proposals", "pre_nms_topn", "0", "pre_nms_topn must be an integer >= 1"),
    ("refinedet", "detection", "obj_thresh", "[0.1,0.2]", "obj_thresh must be a number"),
])
def test_bad_params_stop_npuopt_with_one_line(tmp_path, case, layer, key, value, words):
    """`npuopt --cfg` on an op test's IR with one bad param: one error line naming the layer,
    a non-zero exit, no traceback, nothing written."""
    folder = tmp_path / case
    shutil.copytree(REPO / "op_tests" / case, folder, ignore=shutil.ignore_patterns("work"))
    edit_ir(folder / f"{case}.txt", layer, key, value)
    result = run_in_process("--cfg", folder / "opt.cfg")
    errors = [line for line in result.stderr.splitlines() if line.startswith("npuopt: error:")]
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert len(errors) == 1 and f"layer '{layer}'" in errors[0] and words in errors[0], result.stderr
    assert not (folder / "work").exists()
