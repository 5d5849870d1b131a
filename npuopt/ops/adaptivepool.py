"""AdaptivePool: MAX or AVG pooling of an NHWC (or HWC) input to output_size = [OH, OW],
window i of an axis of length L covering [floor(i * L / O), ceil((i + 1) * L / O)) (the
windows of PyTorch's adaptive pooling, which the tool chain computes the float forward
with). The tool chain has it on 3-D and 4-D inputs only.

Quantized, the quantization passed through: MAX = the max of q; AVG averages q itself
(no zero point: in and out share it): S = the window's sum of q, out = clamp(
round_half_even(S * M * 2^-s), qmin, qmax), M, s the 8-bit approximation of fl32(1 /
area), area = the window's taps. FractionalPool shares that AVG (window_average)."""
import torch
import torch.nn.functional as F

from ..dtype import computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, param_choice

METHODS = ["MAX", "AVG"]
AVG_MULTIPLIER_BITS = 8


def output_size(node):
    size = node.get_param("output_size")
    if not isinstance(size, (list, tuple)) or len(size) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in size):
        raise IRError(f"layer '{node.name}' ({node.type}): output_size must be two positive integers "
                      f"[height, width], got {size!r}")
    return tuple(size)


def batched(node, x: torch.Tensor) -> torch.Tensor:
    """NCHW view of the [N]HWC input."""
    if x.dim() not in (3, 4):
        raise IRError(f"layer '{node.name}' ({node.type}): takes an NHWC or HWC input, got {x.dim()}-D")
    return nhwc_to_nchw(x if x.dim() == 4 else x.unsqueeze(0))


def unbatched(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """NCHW y back in x's [N]HWC layout."""
    y = nchw_to_nhwc(y)
    return y if x.dim() == 4 else y[0]


def window_average(sums: torch.Tensor, areas: torch.Tensor, out_t) -> torch.Tensor:
    """Integer AVG of windows of `areas` taps whose q sum to `sums` (areas broadcast)."""
    m, s = qmath.scale_approximation(torch.tensor(1.0) / areas.to(torch.float32), AVG_MULTIPLIER_BITS)
    return qmath.requantize(sums, m, s, 0, out_t.qmin, out_t.qmax)


def bounds(size: int, out: int):
    """(starts, ends) of the adaptive windows along an axis."""
    i = torch.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def adaptive_sums(x: torch.Tensor, out_hw):
    """[N, C, OH, OW] window sums of NCHW x (float64 integers, exact) and [OH, OW] areas."""
    hs, he = bounds(x.shape[2], out_hw[0])
    ws, we = bounds(x.shape[3], out_hw[1])
    c = F.pad(x.to(torch.float64).cumsum(2).cumsum(3), (1, 0, 1, 0))
    sums = c[:, :, he][..., we] - c[:, :, hs][..., we] - c[:, :, he][..., ws] + c[:, :, hs][..., ws]
    return sums, (he - hs)[:, None] * (we - ws)[None, :]


@op_register(OpType.AdaptivePool, "1.0")
def adaptivepool_forward(self, *args):
    method = param_choice(self, "method", METHODS)
    size = output_size(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    x = batched(self, x_t.betensor)
    if not self.quantized:
        pool = F.adaptive_max_pool2d if method == "MAX" else F.adaptive_avg_pool2d
        out_t.betensor = unbatched(pool(computing_float(x), size), x_t.betensor)
        return out_t.betensor
    if method == "MAX":
        y = F.adaptive_max_pool2d(x.to(torch.float64), size)
    else:
        y = window_average(*adaptive_sums(x, size), out_t)
    return QT.store_output(self, unbatched(y, x_t.betensor), out_t)


@quant_register(OpType.AdaptivePool, "1.0")
def adaptivepool_quantize(self, *args):
    param_choice(self, "method", METHODS)
    output_size(self)
    QT.pass_through(self)
