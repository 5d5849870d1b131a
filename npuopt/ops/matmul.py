"""MatMul: batched matrix product of two inputs, optionally transposing either one's last two axes.

Quantized: acc = A @ B with A = q_a + zp_a, B = q_b + zp_b in exact integers, then
one multiplier/shift for s_out / (s_a * s_b). (The tool chain takes this product
in float32, which equals the exact integers while partial sums stay below 2^24.)

`fused_multiplier` (the stage-1 pass merge_matmul_mul, as the tool chain's): the float
output is A @ B times it; quantized, it joins the rescale and leaves the IR's params.

fp8 (an fp8 quant_type): both inputs and the output in the fp8 format, acc = A @ B of
the format's values (exact in float64), then the float32 rescale s_out / (s_a * s_b)
and rounding to the format (quant/minifloat.py)."""
import torch

from ..quant import minifloat, qmath
from ..quant import tensors as QT
from ..quant.fields import FloatScale, Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register


def _operands(node, a, b):
    if node.get_param("trans_a", False):
        a = a.transpose(-1, -2)
    if node.get_param("trans_b", False):
        b = b.transpose(-1, -2)
    return a, b


def matmul_quantized(self):
    a_t, b_t = self.inputs
    out = self.outputs[0]
    if out.dtype.is_minifloat:  # fp8 operands: their products and sums are exact in float64
        a, b = _operands(self, a_t.betensor.to(torch.float64), b_t.betensor.to(torch.float64))
        return QT.store_output(self, minifloat.requantize(torch.matmul(a, b), FloatScale.read(self).scale,
                                                    out.dtype.value), out)
    a, b = _operands(self, QT.shifted(a_t, torch.float32), QT.shifted(b_t, torch.float32))
    acc = qmath.exact_matmul(a, b, QT.shifted_absmax(a_t))
    return QT.store_output(self, Rescale.read(self).apply(acc, out.zerop, out.qmin, out.qmax), out)


@op_register(OpType.MatMul, "1.0")
def matmul_forward(self, *args):
    if self.quantized:
        return matmul_quantized(self)
    a, b = _operands(self, *(t.betensor for t in self.inputs))
    out = torch.matmul(a, b)
    if "fused_multiplier" in self.params:
        out = out * torch.tensor(float(self.params["fused_multiplier"]), dtype=torch.float32)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.MatMul, "1.0")
def matmul_quantize(self, *args):
    QT.check_quantized_inputs(self)
    a_t, b_t = self.inputs
    out = self.outputs[0]
    fused = float(self.params.pop("fused_multiplier", 1.0))  # into the rescale
    if settings_of(self).fp8_activations:
        if not (a_t.dtype.is_minifloat and b_t.dtype.is_minifloat):
            raise QT.Unsupported(f"layer '{self.name}' (MatMul): an fp8 MatMul takes two fp8 inputs")
        QT.quantize_activation(self, out)
        f32 = torch.float32
        FloatScale(torch.tensor(out.scale, dtype=f32) * fused / (torch.tensor(a_t.scale, dtype=f32) *
                                                                 torch.tensor(b_t.scale, dtype=f32))).write(self)
        return
    QT.quantize_activation(self, out)
    Rescale.from_ratio(out.scale * fused / (a_t.scale * b_t.scale), settings_of(self).multiplier_bits).write(self)
