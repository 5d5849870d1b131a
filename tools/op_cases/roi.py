"""ROI layers: RoiAlign (AVG and MAX, HALF_PIXEL and OUTPUT_HALF_PIXEL, fixed and adaptive
samples, equal and unequal spatial scales), on boxes from a constant and from an input;
PyramidROIAlign on pixel boxes (every level, fixed and adaptive samples, HALF_PIXEL) and
on normalized boxes; CropAndResize (BILINEAR and NEAREST, boxes inside and reaching out of
the map, flipped, a crop of one row).

A detector runs them on one image: the data of these cases is one sample (the boxes'
batch index is 0), and the boxes are an input [1, R * 5] reshaped to [R, 5]."""
import numpy as np
import torch

from op_cases.common import Case, uniform

MAP = (12, 14, 6)   # H, W, C of the feature map (one sample)


def boxes(rng, count: int, height: float, width: float, outside: bool = True) -> np.ndarray:
    """[count, 5] boxes (batch 0, y1, x1, y2, x2) in image units (the map is 1/2 of them):
    random ones inside, one starting at the origin (samples left of and above the map) and,
    with `outside`, one ending past the map (the tool chain's loop gives it 0)."""
    y1 = rng.uniform(0, height * 0.6, count)
    x1 = rng.uniform(0, width * 0.6, count)
    y2 = np.minimum(y1 + rng.uniform(1.0, height * 0.5, count), height - 0.5)
    x2 = np.minimum(x1 + rng.uniform(1.0, width * 0.5, count), width - 0.5)
    b = np.stack([np.zeros(count), y1, x1, y2, x2], 1)
    b[0, 1:] = [0.0, 0.0, height * 0.3, width * 0.4]
    if outside:
        b[-1, 1:] = [height * 0.5, width * 0.5, height * 0.9, width + 3.0]
    return b.astype(np.float32)


def _roi_data(count: int):
    def data(rng, shapes, n, value_range, run):
        fm = uniform(rng, value_range, (1,) + shapes[0])
        return [fm, boxes(rng, count, 2.0 * MAP[0], 2.0 * MAP[1]).reshape(1, -1)]
    return data


LAYERS = [  # name, params
    ("avg_half_pixel", dict(method="AVG", pooled_shape=[3, 4], spatial_scale_value=[0.5, 0.5], sample=[2, 2],
                            coordinate_transformation_mode="HALF_PIXEL")),
    ("avg_output_half_pixel", dict(method="AVG", pooled_shape=[2, 3], spatial_scale_value=[0.5, 0.5],
                                   sample=[2, 2], coordinate_transformation_mode="OUTPUT_HALF_PIXEL")),
    ("avg_unequal", dict(method="AVG", pooled_shape=[3, 2], spatial_scale_value=[0.5, 0.375], sample=[1, 3],
                         coordinate_transformation_mode="OUTPUT_HALF_PIXEL")),
    ("max_half_pixel", dict(method="MAX", pooled_shape=[2, 2], spatial_scale_value=[0.5, 0.5], sample=[2, 1],
                            coordinate_transformation_mode="HALF_PIXEL")),
    ("max_adaptive", dict(method="MAX", pooled_shape=[2, 2], spatial_scale_value=[0.5, 0.5], sample=[0, 2],
                          coordinate_transformation_mode="OUTPUT_HALF_PIXEL")),
    ("avg_adaptive", dict(method="AVG", pooled_shape=[2, 3], spatial_scale_value=[0.5, 0.5], sample=[0, 0],
                          coordinate_transformation_mode="HALF_PIXEL")),
    ("avg_adaptive_output_half_pixel", dict(method="AVG", pooled_shape=[3, 3], spatial_scale_value=[0.5, 0.5],
                                            sample=[0, 0], coordinate_transformation_mode="OUTPUT_HALF_PIXEL")),
]


def _roi_align(b, rng, x):
    """Every RoiAlign variant on boxes from the input (reshaped to [R, 5]); AVG HALF_PIXEL also
    on constant boxes."""
    rois = b.layer("Reshape", "rois", [x[1]], dict(shape=[6, 5]))[0]
    tops = [b.layer("RoiAlign", name, [x[0], rois], params)[0] for name, params in LAYERS]
    fixed = torch.from_numpy(boxes(rng, 4, 2.0 * MAP[0], 2.0 * MAP[1], outside=False))
    c = b.layer("Constant", "boxes", [], {}, {"weights": fixed})[0]
    tops.append(b.layer("RoiAlign", "avg_const_boxes", [x[0], c], LAYERS[0][1])[0])
    return tops


PYRAMID_MAPS = [(32, 32, 4), (16, 16, 4), (8, 8, 4), (4, 4, 4)]   # 1/16 .. 1/128 of a 512 x 512 image
PYRAMID_BOXES = 8


def pyramid_boxes(rng) -> np.ndarray:
    """[8, 4] boxes (y1, x1, y2, x2) in pixels of a 512 x 512 image, two per level (levels by
    sqrt(area): < 112, < 224, < 448, more)."""
    sides = np.array([60.0, 80.0, 150.0, 190.0, 260.0, 330.0, 470.0, 490.0]) * rng.uniform(0.97, 1.02, PYRAMID_BOXES)
    aspect = rng.uniform(0.9, 1.1, PYRAMID_BOXES)
    hs, ws = np.minimum(sides * np.sqrt(aspect), 508.0), np.minimum(sides / np.sqrt(aspect), 508.0)
    y1, x1 = rng.uniform(0, 512 - hs), rng.uniform(0, 512 - ws)
    return np.stack([y1, x1, y1 + hs, x1 + ws], 1).astype(np.float32)


def _pyramid_data(rng, shapes, n, value_range, run):
    norm = np.sort(rng.uniform(0.0, 1.0, (PYRAMID_BOXES, 2, 2)), axis=1).transpose(0, 2, 1).reshape(-1, 4)
    norm = norm[:, [0, 2, 1, 3]]
    return [pyramid_boxes(rng)[None], norm[None].astype(np.float32)] + \
        [uniform(rng, value_range, (1,) + s) for s in shapes[2:]]


PYRAMID = dict(image_height=512, image_width=512, spatial_scale_value=[1 / 16, 1 / 32, 1 / 64, 1 / 128])


def _pyramid(b, rng, x):
    """PyramidROIAlign on pixel boxes (fixed 2x2 samples; adaptive, HALF_PIXEL) and on
    normalized boxes (TensorFlow crops; kept in float when quantized)."""
    maps = x[2:]
    return [b.layer("PyramidROIAlign", "pixels", [x[0]] + maps, dict(PYRAMID, resize_height=3, resize_width=2,
                    sample=[2, 2], coordinate_transformation_mode="OUTPUT_HALF_PIXEL", proposal_normalized=False))[0],
            b.layer("PyramidROIAlign", "pixels_adaptive", [x[0]] + maps, dict(PYRAMID, resize_height=2,
                    resize_width=3, sample=[0, 0], coordinate_transformation_mode="HALF_PIXEL",
                    proposal_normalized=False))[0],
            b.layer("PyramidROIAlign", "normalized", [x[1]] + maps, dict(PYRAMID, resize_height=3, resize_width=4,
                    sample=[0, 0], coordinate_transformation_mode="OUTPUT_HALF_PIXEL", proposal_normalized=True))[0]]


CROP_MAP = (9, 11, 5)
CROP_BOXES = 5


def _crop_data(rng, shapes, n, value_range, run):
    """One map, boxes inside [0, 1] (one flipped) and boxes reaching out of it."""
    inside = np.sort(rng.uniform(0.0, 1.0, (CROP_BOXES, 2, 2)), axis=1).transpose(0, 2, 1).reshape(-1, 4)
    inside = inside[:, [0, 2, 1, 3]]
    inside[1] = inside[1, [2, 1, 0, 3]]
    out = rng.uniform(-0.4, 1.4, (CROP_BOXES, 4))
    return [uniform(rng, value_range, (1,) + shapes[0]), inside.reshape(1, -1).astype(np.float32),
            out.reshape(1, -1).astype(np.float32)]


def _crop(b, rng, x):
    inside = b.layer("Reshape", "boxes_inside", [x[1]], dict(shape=[CROP_BOXES, 4]))[0]
    out = b.layer("Reshape", "boxes_out", [x[2]], dict(shape=[CROP_BOXES, 4]))[0]
    index = b.layer("Constant", "box_indices", [], {}, {"weights": torch.zeros(CROP_BOXES, dtype=torch.int32)})[0]
    layers = [("bilinear", inside, dict(method="BILINEAR", crop_size=[4, 6], extrapolation_value=0.0)),
              ("nearest", inside, dict(method="NEAREST", crop_size=[5, 3], extrapolation_value=0.0)),
              ("bilinear_out", out, dict(method="BILINEAR", crop_size=[3, 4], extrapolation_value=0.25)),
              ("nearest_out", out, dict(method="NEAREST", crop_size=[4, 4], extrapolation_value=-0.5)),
              ("one_row", inside, dict(method="BILINEAR", crop_size=[1, 4], extrapolation_value=0.0))]
    return [b.layer("CropAndResize", name, [x[0], boxes, index], params)[0] for name, boxes, params in layers]


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("roialign", "RoiAlign AVG/MAX, HALF_PIXEL/OUTPUT_HALF_PIXEL, fixed/adaptive samples, on boxes from an "
         "input and a constant", [MAP, (30,)], _roi_align, data=_roi_data(6), calib_range=(-1.0, 1.0),
         run_range=(-1.0, 1.0)),
    Case("roialign_asym", "the same with asymmetric activations", [MAP, (30,)], _roi_align, ASYM,
         data=_roi_data(6), calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
    Case("pyramid_roi", "PyramidROIAlign on pixel boxes of every level (fixed and adaptive samples) and on "
         "normalized boxes", [(PYRAMID_BOXES, 4), (PYRAMID_BOXES, 4)] + PYRAMID_MAPS, _pyramid,
         data=_pyramid_data),
    Case("pyramid_roi_asym", "the same with asymmetric activations", [(PYRAMID_BOXES, 4), (PYRAMID_BOXES, 4)]
         + PYRAMID_MAPS, _pyramid, ASYM, data=_pyramid_data, calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
    Case("crop_and_resize", "CropAndResize BILINEAR/NEAREST on boxes inside the map (one flipped) and reaching "
         "out of it (extrapolation), a crop of one row", [CROP_MAP, (CROP_BOXES * 4,), (CROP_BOXES * 4,)], _crop,
         data=_crop_data),
    Case("crop_and_resize_asym", "the same with asymmetric activations (boxes reaching out of the map get a "
         "zero point and stay float)", [CROP_MAP, (CROP_BOXES * 4,), (CROP_BOXES * 4,)], _crop, ASYM,
         data=_crop_data, calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
]
