"""NormalizedMoments (TensorFlow's normalize_moments): inputs the sum of x - shift, the sum
of squares and the shift; `counts` (the number of elements summed, taken as an integer as
the tool chain takes it). Tops, float32: mean = sum / counts + shift, variance =
squares / counts - (sum / counts)^2.

Quantized, the tool chain's form (each input i as A_i = q_i + zp_i): the mean as an
add-like Eltwise (_add_like) of the sum (its scale times counts) and the shift,
`mean_scale_value = [M, M_sum, M_shift]`, `mean_shift_value` s: mean = R((A_sum * M_sum +
A_shift * M_shift), M, s); the squared mean from the table `lut` (unsigned, activation
bits), indexed by the sum's stored integer from its dtype's lowest code (interpolated past
lut_items_in_bits), holding (sum / counts)^2 on the symmetric grid of its calibrated
range; the variance as the add-like difference of the squares (scale times counts) and
that table's value, `var_scale_value = [M, M_squares, M_table]`, `var_shift_value`.
The branch multipliers are capped at 32767, 16383 where a zero point enters the branch.
The mean's top is signed when the sum and the shift are, the variance's always."""
import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._add_like import add_like_rescale
from ._broadcast import broadcast_shape, check_inputs
from ._stats import keep_internal, quantize_internal_symmetric, stored_rescales
from .activation import build_lut

BRANCH_CLIP = 32767


def counts(node) -> int:
    check_inputs(node, (3,))
    if len(node.outputs) != 2:
        raise IRError(f"layer '{node.name}' (NormalizedMoments): needs two tops (mean, variance), has "
                      f"{len(node.outputs)}")
    broadcast_shape(node, *(t.betensor for t in node.inputs))
    value = node.get_param("counts")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) < 1:
        raise IRError(f"layer '{node.name}' (NormalizedMoments): counts must be a number of at least 1, got "
                      f"{value!r}")
    return int(value)


def _table_integers(node, sum_t) -> torch.Tensor:
    """The squared mean looked up by the sum's stored integer."""
    table, dtype = fields.read_lut(node)
    base = qmath.integer_range(sum_t.qbits, sum_t.dtype.is_signed)[0]
    return qmath.lut_lookup(sum_t.betensor.to(torch.int64) - base, table, sum_t.qbits, dtype.bits, dtype.is_signed)


@op_register(OpType.NormalizedMoments, "1.0")
def normalizedmoments_forward(self, *args):
    n = counts(self)
    sum_t, squares_t, shift_t = self.inputs
    mean_t, var_t = self.outputs
    if not self.quantized:
        mean = computing_float(sum_t.betensor) / n
        square = mean * mean
        mean_t.betensor = mean + computing_float(shift_t.betensor)
        var_t.betensor = computing_float(squares_t.betensor) / n - square
        keep_internal(self, [square])
        return mean_t.betensor, var_t.betensor
    a = [t.betensor.to(torch.int64) + int(t.zerop) for t in self.inputs]
    m = stored_rescales(self, 3, "mean_", shifts=1)
    mean = a[0] * m.multipliers[1] + a[2] * m.multipliers[2]
    QT.store_output(self, qmath.requantize(mean, m.multipliers[0], m.shifts[0], mean_t.zerop, mean_t.qmin,
                                           mean_t.qmax), mean_t)
    v = stored_rescales(self, 3, "var_", shifts=1)
    var = a[1] * v.multipliers[1] - _table_integers(self, sum_t) * v.multipliers[2]
    QT.store_output(self, qmath.requantize(var, v.multipliers[0], v.shifts[0], var_t.zerop, var_t.qmin,
                                           var_t.qmax), var_t)
    return mean_t.betensor, var_t.betensor


def _write(node, prefix: str, scaled, other, out, clip: int) -> None:
    """The add-like rescale of `scaled` (its scale times counts) and `other` into out."""
    m_a, m_b, m_out, shift = add_like_rescale(scaled, other.scale, out.scale, clip, settings_of(node).multiplier_bits)
    BranchRescales([m_out, m_a, m_b], shift, [Dtype.UINT16] * 3, fields.shift_dtype(shift)).write(node, prefix)


@quant_register(OpType.NormalizedMoments, "1.0")
def normalizedmoments_quantize(self, *args):
    n = counts(self)
    QT.check_quantized_inputs(self)
    sum_t, squares_t, shift_t = self.inputs
    mean_t, var_t = self.outputs
    square_t = self.placeholders[0]
    QT.quantize_activation(self, mean_t, signed=sum_t.dtype.is_signed and shift_t.dtype.is_signed)
    QT.quantize_activation(self, var_t, signed=True)
    quantize_internal_symmetric(self, square_t, False)
    f32 = torch.float32
    clip = BRANCH_CLIP // 2 if int(sum_t.zerop) or int(shift_t.zerop) else BRANCH_CLIP
    _write(self, "mean_", float(torch.tensor(sum_t.scale, dtype=f32) * n), shift_t, mean_t, clip)
    table = build_lut(self, lambda m: (m / n) ** 2, sum_t, square_t)
    fields.write_lut(self, table, Dtype.integer(settings_of(self).activation_bits, False))
    clip = BRANCH_CLIP // 2 if int(squares_t.zerop) else BRANCH_CLIP
    _write(self, "var_", float(torch.tensor(squares_t.scale, dtype=f32) * n), square_t, var_t, clip)
