"""Pad: [before, after] per axis; CONSTANT, REFLECT (edge not repeated), SYMMETRIC
(edge repeated), EDGE (edge value repeated) or WRAP (periodic), on any axes of any
layout; negative pads crop.

Quantized: the input's quantization is passed through and the same code moves the
integers; CONSTANT pads with the integer the quantized IR stores as `constant_value`
(the float constant quantized with the top's scale/zp, saturated: 0.0 pads -zp)."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import tensors as QT
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice

PAD_MODES = ["CONSTANT", "REFLECT", "SYMMETRIC", "EDGE", "WRAP"]


def _source_index(size, before, after, mode, device):
    """Source index of every padded position along one axis. Mirroring is periodic,
    so pads wider than the axis keep reflecting (as NumPy's pad does)."""
    pos = torch.arange(-before, size + after, device=device)
    if mode == "EDGE":
        return pos.clamp(0, size - 1)
    if mode == "WRAP":
        return pos.remainder(size)
    symmetric = mode == "SYMMETRIC"
    period = 2 * size if symmetric else max(2 * (size - 1), 1)
    folded = pos.remainder(period)
    return torch.where(folded < size, folded, period - int(symmetric) - folded)


def _fill(node):
    """CONSTANT's fill: the float constant, or in a quantized layer the stored integer."""
    value = node.get_param("constant_value", 0)
    if not node.quantized:
        return float(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise IRError(f"layer '{node.name}': constant_value '{value}' of a quantized Pad must be an integer")
    return value


@op_register(OpType.Pad, "1.0")
def pad_forward(self, *args):
    x = self.inputs[0].betensor
    pads = [[int(p) for p in pair] for pair in self.get_param("pads")]
    if len(pads) != x.dim() or any(len(pair) != 2 for pair in pads):
        raise IRError(f"layer '{self.name}': pads {pads} must be one [before, after] per axis ({x.dim()})")
    mode = param_choice(self, "mode", PAD_MODES, "CONSTANT")
    if mode == "CONSTANT":
        flat = [p for pair in reversed(pads) for p in pair]  # F.pad lists the last axis first
        out = F.pad(x, flat, value=_fill(self))
    else:
        out = x
        for axis, (before, after) in enumerate(pads):
            if before or after:
                if x.shape[axis] == 0:
                    raise IRError(f"layer '{self.name}': cannot pad an empty axis {axis} in {mode} mode")
                index = _source_index(x.shape[axis], before, after, mode, x.device)
                out = out.index_select(axis, index)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Pad, "1.0")
def pad_quantize(self, *args):
    QT.pass_through(self)
    if param_choice(self, "mode", PAD_MODES, "CONSTANT") == "CONSTANT":
        out = self.outputs[0]
        value = torch.tensor([float(self.get_param("constant_value", 0.0))])
        self.params["constant_value"] = int(qmath.quantize(value, out.scale, out.zerop, out.qmin, out.qmax)[0])
