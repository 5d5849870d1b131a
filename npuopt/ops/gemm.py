"""Gemm: y = alpha * A' @ B' (+ beta * C), A' = A (transposed on its last two axes when
`trans_a`), B' likewise with `trans_b`; C an optional third input broadcast to the
product (the parser always writes one, zeros when the model has none). Float: the
product in float32, as the tool chain.

Quantized, the tool chain's forms (P = (q_a + zp_a)' @ (q_b + zp_b)' in exact
integers; the tool chain takes it in float32, the same integers while partial sums
stay below 2^24):
* three inputs: `scale_value=[M, M_p, M_c]`, one `shift_value` s:
  out = requantize(sign(alpha) * M_p * P + sign(beta) * M_c * (q_c + zp_c), M, s);
* two inputs: out = sign(alpha) * requantize(P, `scale_value`, `shift_value`) (the
  sign applied after the zero point and the clamp, then saturated to the dtype;
  npuopt quantizes such an output with zero point 0 when alpha < 0)."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import broadcast_shape, check_inputs
from .eltwise import branch_multipliers

NO_PRODUCT_CAP = 1   # Gemm's branch products are int64: no 32-bit cap on the multipliers


def _float_param(node, key: str, default: float) -> float:
    value = node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must be a number, got {value!r}")
    return float(value)


def _operands(node, a: torch.Tensor, b: torch.Tensor):
    """A' and B', checked: at least 2-D when transposed, inner sizes equal, batch axes broadcast."""
    for key, t, which in (("trans_a", a, "A"), ("trans_b", b, "B")):
        if t.dim() < 1 or (node.get_param(key, False) and t.dim() < 2):
            raise IRError(f"layer '{node.name}' ({node.type}): {which} of shape {list(t.shape)} cannot be "
                          f"multiplied{' transposed (' + key + ')' if t.dim() else ''}")
    if node.get_param("trans_a", False):
        a = a.transpose(-1, -2)
    if node.get_param("trans_b", False):
        b = b.transpose(-1, -2)
    inner_b = b.shape[-2] if b.dim() > 1 else b.shape[0]
    if a.shape[-1] != inner_b:
        raise IRError(f"layer '{node.name}' ({node.type}): A' {list(a.shape)} and B' {list(b.shape)} "
                      f"do not multiply (inner sizes {a.shape[-1]} and {inner_b})")
    if a.dim() > 2 and b.dim() > 2:
        broadcast_shape(node, a[..., :1, :1], b[..., :1, :1])
    return a, b


def _check_bias(node, product: torch.Tensor) -> None:
    """C must broadcast to the product's shape (it is added to every product element)."""
    if len(node.inputs) < 3:
        return
    c = node.inputs[2].betensor
    try:
        fits = torch.broadcast_shapes(product.shape, c.shape) == product.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise IRError(f"layer '{node.name}' ({node.type}): C of shape {list(c.shape)} does not broadcast "
                      f"to the product's {list(product.shape)}")


def gemm_quantized(node):
    a_t, b_t = node.inputs[:2]
    out = node.outputs[0]
    a, b = _operands(node, QT.shifted(a_t, torch.float32), QT.shifted(b_t, torch.float32))
    p = qmath.exact_matmul(a, b, QT.shifted_absmax(a_t))
    _check_bias(node, p)
    alpha_sign = -1.0 if _float_param(node, "alpha", 1.0) < 0 else 1.0
    if len(node.inputs) == 2:
        y = Rescale.read(node).apply(p, out.zerop, out.qmin, out.qmax) * alpha_sign
        return QT.store_output(node, y.clamp_(out.dtype.qmin, out.dtype.qmax), out)
    beta_sign = -1.0 if _float_param(node, "beta", 1.0) < 0 else 1.0
    br = BranchRescales.read(node, 3)
    m, m_p, m_c = br.multipliers
    acc = p * (m_p * alpha_sign) + QT.shifted(node.inputs[2]) * (m_c * beta_sign)
    return QT.store_output(node, qmath.requantize(acc, m, br.shifts, out.zerop, out.qmin, out.qmax), out)


@op_register(OpType.Gemm, "1.0")
def gemm_forward(self, *args):
    check_inputs(self, (2, 3))
    if self.quantized:
        return gemm_quantized(self)
    a, b = _operands(self, *(computing_float(t.betensor) for t in self.inputs[:2]))
    y = torch.matmul(a, b) * _float_param(self, "alpha", 1.0)
    _check_bias(self, y)
    if len(self.inputs) == 3:
        y = y + computing_float(self.inputs[2].betensor) * _float_param(self, "beta", 1.0)
    self.outputs[0].betensor = y
    return y


@quant_register(OpType.Gemm, "1.0")
def gemm_quantize(self, *args):
    check_inputs(self, (2, 3))
    QT.check_quantized_inputs(self)
    a_t, b_t = self.inputs[:2]
    out = self.outputs[0]
    st = settings_of(self)
    alpha = _float_param(self, "alpha", 1.0)
    if alpha == 0:
        raise QT.Unsupported(f"layer '{self.name}' ({self.type}): alpha = 0 has no integer form")
    if len(self.inputs) == 2 and alpha < 0:
        # the sign flips the output after its zero point: only a zero point of 0 survives it
        lo, hi = QT.activation_range(self, out, True)
        QT.quantize_activation(self, out, -max(-lo, hi), max(-lo, hi))
    else:
        QT.quantize_activation(self, out)
    product_ratio = abs(alpha) * out.scale / (a_t.scale * b_t.scale)
    if len(self.inputs) == 2:
        Rescale.from_ratio(product_ratio, st.multiplier_bits).write(self)
        return
    c_t = self.inputs[2]
    bias_ratio = abs(_float_param(self, "beta", 1.0)) * out.scale / c_t.scale
    (m_p, m_c), m, shift = branch_multipliers([product_ratio, bias_ratio], [NO_PRODUCT_CAP] * 2,
                                              st.multiplier_bits)
    BranchRescales([m, m_p, m_c], shift).write(self)
