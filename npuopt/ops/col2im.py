"""Col2Im: ONNX's Col2Im (torch's fold). Input 0 [N, C * prod(kernel), L] holds, for each
of the L blocks (row-major over the block grid), the C x kernel values; they are added into
the image of input 1's shape ([H, W] or [D, H, W], int32) at block position p * stride -
pad_begin + k * dilation (positions in the pads are dropped). Input 2 is the kernel shape.
Top [N, C, (D,) H, W] (channels first, as ONNX's). Params as the parser writes them:
kernel_x/y(/z), stride_x/y(/z), dilation_x/y(/z), and pad_top/bottom/left/right (2-D) or
pad_z/y/x_begin/end (3-D). Float32 sums.

Quantized: the stored integers q of the input are summed (its zero point must be 0), then
requantized by scale_value/shift_value into the top (as the tool chain's forward)."""
import math

import torch

from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..registry import OpType, op_register, quant_register
from . import _roi

AXES = ("z", "y", "x")


def _positive(node, key: str, default=None) -> int:
    value = node.get_param(key) if default is None else node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise IRError(f"layer '{node.name}' (Col2Im): {key} {value!r} must be a positive integer")
    return value


def _pad(node, key: str) -> int:
    value = node.get_param(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IRError(f"layer '{node.name}' (Col2Im): {key} {value!r} must be a non-negative integer")
    return value


def fold_geometry(node, image, kernel):
    """Per spatial axis (kernel, stride, dilation, pad_begin, pad_end, blocks)."""
    rank = len(image)
    axes = AXES[3 - rank:]
    if rank == 2:
        pads = [(_pad(node, "pad_top"), _pad(node, "pad_bottom")), (_pad(node, "pad_left"), _pad(node, "pad_right"))]
    else:
        pads = [(_pad(node, f"pad_{a}_begin"), _pad(node, f"pad_{a}_end")) for a in axes]
    out = []
    for a, size, k, (begin, end) in zip(axes, image, kernel, pads):
        declared = node.get_param(f"kernel_{a}", k)
        if declared != k:
            raise IRError(f"layer '{node.name}' (Col2Im): kernel_{a} {declared!r} differs from the block shape "
                          f"input's {k}")
        stride, dilation = _positive(node, f"stride_{a}", 1), _positive(node, f"dilation_{a}", 1)
        span = size + begin + end - dilation * (k - 1) - 1
        if span < 0:
            raise IRError(f"layer '{node.name}' (Col2Im): a kernel of {k} (dilation {dilation}) does not fit the "
                          f"padded {a} axis of {size + begin + end}")
        out.append((k, stride, dilation, begin, end, span // stride + 1))
    return out


def _shapes(node):
    _roi.check_inputs(node, 3)
    x, image_t, kernel_t = (t.betensor for t in node.inputs)
    image = [int(v) for v in image_t.reshape(-1).tolist()]
    kernel = [int(v) for v in kernel_t.reshape(-1).tolist()]
    if len(image) not in (2, 3) or len(kernel) != len(image) or min(image + kernel) <= 0:
        raise IRError(f"layer '{node.name}' (Col2Im): image shape {image} and block shape {kernel} must be 2 or 3 "
                      f"positive sizes each")
    geometry = fold_geometry(node, image, kernel)
    blocks = math.prod(g[5] for g in geometry)
    if x.dim() != 3 or x.shape[1] % math.prod(kernel) or x.shape[2] != blocks:
        raise IRError(f"layer '{node.name}' (Col2Im): input 0 {list(x.shape)} must be [N, C * {math.prod(kernel)}, "
                      f"{blocks}] for image {image}, block {kernel} and these strides/pads/dilations")
    return x, image, geometry


def fold_index(image, geometry, device) -> torch.Tensor:
    """[K, L]: the flat image position each (kernel offset, block) adds into; -1 in the pads."""
    per_axis = []
    for size, (k, stride, dilation, begin, _, blocks) in zip(image, geometry):
        pos = torch.arange(blocks, device=device)[None, :] * stride - begin + \
            torch.arange(k, device=device)[:, None] * dilation
        per_axis.append(torch.where((pos >= 0) & (pos < size), pos, torch.full_like(pos, -1)))
    index = torch.zeros((1, 1), dtype=torch.int64, device=device)
    valid = torch.ones((1, 1), dtype=torch.bool, device=device)
    for size, pos in zip(image, per_axis):
        k, blocks = pos.shape
        index = (index[:, None, :, None] * size + pos[None, :, None, :]).reshape(-1, index.shape[1] * blocks)
        valid = (valid[:, None, :, None] & (pos >= 0)[None, :, None, :]).reshape(-1, valid.shape[1] * blocks)
    return torch.where(valid, index, torch.full_like(index, -1))


def fold(x: torch.Tensor, image, geometry) -> torch.Tensor:
    n, ck, _ = x.shape
    index = fold_index(image, geometry, x.device)
    k = index.shape[0]
    c = ck // k
    total = math.prod(image)
    keep = (index >= 0).reshape(-1)
    src = x.reshape(n, c, -1)[:, :, keep]
    target = index.reshape(-1)[keep].expand(n, c, -1)
    out = torch.zeros((n, c, total), dtype=x.dtype, device=x.device)
    out.scatter_add_(2, target, src)
    return out.reshape([n, c] + image)


@op_register(OpType.Col2Im, "1.0")
def col2im_forward(self, *args):
    x, image, geometry = _shapes(self)
    out_t = self.outputs[0]
    if not self.quantized:
        out_t.betensor = fold(x, image, geometry)
        return out_t.betensor
    rescale = Rescale.read(self)
    s = fold(x.to(torch.int64), image, geometry)
    y = qmath.requantize(s, rescale.multiplier, rescale.shift, out_t.zerop, out_t.qmin, out_t.qmax)
    return QT.store_output(self, y, out_t)


@quant_register(OpType.Col2Im, "1.0")
def col2im_quantize(self, *args):
    """The top from its calibrated range, signed as the input; M/s ~ s_out / s_in of the
    activation bits. The tool chain sums the input's integers without its zero point: an
    input with one stays float."""
    _roi.quantized_inputs(self, 3, 0)
    x, out = self.inputs[0], self.outputs[0]
    QT.quantize_activation(self, out, signed=x.dtype.is_signed)
    Rescale.from_ratio(float(out.scale) / float(x.scale), out.qbits).write(self)
