"""MVN: (x - mean) / sqrt(var + epsilon) over `axis` (the parser's default epsilon is
1e-9), no weights.

Quantized as LayerNorm's normalized value n (docs/integer-semantics.md "LayerNorm",
_norm.py) with the output's own scale: the tool chain folds the output rescale into
n's, so MVN stores n's multiplier/shift as scale_value/shift_value (var_shift_value
as LayerNorm's) and out = clamp(n - zp_out). npuopt writes a signed output with zero
point 0 (a shifted range would cut n) and n = x_hat * s_out: for <= 8 bits scale/shift
~ s_out * sqrt(N) / 2^(7 + var_shift / 2) (n = R(d * g, M, 8 + s)), for wider inputs
~ s_out / 2^7 (g's rescale), 15-bit multipliers."""
import math

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale, Shift
from ..registry import OpType, op_register, quant_register
from . import _norm
from ._symmetric import symmetric_output


def layout(node, shape) -> _norm.Layout:
    axes = _norm.check_axes(node, node.get_param("axis"), len(shape))
    return _norm.plain_layout(shape, axes, axes, axes[-1])


@op_register(OpType.MVN, "1.0")
def mvn_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    lay = layout(self, x_t.betensor.shape)
    _norm.check_constants(self, lay)
    if self.quantized:
        n = _norm.normalized_integers(x_t.betensor, lay, x_t, out_t, Rescale.read(self),
                                      Shift.read(self, "var_").value)
        return QT.store_output(self, qmath.requantize(n, 1, 0, out_t.zerop, out_t.qmin, out_t.qmax), out_t)
    eps = float(self.get_param("epsilon", 1e-9))
    out_t.betensor = _norm.affine_float(self, _norm.normalized_float(x_t.betensor, lay, eps), lay)
    return out_t.betensor


@quant_register(OpType.MVN, "1.0")
def mvn_quantize(self, *args):
    if "weights" in self.constants or "biases" in self.constants:
        raise QT.Unsupported(f"layer '{self.name}' (MVN): weights or biases")
    x_t = _norm.check_input(self)
    out_t = self.outputs[0]
    count = layout(self, x_t.ir_shape).count
    symmetric_output(self, out_t)
    if x_t.qbits <= _norm.NARROW_BITS:
        var_shift = _norm.variance_shift(count)
        ratio = out_t.scale * math.sqrt(count) / 2.0 ** (_norm.WIDE_NORM_SHIFT + (var_shift >> 1))
    else:
        var_shift, ratio = 0, out_t.scale / (1 << _norm.WIDE_NORM_SHIFT)
    Shift(var_shift, Dtype.UINT8).write(self, "var_")
    Rescale.from_ratio(ratio, _norm.NORM_MULTIPLIER_BITS).write(self)
    fields.write_lut(self, qmath.ISQRT_TABLE, Dtype.INT16)
