"""Detection post-processing: Region (YOLO heads: even and odd grids, grid_compensate both
ways, many anchors and classes), RegionFuse of two and three Regions (yolo3_tiny/full),
MaxRoiPool (constant ROIs and ROIs as an input), Proposal, GenerateProposals,
RefineDetDetection."""
import numpy as np
import torch

from op_cases.common import Case, uniform

ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
ACT16 = dict(activation_bits="16")
YOLO2_ANCHORS = [1.3221, 1.73145, 3.19275, 4.00944, 5.05587, 8.09892, 9.47112, 4.84053, 11.2364, 10.0071]


def region(b, name, bottom, shape, anchors, thresh=0.3, compensate=True, max_boxes=5000, **extra):
    gh, gw, a, channels = shape
    params = dict(grid_width=gw, grid_height=gh, box_per_grid=a, max_box_num=max_boxes, class_num=channels - 5,
                  obj_thresh=thresh, anchors=anchors[:2 * a], grid_compensate=compensate, **extra)
    return b.layer("Region", name, [bottom], params, n_tops=5)


def _region_even(b, rng, x):
    """A 4x4 grid (grid_compensate moves the centres), 5 anchors, 4 classes."""
    return region(b, "region", x[0], (4, 4, 5, 9), YOLO2_ANCHORS)


def _region_odd(b, rng, x):
    """A 5x3 grid (no compensation on an odd grid), 3 anchors, 6 classes, threshold 0.2."""
    return region(b, "region", x[0], (5, 3, 3, 11), YOLO2_ANCHORS[4:], thresh=0.2)


def _region_capped(b, rng, x):
    """More boxes pass obj_thresh 0 (6x6 grid, 5 anchors, 40 classes: 7200 pairs) than
    max_box_num 5000: the best 5000 by score (many equal on the integer grid)."""
    return region(b, "region", x[0], (6, 6, 5, 45), YOLO2_ANCHORS, thresh=0.0)


def _region_after_relu(b, rng, x):
    """Region of a ReLU's output: an unsigned input keeps it in float (its box tables read the
    input as signed), between integer layers."""
    relu = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))[0]
    return region(b, "region", relu, (4, 4, 3, 9), YOLO2_ANCHORS, thresh=0.25)


def _two_calibration_samples(rng, shapes, n, value_range, run):
    """Two calibration samples and one to run (a large input)."""
    return [uniform(rng, value_range, (1 if run else 2,) + s) for s in shapes]


def _region_plain(b, rng, x):
    """An even 6x4 grid with grid_compensate off, 2 anchors, 20 classes."""
    return region(b, "region", x[0], (6, 4, 2, 25), [0.6, 0.9, 2.5, 1.7], thresh=0.1, compensate=False)


def fuse(b, name, first, second, classes, capacity=10000):
    """RegionFuse of two Regions' tops (the parser's order: each top of the first, then of the
    second), holding `capacity` boxes as the parser writes it."""
    tops = [t for pair in zip(first, second) for t in pair]
    shapes = [[1, capacity], [1, capacity, 4], [1, classes], [1, classes], [1, 1]]
    return b.layer("RegionFuse", name, tops, dict(class_num=classes), n_tops=5, top_shapes=shapes)


def _yolo3_tiny(b, rng, x):
    """Two heads (4x4 and 8x8 grids, 3 anchors, 3 classes) fused."""
    first = region(b, "region_1", x[0], (4, 4, 3, 8), [2.5, 2.6, 4.2, 5.3, 11.7, 10.0])
    second = region(b, "region_2", x[1], (8, 8, 3, 8), [0.6, 0.9, 1.4, 1.7, 2.3, 3.6])
    return fuse(b, "region_fuse", first, second, 3)


def _yolo3_full(b, rng, x):
    """Three heads (2x2, 4x4, 8x8, 3 anchors, 5 classes): the first two fused, then the third."""
    heads = [region(b, f"region_{i + 1}", x[i], (2 << i, 2 << i, 3, 10), anchors, thresh=0.25)
             for i, anchors in enumerate([[3.6, 2.8, 4.9, 6.2, 11.7, 10.2], [1.9, 3.8, 3.9, 2.8, 3.7, 7.4],
                                          [1.2, 1.6, 2.0, 3.7, 4.1, 2.9]])]
    first = fuse(b, "region_fuse", heads[0], heads[1], 5)
    return fuse(b, "region_fuse2", first, heads[2], 5)


def _one_sample_run(rng, shapes, n, value_range, run):
    """The run feeds one sample: the tool chain's RegionFuse fills only the first batch item,
    its Proposal's last top is [1, 1] whatever the batch, and MaxRoiPool's top has one row
    per ROI, whatever the batch."""
    return [uniform(rng, value_range, (1 if run else n,) + s) for s in shapes]


# ROIs (batch index, y1, x1, y2, x2) in image pixels: inside, crossing the edges, past the map,
# degenerate (end before start), one pixel, the whole image
ROIS = [[0, 8, 4, 60, 70], [0, -20, -10, 30, 200], [0, 100, 150, 300, 330], [0, 50, 40, 20, 10],
        [0, 33, 33, 33, 33], [0, 0, 0, 127, 159], [0, 12.4, 7.6, 40.5, 24.5]]


def _roipool(b, rng, x):
    """MaxRoiPool of constant ROIs at 1/16 (a 8x10 map of a 128x160 image), 3x2 and 2x4 bins."""
    rois = b.layer("Constant", "rois", [], {}, {"weights": torch.tensor(ROIS, dtype=torch.float32)})[0]
    return [b.layer("MaxRoiPool", name, [x[0], rois], dict(pooled_shape=list(shape), spatial=[1 / 16, 1 / 16]))[0]
            for name, shape in (("pool_3x2", (3, 2)), ("pool_2x4", (2, 4)))]


def _roipool_input(b, rng, x):
    """MaxRoiPool of ROIs that are a graph input, scales 1/8 (y) and 1/4 (x)."""
    rois = b.layer("Reshape", "rois", [x[1]], dict(shape=[6, 5]))[0]
    return b.layer("MaxRoiPool", "pool", [x[0], rois], dict(pooled_shape=[4, 3], spatial=[0.125, 0.25]))


def _roi_data(rng, shapes, n, value_range, run):
    """Features uniform in value_range; ROIs of batch 0 with corners in [-8, 72] pixels; the
    run feeds one sample (the ROIs' count is the top's first axis, not the batch)."""
    n = 1 if run else n
    features = uniform(rng, value_range, (n,) + shapes[0])
    corners = rng.uniform(-8.0, 72.0, (n, shapes[1][0] // 5, 4)).astype(np.float32)
    rois = np.concatenate([np.zeros(corners.shape[:-1] + (1,), np.float32), corners], axis=-1)
    return [features, rois.reshape((n,) + shapes[1])]


def anchors_grid(rows: int, cols: int, stride: float, sizes) -> torch.Tensor:
    """[rows * cols * len(sizes), 4] anchors (ycenter, xcenter, height, width), cell-major."""
    y, x = torch.meshgrid(torch.arange(rows) * stride + stride / 2, torch.arange(cols) * stride + stride / 2,
                          indexing="ij")
    hw = torch.tensor(sizes, dtype=torch.float32)
    centres = torch.stack([y, x], -1).reshape(-1, 1, 2).expand(-1, len(sizes), 2)
    return torch.cat([centres, hw.expand(centres.shape[0], -1, -1)], -1).reshape(-1, 4).float()


def proposal(b, name, scores, deltas, anchors, capacity, **params):
    constants = {key: anchors[:, i].contiguous() for i, key in enumerate(("ycenter", "xcenter", "ha", "wa"))}
    shapes = [[1, capacity], [1, capacity, 4], [1, 1], [1, 1]]
    return b.layer("Proposal", name, [scores, deltas], params, constants, n_tops=4, top_shapes=shapes)


def _proposal(b, rng, x):
    """Objectness softmax over [N, 2] logits, 60 anchors (4x5 cells of 16 px, 3 sizes) on a
    64x80 image; room for 24 boxes (more pass the threshold: the first 24 are kept)."""
    prob = b.layer("Softmax", "objectness", [x[0]], dict(axis=2))[0]
    anchors = anchors_grid(4, 5, 16.0, [[16.0, 16.0], [32.0, 16.0], [16.0, 40.0]])
    return proposal(b, "proposal", prob, x[1], anchors, 24, score_threshold=0.45, height=64, width=80,
                    scale_anchor=[0.25, 0.5, 1.0, 2.0])


def _proposal_roomy(b, rng, x):
    """As _proposal with room for every box and a threshold of 0.6."""
    prob = b.layer("Softmax", "objectness", [x[0]], dict(axis=2))[0]
    anchors = anchors_grid(4, 5, 16.0, [[16.0, 16.0], [32.0, 16.0], [16.0, 40.0]])
    return proposal(b, "proposal", prob, x[1], anchors, 60, score_threshold=0.6, height=64, width=80,
                    scale_anchor=[0.25, 0.5, 1.0, 2.0])


BASE_ANCHORS = [[-8.0, -8.0, 23.0, 23.0], [-20.0, -8.0, 35.0, 23.0], [-8.0, -24.0, 23.0, 39.0]]


def generate_proposals(b, name, scores, deltas, anchors, pre, post, **params):
    info = b.layer("Constant", f"{name}_image_info", [], {}, {"weights": torch.tensor([[64.0, 64.0, 1.0]])})[0]
    params = {**dict(pre_nms_topn=pre, post_nms_topn=post, min_size=4, iou_threshold=0.5, image_width=64,
                     image_height=64), **params}
    return b.layer("GenerateProposals", name, [scores, deltas, info], params,
                   {"weights": torch.tensor(anchors, dtype=torch.float32)}, n_tops=4)


def _generate_proposals(b, rng, x):
    """3 base anchors tiled over a 4x4 map (a 64x64 image): 48 boxes, the best 30 through
    NMS (IoU 0.5), 10 kept."""
    return generate_proposals(b, "proposals", x[0], x[1], BASE_ANCHORS, 30, 10)


def _generate_proposals_all(b, rng, x):
    """Every box through NMS (IoU 0.7, min_size 8): room for 40."""
    return generate_proposals(b, "proposals", x[0], x[1], BASE_ANCHORS, 6000, 40, min_size=8, iou_threshold=0.7)


def _coarse_scores(rng, shapes, n, value_range, run):
    """Scores in sixteenths (many equal: the order of equal scores is the tool chain's sort's)
    and deltas in value_range."""
    return [np.round(rng.random((n,) + shapes[0]) * 16).astype(np.float32) / 16,
            uniform(rng, value_range, (n,) + shapes[1])]


def _distinct_scores(rng, shapes, n, value_range, run):
    """Scores that stay distinct on an 8-bit grid (k / 255, 0 and 1 in every sample) and
    deltas in value_range."""
    count = int(np.prod(shapes[0]))
    scores = np.stack([np.concatenate([[0, 255], rng.choice(np.arange(1, 255), count - 2, replace=False)])
                       [rng.permutation(count)] for _ in range(n)]).astype(np.float32) / 255
    return [scores.reshape((n,) + shapes[0]), uniform(rng, value_range, (n,) + shapes[1])]


def _refinedet(b, rng, x):
    """Softmax objectness and class scores (4 classes) of 48 priors (a 4x4 grid of 3 normalized
    sizes), both modules' offsets; objectness 0.3, confidence 0.2, the best 12 per class, 10 kept."""
    arm_conf = b.layer("Softmax", "arm_conf", [x[0]], dict(axis=2))[0]
    odm_conf = b.layer("Softmax", "odm_conf", [x[1]], dict(axis=2))[0]
    grid = anchors_grid(4, 4, 0.25, [[0.2, 0.2], [0.35, 0.2], [0.2, 0.45]])
    priors = torch.cat([grid[:, 1:2] - grid[:, 3:4] / 2, grid[:, 0:1] - grid[:, 2:3] / 2,
                        grid[:, 1:2] + grid[:, 3:4] / 2, grid[:, 0:1] + grid[:, 2:3] / 2], dim=1)
    anchors = b.layer("Constant", "priors", [], {}, {"weights": priors.reshape(1, -1, 4)})[0]
    return b.layer("RefineDetDetection", "detection", [arm_conf, odm_conf, x[2], x[3], anchors],
                   dict(obj_thresh=0.3, conf_thresh=0.2, pre_nms_topk=12, post_nms_topk=10))


CASES = [
    Case("region_even", "Region on an even 4x4 grid (compensated centres), 5 anchors, 4 classes", [(4, 4, 5, 9)],
         _region_even, calib_range=(-3.0, 3.0), run_range=(-3.0, 3.0)),
    Case("region_odd", "Region on an odd 5x3 grid, 3 anchors, 6 classes, asymmetric activations", [(5, 3, 3, 11)],
         _region_odd, ASYM, calib_range=(-3.0, 2.5), run_range=(-3.0, 2.5)),
    Case("region_act16", "Region on 16-bit activations, grid_compensate off, 2 anchors, 20 classes",
         [(6, 4, 2, 25)], _region_plain, ACT16, calib_range=(-4.0, 4.0), run_range=(-4.0, 4.0)),
    Case("region_capped", "Region with more boxes above obj_thresh than max_box_num (the best 5000 kept, scores "
         "that tie on the integer grid)", [(6, 6, 5, 45)], _region_capped, calib_range=(-1.0, 1.0),
         run_range=(-1.0, 1.0), data=_two_calibration_samples),
    Case("region_float", "Region kept in float (an unsigned input) after a quantized ReLU", [(4, 4, 3, 9)],
         _region_after_relu, calib_range=(-1.0, 3.0), run_range=(-1.0, 3.0)),
    Case("regionfuse_tiny", "RegionFuse of two Regions (yolo3_tiny: 4x4 and 8x8 grids, 3 classes)",
         [(4, 4, 3, 8), (8, 8, 3, 8)], _yolo3_tiny, calib_range=(-3.0, 3.0), run_range=(-3.0, 3.0),
         data=_one_sample_run),
    Case("regionfuse_full", "two RegionFuse layers over three Regions (yolo3_full: 2x2, 4x4, 8x8), asymmetric "
         "activations", [(2, 2, 3, 10), (4, 4, 3, 10), (8, 8, 3, 10)], _yolo3_full, ASYM, calib_range=(-3.0, 3.0),
         run_range=(-3.0, 3.0), data=_one_sample_run),
    Case("regionfuse_act16", "RegionFuse of two Regions on 16-bit activations", [(4, 4, 3, 8), (8, 8, 3, 8)],
         _yolo3_tiny, ACT16, calib_range=(-3.0, 3.0), run_range=(-3.0, 3.0), data=_one_sample_run),
    Case("roipool", "MaxRoiPool of constant ROIs (inside, across the edges, past the map, degenerate, one "
         "pixel, fractional), 3x2 and 2x4 bins", [(8, 10, 4)], _roipool, data=_one_sample_run),
    Case("roipool_input", "MaxRoiPool of ROIs given as an input, different y/x scales, asymmetric activations",
         [(9, 12, 3), (30,)], _roipool_input, ASYM, data=_roi_data),
    Case("roipool_act16", "MaxRoiPool on 16-bit activations", [(8, 10, 4)], _roipool, ACT16,
         data=_one_sample_run),
    Case("proposal", "Proposal of 60 anchors on softmax scores, more boxes passing than the top holds",
         [(60, 2), (60, 4)], _proposal, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0), data=_one_sample_run),
    Case("proposal_asym", "Proposal with room for every box, threshold 0.6, asymmetric activations",
         [(60, 2), (60, 4)], _proposal_roomy, ASYM, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0),
         data=_one_sample_run),
    Case("proposal_act16", "Proposal on 16-bit activations", [(60, 2), (60, 4)], _proposal, ACT16,
         calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0), data=_one_sample_run),
    Case("generate_proposals", "GenerateProposals: 3 base anchors tiled over a 4x4 map, the best 30 (of scores "
         "that tie) through NMS, 10 kept", [(4, 4, 3), (4, 4, 12)], _generate_proposals, data=_coarse_scores),
    Case("generate_proposals_asym", "GenerateProposals of every box, room for 40, asymmetric activations",
         [(4, 4, 3), (4, 4, 12)], _generate_proposals_all, ASYM, data=_distinct_scores),
    Case("generate_proposals_act16", "GenerateProposals on 16-bit activations", [(4, 4, 3), (4, 4, 12)],
         _generate_proposals, ACT16, data=_distinct_scores),
    Case("refinedet", "RefineDetDetection (kept in float) of softmax scores: 48 priors, 4 classes, per-class NMS",
         [(48, 2), (48, 4), (48, 4), (48, 4)], _refinedet, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0)),
]
