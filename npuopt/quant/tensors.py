"""What the ops' quantize functions and integer forwards share: choosing a tensor's
quantization from its calibrated range, quantizing weights and biases, and
handing integer results on in the output's dtype."""
from typing import Optional

import torch

from ..dtype import Dtype
from ..errors import QuantizeError
from ..tensor import PyTensor
from . import qmath
from .settings import QuantMethod, settings_of
from .statistics import Statistics
from .strategies import calibrate_range, outward_to_grid

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


class Unsupported(QuantizeError):
    """This layer cannot be quantized with these settings; the pipeline keeps it in float."""


# ---- activations ------------------------------------------------------------
def calibrated_range(node, t: PyTensor, symmetric: bool):
    """(lo, hi) of t from its statistics and the layer's strategy, widened to include 0
    and to a grid that last-bit differences of float sums do not cross (outward_to_grid)."""
    st = settings_of(node)
    stats: Optional[Statistics] = t.statistics
    if stats is None or stats.empty:
        raise QuantizeError(f"layer '{node.name}': tensor '{t.name}' has no calibration statistics")
    lo, hi = calibrate_range(stats, st.calibration_strategy_for_activation, st.activation_bits, symmetric)
    return outward_to_grid(min(lo, 0.0), max(hi, 0.0))


def quantize_activation(node, t: PyTensor, lo: float = None, hi: float = None, signed: bool = None) -> None:
    """Decide t's quantization with the layer's activation settings, from [lo, hi] or
    its calibrated range: signed when the range has negative values (or as asked)."""
    st = settings_of(node)
    method = QuantMethod.parse(st.quantize_method_for_activation)
    if method.per_channel:
        raise Unsupported(f"layer '{node.name}': per-channel activations are not supported")
    if lo is None:
        lo, hi = calibrated_range(node, t, method.symmetric)
    lo, hi = float(min(lo, 0.0)), float(max(hi, 0.0))
    if signed is None:
        signed = lo < 0
    scale, zp, qmin, qmax = qmath.linear_quant_params(lo, hi, st.activation_bits, method.symmetric,
                                                      method.full_range, signed)
    set_quantization(t, scale, zp, qmin, qmax, st.activation_bits, signed)


def set_quantization(t: PyTensor, scale, zp, qmin: int, qmax: int, bits: int, signed: bool) -> None:
    t.scale, t.zerop = scale, zp
    t.qbits, t.qmin, t.qmax = bits, qmin, qmax
    t.dtype = Dtype.integer(bits, signed)
    t.qinvariant = False


def copy_quantization(src: PyTensor, dst: PyTensor) -> None:
    for key in ("scale", "zerop", "qbits", "qmin", "qmax", "dtype", "qinvariant", "key_axis"):
        setattr(dst, key, getattr(src, key))


def check_quantized_inputs(node) -> None:
    for t in node.inputs:
        if not t.is_quantized and not t.qinvariant:
            raise Unsupported(f"layer '{node.name}' ({node.type}): input '{t.name}' is not quantized")


def shifted(t: PyTensor, dtype=torch.float64) -> torch.Tensor:
    """q + zp of a quantized tensor: the integer proportional to the real value."""
    return t.betensor.to(dtype) + (t.broadcast_zerop if isinstance(t.zerop, torch.Tensor) else float(t.zerop))


def shifted_absmax(t: PyTensor) -> int:
    """Bounds |q + zp| of a quantized tensor."""
    zp = t.zerop
    if isinstance(zp, torch.Tensor):
        return int(max((zp + t.qmin).abs().max(), (zp + t.qmax).abs().max()))
    return int(max(abs(t.qmin + zp), abs(t.qmax + zp)))


def int_absmax(t: PyTensor) -> int:
    """Bounds |q| and |zp| of a quantized tensor (its integers, or its padding value -zp)."""
    zp = int(torch.as_tensor(t.zerop).abs().max())
    return int(max(abs(t.qmin), abs(t.qmax), zp))


def store_output(node, y: torch.Tensor, out: PyTensor) -> torch.Tensor:
    """Integers y (float or int tensor) as the output's value, in its dtype's backend type."""
    out.betensor = y.to(out.dtype.torch_dtype)
    return out.betensor


# ---- weights and biases -----------------------------------------------------
def quantize_weights(node, key: str = "weights", axis: int = 0, groups: int = 1):
    """Replace float constant `key` by its integers: per channel along `axis`, per group
    of channels (per-tensor settings on a grouped layer, as the tool chain does), or
    per tensor; symmetric (zp 0) or asymmetric; signed, weight_bits wide. Returns the
    scale (a number, or a float32 tensor along `axis`)."""
    st = settings_of(node)
    c = node.get_constant(key)
    w = c.betensor.detach().to(torch.float32).cpu()
    method = QuantMethod.parse(st.quantize_method_for_weight)
    per_group = not method.per_channel and groups > 1
    stats = Statistics.of_constant(w, st.histc_bins, axis if method.per_channel or per_group else None)
    lo, hi = calibrate_range(stats, st.calibration_strategy_for_weight, st.weight_bits, method.symmetric)
    if per_group:
        size = w.shape[axis] // groups
        lo = lo.reshape(groups, size).min(dim=1).values.repeat_interleave(size)
        hi = hi.reshape(groups, size).max(dim=1).values.repeat_interleave(size)
    if isinstance(lo, torch.Tensor):
        lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
    else:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale, zp, qmin, qmax = qmath.linear_quant_params(lo, hi, st.weight_bits, method.symmetric,
                                                      method.full_range, True)
    if isinstance(scale, torch.Tensor):
        shape = [1] * w.dim()
        shape[axis] = -1
        q = qmath.quantize(w, scale.reshape(shape), zp.reshape(shape), qmin, qmax)
        c.key_axis = axis
    else:
        q = qmath.quantize(w, scale, zp, qmin, qmax)
        c.key_axis = None
    dtype = Dtype.integer(st.weight_bits, True)
    c.betensor = q.to(dtype.torch_dtype).to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits, c.qmin, c.qmax = dtype, scale, zp, st.weight_bits, qmin, qmax
    return scale


def integer_weights(c: PyTensor) -> torch.Tensor:
    """q_w + zp_w of quantized weights (float64 holding integers)."""
    return shifted(c)


def quantize_biases(node, scale, w_sums: torch.Tensor, x_zp: int, key: str = "biases") -> None:
    """biases -> int32 at `scale` (s_x * s_w, float32 per channel or a number), with the
    input zero point folded in: b_q + zp_x * sum(q_w + zp_w) over each output channel,
    which is what the tool chain's forward adds (it pads the input with -zp_x)."""
    if key not in node.constants:
        return
    c = node.constants[key]
    s = scale.to(torch.float32) if isinstance(scale, torch.Tensor) else float(scale)
    b = qmath.quantize(c.betensor.detach().to(torch.float32).cpu(), s, 0, INT32_MIN, INT32_MAX)
    b = b.to(torch.float64) + float(x_zp) * w_sums.cpu().to(torch.float64)
    c.betensor = b.clamp_(INT32_MIN, INT32_MAX).to(torch.int32).to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits = Dtype.INT32, s, 0, 32
    c.qmin, c.qmax = Dtype.INT32.qmin, Dtype.INT32.qmax
    c.key_axis = 0 if isinstance(s, torch.Tensor) else None


def pass_through(node) -> None:
    """Layers that move values without changing them (Reshape, Transpose, MAX pooling,
    Split, Slice, ...): every output takes input 0's quantization."""
    check_quantized_inputs(node)
    for out in node.outputs:
        copy_quantization(node.inputs[0], out)
