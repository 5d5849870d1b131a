"""LayerNorm over the last axes (`axis`), with `weights`/`biases` shaped like them.

Quantized (docs/integer-semantics.md, "LayerNorm"): per row of N normalized elements,
A = q + zp_x, S = sum A, u = RRS(N*A - S, p), V = max(sum u^2 + E, 1),
V' = V * 4^j just below 2^62, R = isqrt(V'), n = round_div(u * 2^(j+F), R): the
normalized value times s_n = 2^F / sqrt(N); then z = n * W + biases and the output
stage (per tensor, or per normalized element). p = `norm_shift`, E = `variance_bias`
(round(eps * N^3 * s_x^2 / 4^p)), F = `norm_bits` are stored params."""
import math

import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import tensors as QT
from ..quant import layers as QL  # noqa: F401  (being ported)
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import axis_list

SQRT_LIMIT_BITS = 62      # V * 4^j < 2^62, so |u * 2^j| < 2^31
MAX_NORM_BITS = 30        # round_div(u * 2^(j+F), R): 2 * 2^(31+F) + R < 2^63
VARIANCE_LIMIT = 2.0 ** 61


def _normalized_shape(node, ndim: int):
    axes = axis_list(node, "axis", ndim)
    if axes != list(range(ndim - len(axes), ndim)):
        raise IRError(f"layer '{node.name}': LayerNorm normalizes the last axes only, "
                      f"got axis {node.get_param('axis')} for a {ndim}-D input")
    return axes[0]


def _norm_params(node):
    values = {}
    for key, lo, hi in (("norm_shift", 0, 62), ("variance_bias", 0, (1 << 62) - 1), ("norm_bits", 0, MAX_NORM_BITS)):
        v = node.get_param(key)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise IRError(f"layer '{node.name}' (LayerNorm): '{key}' must be an integer in [{lo}, {hi}], got {v!r}")
        values[key] = v
    return values["norm_shift"], values["variance_bias"], values["norm_bits"]


def normalized_integers(a: torch.Tensor, p: int, e: int, f: int) -> torch.Tensor:
    """n = round_div(u * 2^(j+F), isqrt(V * 4^j)) per row of a [rows, N] int64 tensor
    of A = q + zp (the doc's steps up to the output stage)."""
    n = a.shape[1]
    u = qmath.rounding_right_shift(a * n - a.sum(dim=1, keepdim=True), p)
    v = ((u * u).sum(dim=1, keepdim=True) + e).clamp_(min=1)
    if v.numel() and int(v.max()) >= 1 << SQRT_LIMIT_BITS:
        raise IRError(f"LayerNorm variance sum {int(v.max())} reaches 2^{SQRT_LIMIT_BITS}: norm_shift too small")
    vn, j = qmath.even_normalize(v, SQRT_LIMIT_BITS)
    r = qmath.isqrt(vn)
    return qmath.round_div(u * (torch.ones_like(j) << (j + f)), r)


def layernorm_quantized(self):
    x_t, out_t = self.inputs[0], self.outputs[0]
    x = x_t.betensor
    first = _normalized_shape(self, x.dim())
    count = math.prod(x.shape[first:])
    p, e, f = _norm_params(self)
    w = QL.weight_values(self).reshape(-1)
    if w.numel() not in (1, count):
        raise IRError(f"layer '{self.name}' (LayerNorm): {w.numel()} weights for {count} normalized elements")
    a = QL.shifted_input(x_t).reshape(-1, count)
    z = normalized_integers(a, p, e, f) * w.to(a.device)
    y = QL.finish_linear(self, z, bound=None)
    out_t.betensor = y.reshape(x.shape)
    return out_t.betensor


@op_register(OpType.LayerNorm, "1.0")
def layernorm_forward(self, *args):
    if self.quantized:
        return layernorm_quantized(self)
    x = self.inputs[0].betensor
    shape = x.shape[_normalized_shape(self, x.dim()):]
    weights = self.get_constant("weights").betensor.reshape(shape)
    biases = self.get_constant("biases").betensor.reshape(shape)
    out = F.layer_norm(x, shape, weights, biases, float(self.get_param("epsilon", 1e-5)))
    self.outputs[0].betensor = out
    return out


def _norm_shift(count: int, width: int, s_x: float, eps: float):
    """The smallest p >= 0 (and its E) for which sum u^2 + E stays below 2^61 for any row:
    sum (N*A - S)^2 = N^2 sum (A - mean)^2 <= N^3 W^2 / 4 (W = the input's integer range
    width), and rounding u adds at most sqrt(N)/2 to its norm."""
    for p in range(63):
        e = math.floor(eps * count ** 3 * s_x * s_x / 4.0 ** p + 0.5)
        norm = count ** 1.5 * width / 2.0 ** (p + 1) + (math.sqrt(count) / 2 if p else 0.0)
        if norm * norm + e < VARIANCE_LIMIT:
            return p, e
    raise QL.Unsupported("LayerNorm: no norm_shift keeps the variance sum in int64")


@quant_register(OpType.LayerNorm, "1.0")
def layernorm_quantize(self, *args):
    raise QT.Unsupported(f"layer '{self.name}' ({self.type}): quantized form not ported to the tool chain's format yet")
    """Integer weights (gamma) under the weight settings, flattened to [N] so per channel
    means per normalized element; norm_shift/variance_bias from the input's range and
    scale; norm_bits F as large as the int32 biases (beta * s_n * s_w) and the int64
    output stage allow; the output under the activation settings."""
    QL.check_quantized_inputs(self)
    x_t, out_t = self.inputs[0], self.outputs[0]
    ndim = len(x_t.ir_shape)
    count = math.prod(x_t.ir_shape[_normalized_shape(self, ndim):])
    for key in ("weights", "biases"):
        c = self.get_constant(key)
        if c.betensor.numel() != count:
            raise IRError(f"layer '{self.name}' (LayerNorm): {key} has {c.betensor.numel()} values "
                          f"for {count} normalized elements")
        c.betensor = c.betensor.reshape(count)
        c.ir_shape = (count,)
    eps = float(self.get_param("epsilon", 1e-5))
    lo, hi = QL.int_range(x_t)
    p, e = _norm_shift(count, hi - lo, float(x_t.scale), eps)
    w_scale, _ = QL.quantize_weights(self, "weights", axis=0)
    w_max = float(QL.weight_values(self).abs().max())
    s_w = w_scale.to(torch.float64) if isinstance(w_scale, torch.Tensor) else torch.tensor(float(w_scale),
                                                                                             dtype=torch.float64)
    beta = self.get_constant("biases").betensor.detach().to(torch.float64).cpu()
    QL.quantize_activation(self, out_t)
    f = _norm_bits(count, s_w, beta, w_max, float(out_t.scale))
    s_n = 2.0 ** f / math.sqrt(count)
    QL.quantize_bias(self, s_n, w_scale)
    self.params["norm_shift"], self.params["variance_bias"], self.params["norm_bits"] = p, e, f
    ratio = float(out_t.scale) / (s_n * s_w) if s_w.dim() else float(out_t.scale) / (s_n * float(s_w))
    QL.set_rescale(self, ratio, device=self.get_constant("weights").betensor.device)


def _norm_bits(count: int, s_w: torch.Tensor, beta: torch.Tensor, w_max: float, s_y: float) -> int:
    """The largest F <= 30 whose biases fit int32 and whose output stage stays within int64:
    |n| <= 2^(F+1), |z| <= 2^(F+1) * max|W| + max|B|, |z * M| * 2^max(0, -shift) < 2^62."""
    for f in range(MAX_NORM_BITS, -1, -1):
        s_n = 2.0 ** f / math.sqrt(count)
        b_max = float((beta.abs() * s_n * s_w).max()) + 0.5
        if b_max >= 2 ** 31 - 1:
            continue
        ratios = (s_y / (s_n * s_w)).reshape(-1)
        m, s = qmath.multiplier_and_shift(ratios, QL.MULTIPLIER_BITS)
        z_max = 2.0 ** (f + 1) * w_max + b_max
        if z_max * float(m.abs().max()) * 2.0 ** max(0, -int(s.min())) + 2.0 ** max(0, int(s.max())) < 2.0 ** 62:
            return f
    raise QL.Unsupported("LayerNorm: no norm_bits keeps the biases in int32 and the output stage in int64")
