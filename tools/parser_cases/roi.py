"""ROI layers written by the parser: RoiAlign from torchvision.ops.roi_align (opset 16;
aligned -> HALF_PIXEL, else OUTPUT_HALF_PIXEL; fixed and adaptive sampling) and
CropAndResize from an ONNX Resize in tf_crop_and_resize mode. One sample per run: the
boxes (constants of the model) read batch entry 0."""
import numpy as np
import onnx
import torch
import torchvision
from onnx import TensorProto, helper

from op_cases.common import Case, uniform

ROI_MAP = (4, 10, 12)     # C, H, W of the model's NCHW input


def _one_sample(rng, shapes, n, value_range, run):
    return [uniform(rng, value_range, (1,) + s) for s in shapes]


class _RoiAligns(torch.nn.Module):
    def __init__(self, boxes):
        super().__init__()
        self.boxes = boxes

    def forward(self, x):
        ops = torchvision.ops
        return (ops.roi_align(x, self.boxes, (3, 3), spatial_scale=0.5, sampling_ratio=2, aligned=True),
                ops.roi_align(x, self.boxes, (2, 3), spatial_scale=0.5, sampling_ratio=2, aligned=False),
                ops.roi_align(x, self.boxes, (2, 2), spatial_scale=0.5, sampling_ratio=-1, aligned=True))


def _roi_align(rng, onnx_path):
    h, w = 2 * ROI_MAP[1], 2 * ROI_MAP[2]
    y1, x1 = rng.uniform(0, h * 0.5, 5), rng.uniform(0, w * 0.5, 5)
    boxes = np.stack([np.zeros(5), x1, y1, x1 + rng.uniform(2, w * 0.5, 5), y1 + rng.uniform(2, h * 0.5, 5)], 1)
    boxes[0, 1:] = [0.0, 0.0, w * 0.4, h * 0.3]
    model = _RoiAligns(torch.from_numpy(boxes.astype(np.float32))).eval()
    torch.onnx.export(model, (torch.zeros((1,) + ROI_MAP),), onnx_path, opset_version=16, dynamo=False,
                      input_names=["in0"])


def _crop_and_resize(rng, onnx_path):
    """Two Resize layers in tf_crop_and_resize mode (linear, nearest) of an [1, 3, 9, 8] input."""
    x = helper.make_tensor_value_info("in0", TensorProto.FLOAT, [1, 3, 9, 8])
    nodes, inits, outs = [], [], []
    for name, mode, roi, size, fill in (("linear", "linear", [0.1, 0.2, 0.9, 0.7], [5, 4], 0.0),
                                        ("nearest", "nearest", [-0.2, 0.3, 0.8, 1.3], [4, 6], 0.5)):
        inits += [helper.make_tensor(f"roi_{name}", TensorProto.FLOAT, [8], [0, 0] + roi[:2] + [1, 1] + roi[2:]),
                  helper.make_tensor(f"sizes_{name}", TensorProto.INT64, [4], [1, 3] + size)]
        nodes.append(helper.make_node("Resize", ["in0", f"roi_{name}", "", f"sizes_{name}"], [name], mode=mode,
                                      coordinate_transformation_mode="tf_crop_and_resize",
                                      extrapolation_value=fill))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 3] + size))
    onnx.save(helper.make_model(helper.make_graph(nodes, "crop_and_resize", [x], outs, inits),
                                opset_imports=[helper.make_opsetid("", 13)], ir_version=8), onnx_path)


CASES = [
    Case("parser_roi_align", "RoiAlign of torchvision.ops.roi_align: aligned (HALF_PIXEL) and not, fixed and "
         "adaptive sampling, on boxes of the model", [ROI_MAP], _roi_align, data=_one_sample),
    Case("parser_crop_and_resize", "CropAndResize of ONNX Resize tf_crop_and_resize (linear, nearest with an "
         "extrapolation value and a box reaching out of the map)", [(3, 9, 8)], _crop_and_resize, data=_one_sample),
]
