"""Detection post-processing: DecodeBox + NMS as an SSD head has them (HARD, GAUSSIAN,
normalized and pixel boxes, a top too small for the proposals, many equal scores),
DetectionOutput + FilterBoxes + NMS + PostNMS1 as a two-stage detector has them (both
anchor modes), and BoundingBox. Box inputs are valid boxes (ymin < ymax, xmin < xmax);
anchors overlap, so that NMS suppresses."""
import numpy as np
import torch

from op_cases.common import Case, uniform

ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")


def ssd_anchors(grids=((4, 4), (2, 2)), sizes=((0.3, 0.3), (0.45, 0.25), (0.6, 0.6), (0.8, 0.5))):
    """(ycenter, xcenter, ha, wa) of anchors on each grid: two sizes per cell, the first
    two sizes on the first grid, the last two on the second (normalized, as the parser's)."""
    rows = []
    for (gh, gw), pair in zip(grids, (sizes[:2], sizes[2:])):
        for y in range(gh):
            for x in range(gw):
                for h, w in pair:
                    rows.append(((y + 0.5) / gh, (x + 0.5) / gw, h, w))
    a = torch.tensor(rows, dtype=torch.float32)
    return {"ycenter": a[:, 0], "xcenter": a[:, 1], "ha": a[:, 2], "wa": a[:, 3]}


ANCHORS = 40   # 16 cells * 2 + 4 cells * 2


def _ssd(b, x, decode: dict, nms: dict, room=64, classes=5, scale_anchors=1.0):
    """Softmax scores -> DecodeBox (top of `room` boxes) -> NMS (the same room)."""
    scores = b.layer("Softmax", "scores", [x[0]], dict(axis=2))[0]
    anchors = {k: v * scale_anchors for k, v in ssd_anchors().items()}
    dec = b.layer("DecodeBox", "decode", [scores, x[1]], dict(decode), anchors, n_tops=5,
                  top_shapes=[[1, room, 4], [1, room], [1, 1], [1, room], [1, room]])
    out = b.layer("NMS", "nms", dec[:4], dict(nms), n_tops=4,
                  top_shapes=[[1, room, 4], [1, room], [1, room], [1, room]])
    return dec + out


def _decode(**more):
    return dict(dict(image_width=300, image_height=300, max_box_num=5000, class_num=4, score_threshold=0.3,
                     feature_map=[[4, 4], [2, 2]], proposal_normalized=True), **more)


def _nms(**more):
    return dict(dict(method="HARD", image_width=300, image_height=300, center_point_box=0,
                     max_output_size=64, iou_threshold=0.5, score_threshold=float("-inf"), soft_nms_sigma=0.0), **more)


def _ssd_data(rng, shapes, n, value_range, run):
    """Score logits (background column 0 lower) and box encodings (ty, tx around 0, th,
    tw within +-1.5 after the variance), coarse so that scores tie."""
    logits = np.round(rng.normal(0.0, 1.6, (n,) + shapes[0]) * 4) / 4
    logits[..., 0] -= 1.0
    codes = rng.normal(0.0, 2.5, (n,) + shapes[1]).clip(-7.5, 7.5)
    return [logits.astype(np.float32), codes.astype(np.float32)]


def _ssd_hard(b, rng, x):
    return _ssd(b, x, _decode(), _nms(max_output_size=6))


def _ssd_small_top(b, rng, x):
    """A DecodeBox top of 12 boxes for some 40 proposals: the lowest-scored 12 are kept
    (the tool chain's ascending sort), and NMS keeps at most 3 per class, 12 in all."""
    return _ssd(b, x, _decode(score_threshold=0.15), _nms(max_output_size=3, iou_threshold=0.3), room=12)


def _ssd_pixels(b, rng, x):
    """Pixel boxes (proposal_normalized false, 300 x 200 image, anchors in pixels, no clip,
    variance [8, 8, 4, 4]) and an NMS with a score threshold, centers given (its boxes'
    grid scaled to the image)."""
    decode = _decode(proposal_normalized=False, image_height=300, image_width=200, clip=False,
                     variance=[8.0, 8.0, 4.0, 4.0])
    return _ssd(b, x, decode, _nms(score_threshold=0.4, center_point_box=1, iou_threshold=0.45),
                scale_anchors=250.0)


def _ssd_gaussian(b, rng, x):
    """Soft NMS (GAUSSIAN, sigma 0.5) with a score threshold."""
    return _ssd(b, x, _decode(score_threshold=0.2), _nms(method="GAUSSIAN", soft_nms_sigma=0.5, score_threshold=0.25,
                                                          max_output_size=10))


def _ssd_float_decode(b, rng, x):
    """score_threshold 0.001, 0 on an 8-bit score grid (the tool chain's integer DecodeBox
    refuses it): DecodeBox stays float, NMS reads its boxes through a Quantize (8 bits)."""
    return _ssd(b, x, _decode(score_threshold=0.001), _nms(max_output_size=4, iou_threshold=0.4))


def _ssd_linear(b, rng, x):
    """LINEAR (which the tool chain runs as HARD) on all classes (class_num 5: no background)."""
    return _ssd(b, x, _decode(class_num=5, score_threshold=0.1), _nms(method="LINEAR", iou_threshold=0.6))


# ---- two-stage: DetectionOutput -> FilterBoxes -> NMS -> PostNMS1 ------------------------------
ROIS, CLASSES = 24, 4


def _two_stage(b, x, detection: dict):
    scores = b.layer("Softmax", "cls_prob", [x[0]], dict(axis=2))[0]
    det = b.layer("DetectionOutput", "detect", [scores, x[1], x[2]], dict(detection), n_tops=5,
                  top_shapes=[[1, 48], [1, 48, 4], [1, CLASSES - 1], [1, CLASSES - 1], [1, 1]])
    filt = b.layer("FilterBoxes", "filter", [det[1], det[0], det[2], det[3], det[4]],
                   dict(score_threshold=0.25, min_size=[4.0, 6.0], maxnum=40), n_tops=5,
                   top_shapes=[[1, 40, 4], [1, 40], [1, CLASSES - 1], [1, CLASSES - 1], [1, 1]])
    nms = b.layer("NMS", "nms", [filt[0], filt[2], filt[4], filt[1]],
                  _nms(image_width=600, image_height=500, max_output_size=5, iou_threshold=0.4), n_tops=4,
                  top_shapes=[[1, 20, 4], [1, CLASSES - 1], [1, 20], [1, 20]])
    post = b.layer("PostNMS1", "post", [filt[0], nms[3], nms[1]],
                   dict(image_width=600, image_height=500, proposal_cnt=10), n_tops=2,
                   top_shapes=[[1, 10, 4], [1, 10, 4]])
    return det + filt + nms + post


def _caffe(b, rng, x):
    """anchor_mode caffe_detection (x first), encodings of the classes without the
    background, variance [10, 10, 5, 5], bbox_xform_clip ln(1000 / 16)."""
    return _two_stage(b, x, dict(image_width=600, image_height=500, score_threshold=0.2, anchor_mode="caffe_detection",
                                 variance=[10.0, 10.0, 5.0, 5.0], bbox_xform_clip=float(np.log(1000.0 / 16))),
)


def _default(b, rng, x):
    """The default mode (y first), encodings with the background's, variance [1, 1, 2, 2]."""
    return _two_stage(b, x, dict(image_width=600, image_height=500, score_threshold=0.2,
                                 variance=[1.0, 1.0, 2.0, 2.0]))


def _proposals(rng, n, x_first: bool):
    """Valid pixel boxes in a 500 x 600 image, clustered so that refined boxes overlap."""
    y0, x0 = rng.uniform(0, 380, (n, ROIS)), rng.uniform(0, 480, (n, ROIS))
    h, w = rng.uniform(30, 110, (n, ROIS)), rng.uniform(30, 110, (n, ROIS))
    parts = [x0, y0, x0 + w, y0 + h] if x_first else [y0, x0, y0 + h, x0 + w]
    return np.round(np.stack(parts, -1)).astype(np.float32)


def _two_stage_data(x_first: bool):
    def data(rng, shapes, n, value_range, run):
        logits = np.round(rng.normal(0.0, 1.5, (n,) + shapes[0]) * 4) / 4
        codes = rng.normal(0.0, 1.0, (n,) + shapes[1]).clip(-3.0, 3.0)
        return [logits.astype(np.float32), codes.astype(np.float32), _proposals(rng, n, x_first)]
    return data


# ---- BoundingBox ---------------------------------------------------------------------------
def _bounding_box(b, rng, x):
    """The default std_div (coordinate_order XY, which the tool chain reads as YX), and
    std_div [8, 8, 4, 4] on the same boxes."""
    first = b.layer("BoundingBox", "refine", [x[0], x[1]], dict(coordinate_order="XY"))
    second = b.layer("BoundingBox", "refine_std", [x[0], x[1]], dict(coordinate_order="YX", std_div=[8, 8, 4, 4]))
    return first + second


def _box_data(rng, shapes, n, value_range, run):
    y0, x0 = rng.uniform(0.0, 0.7, (n,) + shapes[0][:-1]), rng.uniform(0.0, 0.7, (n,) + shapes[0][:-1])
    h, w = rng.uniform(0.05, 0.3, y0.shape), rng.uniform(0.05, 0.3, y0.shape)
    boxes = np.stack([y0, x0, y0 + h, x0 + w], -1).astype(np.float32)
    deltas = uniform(rng, value_range, (n,) + shapes[1])
    return [boxes, deltas]


SSD_SHAPES = [(ANCHORS, 5), (ANCHORS, 4)]
TWO_STAGE_CAFFE = [(ROIS, CLASSES), (ROIS, CLASSES - 1, 4), (ROIS, 4)]
TWO_STAGE_DEFAULT = [(ROIS, CLASSES), (ROIS, CLASSES, 4), (ROIS, 4)]
CASES = [
    Case("ssd_nms", "Softmax -> DecodeBox -> NMS (HARD, 6 boxes per class) on 40 SSD anchors, 4 classes and a "
         "background", SSD_SHAPES, _ssd_hard, data=_ssd_data),
    Case("ssd_nms_asym", "the same with asymmetric activations", SSD_SHAPES, _ssd_hard, ASYM, data=_ssd_data),
    Case("ssd_small_top", "DecodeBox whose top holds fewer boxes than pass its threshold; NMS of 3 per class",
         SSD_SHAPES, _ssd_small_top, data=_ssd_data),
    Case("ssd_pixels", "DecodeBox in pixels (300 x 200, no clip, variance [8, 8, 4, 4]); NMS with a score "
         "threshold and center_point_box", SSD_SHAPES, _ssd_pixels, data=_ssd_data),
    Case("ssd_gaussian", "DecodeBox -> soft NMS (GAUSSIAN, sigma 0.5, score threshold 0.25)", SSD_SHAPES,
         _ssd_gaussian, data=_ssd_data),
    Case("ssd_float_decode", "DecodeBox with a score threshold of 0 on the 8-bit score grid (kept float) -> NMS "
         "on 8-bit boxes", SSD_SHAPES, _ssd_float_decode, data=_ssd_data),
    Case("ssd_linear", "DecodeBox without background -> NMS LINEAR (run as HARD)", SSD_SHAPES, _ssd_linear,
         dict(activation_bits="16"), data=_ssd_data),
    Case("two_stage_caffe", "DetectionOutput (caffe_detection) -> FilterBoxes -> NMS -> PostNMS1",
         TWO_STAGE_CAFFE, _caffe, data=_two_stage_data(True)),
    Case("two_stage_default", "DetectionOutput (default mode, background encodings) -> FilterBoxes -> NMS -> "
         "PostNMS1, asymmetric activations", TWO_STAGE_DEFAULT, _default, ASYM, data=_two_stage_data(False)),
    Case("bounding_box", "BoundingBox with the default std_div and with [8, 8, 4, 4]", [(6, 4), (6, 4)],
         _bounding_box, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0), data=_box_data),
]
