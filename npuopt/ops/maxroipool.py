"""MaxRoiPool: Caffe/ONNX ROI max pooling (Fast/Faster R-CNN). Input 0 the features
[N, H, W, C], input 1 the ROIs [R, 5] as the parser writes them (batch index, y1, x1, y2,
x2, in image pixels); `pooled_shape` [ph, pw], `spatial` [scale_y, scale_x]; top [R, ph,
pw, C].

Float (the tool chain's): the ROI's corners on the feature map round(y1 * scale_y) etc.
(floor(v + 0.5), float32), its size max(end - start + 1, 1); bin i of n spans
[floor(i * size / n), ceil((i + 1) * size / n)) (float32) from the start, clipped to the
map; each bin's maximum, 0 for an empty bin and for every bin of an ROI whose batch index
(truncated) is not one of the features' (the tool chain's forward indexes past them).

Quantized (the tool chain's): `spatial` holds round(scale / s_roi * 2^16); a corner is
((q + zp_roi) * spatial + 2^15) >> 16, the batch index q + zp_roi; the bins are the exact
integer floor/ceil of i * size / n; the maximum of the stored integers (0 for an empty
bin), the top on the input's grid."""
import torch

from ..dtype import computing_float
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _boxes as B
from ._detection import room
from ._movement import int_list

SPATIAL_BITS = 16


def pooled(node):
    """(ph, pw): `pooled_shape`, positive, as the top's IR shape says."""
    shape = int_list(node, "pooled_shape")
    if len(shape) != 2 or min(shape) < 1:
        raise B.fail(node, f"pooled_shape must be two positive integers, got {shape}")
    for axis, size in ((1, shape[0]), (2, shape[1])):
        if room(node, 0, axis, size) != size:
            raise B.fail(node, f"pooled_shape {shape} does not fit the top's shape "
                                    f"{list(node.outputs[0].ir_shape)}")
    return shape


def spatial(node) -> list:
    value = node.get_param("spatial", [1.0, 1.0])
    if not isinstance(value, (list, tuple)) or len(value) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise B.fail(node, f"spatial must be two numbers [y, x], got {value!r}")
    return list(value)


def checked_inputs(node):
    B.count_io(node, 2, 1)
    features, rois = node.inputs[0].betensor, node.inputs[1].betensor
    if features.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 5:
        raise B.fail(node, f"needs features [N, H, W, C] and ROIs [R, 5], got {list(features.shape)} and "
                                f"{list(rois.shape)}")
    return features, rois


def float_bins(starts: torch.Tensor, ends: torch.Tensor, n: int, limit: int):
    """[R, n] bin bounds as the tool chain's float forward computes them."""
    size = torch.clamp(ends - starts + 1, min=1)
    step = size[:, None] / n
    i = torch.arange(n)
    lo = torch.floor(i * step) + starts[:, None]
    hi = torch.ceil((i + 1) * step) + starts[:, None]
    return lo.clamp(0, limit).to(torch.int64), hi.clamp(0, limit).to(torch.int64)


def int_bins(starts: torch.Tensor, ends: torch.Tensor, n: int, limit: int):
    """[R, n] bin bounds in integers: floor(i * size / n), ceil((i + 1) * size / n)."""
    size = torch.clamp(ends - starts + 1, min=1)[:, None]
    i = torch.arange(n)
    lo = torch.div(i * size, n, rounding_mode="floor") + starts[:, None]
    hi = -torch.div(-(i + 1) * size, n, rounding_mode="floor") + starts[:, None]
    return lo.clamp(0, limit), hi.clamp(0, limit)


def pool(features: torch.Tensor, batch_index: torch.Tensor, rows, cols) -> torch.Tensor:
    """Each ROI's bin maxima [R, ph, pw, C]: rows first, then columns; empty bins 0, and
    every bin of an ROI whose batch index is not one of the features'."""
    n, _, _, channels = features.shape
    (r0, r1), (c0, c1) = rows, cols
    out = torch.zeros(batch_index.numel(), r0.shape[1], c0.shape[1], channels, dtype=features.dtype)
    for r, b in enumerate(batch_index.tolist()):
        for i in range(r0.shape[1]):
            if r0[r, i] >= r1[r, i] or not 0 <= b < n:
                continue
            band = features[b, int(r0[r, i]):int(r1[r, i])].amax(dim=0)
            for j in range(c0.shape[1]):
                if c0[r, j] < c1[r, j]:
                    out[r, i, j] = band[int(c0[r, j]):int(c1[r, j])].amax(dim=0)
    return out


@op_register(OpType.MaxRoiPool, "1.0")
def maxroipool_forward(self, *args):
    features, rois = checked_inputs(self)
    ph, pw = pooled(self)
    sy, sx = spatial(self)
    _, height, width, _ = features.shape
    if self.quantized:
        r = rois.to(torch.int64) + int(self.inputs[1].zerop)
        corners = (r[:, 1:] * torch.tensor([sy, sx, sy, sx], dtype=torch.int64) + (1 << (SPATIAL_BITS - 1))) \
            >> SPATIAL_BITS
        bins, batch_index = int_bins, r[:, 0]
    else:
        r = computing_float(rois)
        corners = torch.floor(r[:, 1:] * torch.tensor([sy, sx, sy, sx], dtype=r.dtype) + 0.5).to(torch.int64)
        bins, batch_index = float_bins, r[:, 0].to(torch.int64)   # (truncated toward 0)
    rows = bins(corners[:, 0], corners[:, 2], ph, height)
    cols = bins(corners[:, 1], corners[:, 3], pw, width)
    out = pool(features if self.quantized else computing_float(features), batch_index, rows, cols)
    self.outputs[0].betensor = QT.store_output(self, out, self.outputs[0]) if self.quantized else out
    return self.outputs[0].betensor


@quant_register(OpType.MaxRoiPool, "1.0")
def maxroipool_quantize(self, *args):
    """The top on the features' grid; `spatial` on the ROIs' (per-tensor) grid, 16 fraction bits."""
    QT.check_quantized_inputs(self)
    if self.inputs[1].is_per_channel or self.inputs[0].is_per_channel:
        raise QT.Unsupported(f"layer '{self.name}' (MaxRoiPool): per-channel inputs")
    QT.copy_quantization(self.inputs[0], self.outputs[0])
    inverse = 1 / torch.tensor(float(self.inputs[1].scale), dtype=torch.float32)
    self.params["spatial"] = [int(torch.round(v * inverse * (1 << SPATIAL_BITS))) for v in spatial(self)]
