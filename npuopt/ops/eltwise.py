"""Eltwise: elementwise ADD/SUB/MUL/MAX/MIN of two inputs, with broadcasting.

Quantized, with A = q_a + zp_a, B = q_b + zp_b (int64):
  ADD/SUB: X = A*Ma +- B*Mb (scale_value=[Ma, Mb], one common shift_value)
  MAX/MIN: X = max/min(A*Ma, B*Mb)
  MUL:     X = A*B, multiplier scale_value=M (ratio s_out / (s_a*s_b))
then the common output stage (rounding shift, fused activation, saturation)."""
import torch

from ..errors import IRError
from ..quant import layers as QL
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from .activation import apply_fused_activation

FLOAT_ELTWISE = {
    "ADD": torch.add,
    "SUB": torch.sub,
    "MUL": torch.mul,
    "MAX": torch.maximum,
    "MIN": torch.minimum,
}


def eltwise_method(node) -> str:
    method = str(node.get_param("method")).upper()
    if method not in FLOAT_ELTWISE:
        raise IRError(f"layer '{node.name}': unsupported Eltwise method '{method}' "
                      f"(supported: {', '.join(FLOAT_ELTWISE)})")
    if len(node.inputs) != 2:
        raise IRError(f"layer '{node.name}': Eltwise takes 2 inputs, the IR gives {len(node.inputs)}")
    return method


def eltwise_quantized(self, method):
    a_t, b_t = self.inputs
    # exact in float64: |A|, |B| < 2^17 and multipliers < 2^16
    a = QL.shifted_input_scratch(a_t, torch.float64, "eltwise_a")
    b = QL.shifted_input_scratch(b_t, torch.float64, "eltwise_b")
    ab, bb = QL.shifted_absmax(a_t), QL.shifted_absmax(b_t)
    in_place = a.shape == torch.broadcast_shapes(a.shape, b.shape)
    if method == "MUL":
        M, shift = QL.get_rescale(self)
        return QL.finish(self, a.mul_(b) if in_place else a * b, M, shift, self.outputs[0], bound=float(ab * bb))
    (ma, mb), shift = QL.get_rescale(self)
    a, b = a.mul_(int(ma)), b.mul_(int(mb))
    op = {"ADD": "add", "SUB": "sub", "MAX": "maximum", "MIN": "minimum"}[method]
    x = getattr(a, op + "_")(b) if in_place and op in ("add", "sub") else getattr(torch, op)(a, b)
    return QL.finish(self, x, 1, shift, self.outputs[0], bound=float(ab * abs(int(ma)) + bb * abs(int(mb))))


@op_register(OpType.Eltwise, "1.0")
def eltwise_forward(self, *args):
    method = eltwise_method(self)
    if self.quantized:
        return eltwise_quantized(self, method)
    a, b = (t.betensor for t in self.inputs)
    out = apply_fused_activation(self, FLOAT_ELTWISE[method](a, b))
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Eltwise, "1.0")
def eltwise_quantize(self, *args):
    method = eltwise_method(self)
    act = QL.fused_activation(self)
    if act not in QL.LINEAR_ACTIVATIONS:
        raise QL.Unsupported(f"layer '{self.name}' (Eltwise): fused activation '{act}' has no integer form")
    QL.check_quantized_inputs(self)
    a_t, b_t = self.inputs
    out = self.outputs[0]
    QL.quantize_activation(self, out)
    if method == "MUL":
        ratio = float(out.scale) / (float(a_t.scale) * float(b_t.scale))
        QL.set_rescale(self, ratio)
    else:
        ra, rb = float(out.scale) / float(a_t.scale), float(out.scale) / float(b_t.scale)
        ma, mb, shift = QL.common_shift_multipliers([ra, rb])
        QL.set_rescale_values(self, [ma, mb], shift)
        ratio = 2.0 ** -shift
    QL.prepare_activation(self, out, ratio, act)
