"""AffineGrid: torch's affine_grid (its sums elementwise: float_affine_grid). Theta (input 0, [N, 2, 3] or [N, 3, 4]) maps the base
grid of the size (input 1: [N, H, W, C] or [N, D, H, W, C], int32, as the parser writes it)
to sampling coordinates: out[n, (d,) h, w] = theta[n] @ (x_w, y_h(, z_d), 1), with x_w =
linspace(-1, 1, W) (times (W - 1) / W without align_corners). Top [N, H, W, 2] or [N, D,
H, W, 3], float32 as torch computes it.

Quantized (the tool chain's form; docs/integer-semantics.md, AffineGrid): constants `w_lut`,
`h_lut` (, `d_lut`): the base coordinates times 2^multiplier_bits, rounded (int16); out =
requantize(clamp_int32(theta_R q_theta . lut + theta_T q_theta 2^multiplier_bits),
scale_value, shift_value) on theta's stored integers (its zero point must be 0)."""
import math

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale, read_lut, set_constant
from ..registry import OpType, op_register, quant_register
from . import _roi

INT32 = (-(1 << 31), (1 << 31) - 1)


def _align(node) -> bool:
    value = node.get_param("align_corners", False)
    if value not in (True, False):
        raise IRError(f"layer '{node.name}' (AffineGrid): align_corners {value!r} must be true or false")
    return bool(value)


def _sizes(node, theta: torch.Tensor, size: torch.Tensor) -> list:
    """The grid's spatial sizes ((D,) H, W) from the size input (NHWC order)."""
    rank = theta.shape[1] if theta.dim() == 3 else 0
    if rank not in (2, 3) or theta.shape[2] != rank + 1:
        raise IRError(f"layer '{node.name}' (AffineGrid): theta must be [N, 2, 3] or [N, 3, 4], got "
                      f"{list(theta.shape)}")
    values = [int(v) for v in size.reshape(-1).tolist()]
    if len(values) != rank + 2 or any(v <= 0 for v in values[1:-1]):
        raise IRError(f"layer '{node.name}' (AffineGrid): size {values} must be {rank + 2} values [N, "
                      f"{'D, ' if rank == 3 else ''}H, W, C] with positive spatial sizes for a theta of "
                      f"{list(theta.shape)}")
    return values[1:-1]


def base_coordinates(size: int, align: bool, dtype=torch.float32) -> torch.Tensor:
    """torch's linspace(-1, 1, size) (the first half from -1, the second from 1), products and
    sums as separate steps (torch's own may fuse them), times (size - 1) / size without
    align_corners."""
    i = torch.arange(size, dtype=dtype)
    step = torch.tensor(2.0 / (size - 1) if size > 1 else 0.0, dtype=dtype)
    line = torch.where(i < max(size // 2, 1), -1 + i * step, 1 - (size - 1 - i) * step)
    return line if align else line * (size - 1) / size


def float_affine_grid(theta: torch.Tensor, sizes, align: bool) -> torch.Tensor:
    """torch's affine_grid, its sums taken elementwise in the order x, y(, z), translation
    (torch's batched product may sum in any order: npuopt-run then could not match it)."""
    axes = [base_coordinates(size, align, theta.dtype).to(theta.device) for size in sizes[::-1]]
    grids = torch.meshgrid(*axes[::-1], indexing="ij")[::-1]          # x, y(, z), each [(D,) H, W]
    out = []
    for i in range(len(sizes)):
        row = theta[:, i].reshape((-1, len(sizes) + 1) + (1,) * len(sizes))
        total = grids[0] * row[:, 0]
        for k in range(1, len(sizes)):
            total = total + grids[k] * row[:, k]
        out.append(total + row[:, -1])
    return torch.stack(out, -1)


@op_register(OpType.AffineGrid, "1.0")
def affine_grid_forward(self, *args):
    _roi.check_inputs(self, 2)
    theta_t, size_t = self.inputs
    theta = theta_t.betensor
    sizes = _sizes(self, theta, size_t.betensor)
    align = _align(self)
    out_t = self.outputs[0]
    if not self.quantized:
        out_t.betensor = float_affine_grid(theta, sizes, align)
        return out_t.betensor
    mult_bits = self.get_param("multiplier_bits", 0)
    if isinstance(mult_bits, bool) or not isinstance(mult_bits, int) or not 0 <= mult_bits <= 30:
        raise IRError(f"layer '{self.name}' (AffineGrid): multiplier_bits {mult_bits!r} must be an integer "
                      f"in [0, 30]")
    luts = [read_lut(self, f"{a}_lut")[0].to(torch.float64).reshape(-1) for a in "whd"[:len(sizes)]]
    if [len(t) for t in luts] != sizes[::-1]:
        raise IRError(f"layer '{self.name}' (AffineGrid): w_lut/h_lut/d_lut hold {[len(t) for t in luts]} "
                      f"values, the grid is {sizes[::-1]}")
    base = torch.stack(torch.meshgrid(*luts[::-1], indexing="ij")[::-1], -1).reshape(-1, len(sizes))
    q = theta.to(torch.float64)
    out = base @ q[:, :, :-1].transpose(1, 2) + q[:, None, :, -1] * 2.0 ** mult_bits
    rescale = Rescale.read(self)
    y = qmath.requantize(torch.clamp(out, *INT32), rescale.multiplier, rescale.shift, out_t.zerop, out_t.qmin,
                         out_t.qmax)
    return QT.store_output(self, y.reshape([theta.shape[0]] + sizes + [len(sizes)]), out_t)


@quant_register(OpType.AffineGrid, "1.0")
def affine_grid_quantize(self, *args):
    """As the tool chain: the top signed from its calibrated range; multiplier_bits =
    clamp(ceil(log2(largest side)) + 1, 8, 14); M/s ~ s_out / (s_theta 2^multiplier_bits)
    of the activation bits. The tool chain reads theta's integers without its zero point:
    a theta with one stays float."""
    _roi.quantized_inputs(self, 2, 0, "theta")
    theta, out = self.inputs[0], self.outputs[0]
    sizes = list(out.ir_shape[1:-1])
    QT.quantize_activation(self, out, signed=True)
    mult_bits = max(8, min(14, math.ceil(math.log2(max(sizes))) + 1))
    for axis, size in zip("whd", sizes[::-1]):
        lut = torch.round(base_coordinates(size, _align(self)) * 2.0 ** mult_bits)
        set_constant(self, f"{axis}_lut", torch.clamp(lut, Dtype.INT16.qmin, Dtype.INT16.qmax), Dtype.INT16)
    Rescale.from_ratio(float(out.scale) / (float(theta.scale) * 2.0 ** mult_bits), out.qbits).write(self)
    self.params["multiplier_bits"] = mult_bits
