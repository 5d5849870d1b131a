"""ROI layers: RoiAlign (AVG and MAX, HALF_PIXEL and OUTPUT_HALF_PIXEL, fixed and adaptive
samples, equal and unequal spatial scales), on boxes from a constant and from an input.

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


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("roialign", "RoiAlign AVG/MAX, HALF_PIXEL/OUTPUT_HALF_PIXEL, fixed/adaptive samples, on boxes from an "
         "input and a constant", [MAP, (30,)], _roi_align, data=_roi_data(6), calib_range=(-1.0, 1.0),
         run_range=(-1.0, 1.0)),
    Case("roialign_asym", "the same with asymmetric activations", [MAP, (30,)], _roi_align, ASYM,
         data=_roi_data(6), calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
]
