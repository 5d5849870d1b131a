"""MaxPoolingWithArgMax: MAX pooling of an NHWC input and the flat index of each
window's maximum (ONNX MaxPool's second output, TensorFlow's max_pool_with_argmax).

The tool chain's semantics: the input is padded explicitly (pad_top/bottom/left/right)
and pooled with PyTorch's max_pool2d (kernel_y/x, stride_y/x, dilation_y/x, ceil_mode on
the padded size: the last window starts inside the padded input). Ties give the first
maximum in the window's row-major order. With (h, w) the maximum's input row and
column of an H x W x C input, the index is
  storage_order 0: h * W + w;   storage_order 1: w * H + h   (column-major)
and then, by `flatten_dim`: HW as it is, HWC index * C + c, NHWC n * HWC + index * C + c,
NCHW n * HWC + c * H * W + index (n the sample in the batch run). A window that lies
wholly in the padding gives the value 0 and the index 0.

Quantized: computed on the integers; the values take the input's quantization, the
indices are unquantized (scale 1, zp 0, qinvariant) int32, as the tool chain does."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, pad_nchw, param_choice, pooled_size
from ._movement import bool_param, index_output_quantization, int_param, set_values_and_indices
from .pooling import checked_window

FLATTEN_DIMS = ["HW", "HWC", "NHWC", "NCHW"]
PAD_VALUE = -float(1 << 31)   # the tool chain's padding value; a window holding only it is empty
INDEX_BITS = 32


def argmax_pool(node, x: torch.Tensor):
    """(values [N, OH, OW, C], int64 indices as `flatten_dim` says) of NHWC x (float32)."""
    if len(node.outputs) != 2:
        raise IRError(f"layer '{node.name}' ({node.type}): needs two tops (values, indices), "
                      f"has {len(node.outputs)}")
    if x.dim() != 4:
        raise IRError(f"layer '{node.name}' ({node.type}): takes an NHWC input, got {x.dim()}-D")
    flatten = param_choice(node, "flatten_dim", FLATTEN_DIMS)
    storage_order = int_param(node, "storage_order", 0)
    if storage_order not in (0, 1):
        raise IRError(f"layer '{node.name}' ({node.type}): storage_order must be 0 or 1, got {storage_order}")
    w = checked_window(node)
    ceil_mode = bool_param(node, "ceil_mode", False)
    n, h, wd, c = x.shape
    top, bottom, left, right = w["pads"]
    hp, wp = h + top + bottom, wd + left + right
    sizes = [pooled_size(size, k, s, d, 0, 0, ceil_mode)
             for size, k, s, d in zip((hp, wp), w["kernel"], w["stride"], w["dilation"])]
    if min(sizes) < 1:
        raise IRError(f"layer '{node.name}' ({node.type}): a {w['kernel'][0]}x{w['kernel'][1]} window does not fit "
                      f"the padded {h}x{wd} input")
    padded = pad_nchw(nhwc_to_nchw(x), w["pads"], PAD_VALUE)
    values, flat = F.max_pool2d(padded, w["kernel"], w["stride"], 0, w["dilation"], ceil_mode, return_indices=True)
    empty = values == PAD_VALUE
    values = values.masked_fill(empty, 0.0)
    flat = flat.masked_fill(empty, -(hp * wp * c * n + 2))   # the tool chain's mark of an empty window
    row, col = flat.div(wp, rounding_mode="floor") - top, flat.remainder(wp) - left
    index = row * wd + col
    if storage_order == 1:
        index = torch.where(row >= 0, col * h + row, index)
    index = nchw_to_nhwc(index)
    channel = torch.arange(c, dtype=torch.int64)
    sample = torch.arange(n, dtype=torch.int64).reshape(-1, 1, 1, 1) * (h * wd * c)
    if flatten == "HWC":
        index = index * c + channel
    elif flatten == "NHWC":
        index = sample + index * c + channel
    elif flatten == "NCHW":
        index = sample + channel * (h * wd) + index
    return nchw_to_nhwc(values), index.clamp(min=0)


@op_register(OpType.MaxPoolingWithArgMax, "1.0")
def maxpoolingwithargmax_forward(self, *args):
    return set_values_and_indices(self, *argmax_pool(self, self.inputs[0].betensor.to(torch.float32)))


@quant_register(OpType.MaxPoolingWithArgMax, "1.0")
def maxpoolingwithargmax_quantize(self, *args):
    param_choice(self, "flatten_dim", FLATTEN_DIMS)
    checked_window(self)
    QT.check_quantized_inputs(self)
    QT.copy_quantization(self.inputs[0], self.outputs[0])
    index_output_quantization(self, self.outputs[1], INDEX_BITS, signed=True)
