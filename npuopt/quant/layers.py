"""What the quantize functions and integer forwards of the ops share: per-layer
settings, choosing a tensor's quantization, quantizing weights and biases,
writing/reading rescale multipliers in the IR, and the common output stage
(multiplier, shift, fused activation, saturation, cast).

IR names (docs/integer-semantics.md):
  per-tensor rescale: params scale_value, shift_value, scale_type=uint16, shift_type=int8
  per-channel rescale: constants `scale` (uint16 [C]) and `shift` (int8 [C])
  LEAKYRELU's negative side: negative_scale_value/negative_shift_value, or
  constants negative_scale/negative_shift
  clamp of RELU/RELU6/CLIP in the integer domain: params activation_qmin, activation_qmax
"""
import math
from collections import OrderedDict
from dataclasses import dataclass, fields
from typing import Optional

import torch

from ..dtype import Dtype
from ..errors import QuantizeError
from ..logger import OPT_WARN
from ..tensor import PyTensor
from . import qmath
from .statistics import Statistics
from .strategies import calibrate_range

MULTIPLIER_BITS = 15
CLAMP_ACTIVATIONS = ("RELU", "RELU6", "CLIP")


class Unsupported(QuantizeError):
    """This layer cannot be quantized with these settings; the pipeline keeps it in float."""


@dataclass
class QuantSettings:
    """A layer's effective quantization settings: the cfg's, overridden by opt_config."""
    quantize_method_for_weight: str = "per_tensor_symmetric_restricted_range"
    quantize_method_for_activation: str = "per_tensor_symmetric_full_range"
    weight_bits: int = 8
    activation_bits: int = 8
    bias_bits: int = 32
    lut_items_in_bits: int = 8
    calibration_strategy_for_weight: str = "extrema"
    calibration_strategy_for_activation: str = "mean"
    histc_bins: int = 2048
    trigger_float_op: bool = False

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    def as_dict(self):
        return OrderedDict((n, getattr(self, n)) for n in self.names())


def settings_of(node) -> QuantSettings:
    return node.attrs.get("qsettings") or QuantSettings()


def _method(method: str):
    """(per_channel, symmetric, restricted) of a quantize_method_* value."""
    m = method.lower()
    return m.startswith("per_channel"), "_symmetric" in m, "restricted" in m


# ---- tensors ----------------------------------------------------------------
def set_quantization(t: PyTensor, scale, zp, qmin, qmax, bits, signed, lo=None, hi=None) -> None:
    t.scale, t.zerop = scale, zp
    t.qbits, t.qmin, t.qmax = bits, qmin, qmax
    t.dtype = Dtype.integer(bits, signed)
    if lo is not None:
        t.ir_range = [float(lo), float(hi)]


def copy_quantization(src: PyTensor, dst: PyTensor) -> None:
    for key in ("scale", "zerop", "qbits", "qmin", "qmax", "dtype", "ir_range", "qinvariant"):
        setattr(dst, key, getattr(src, key))


def quantize_activation(node, t: PyTensor, lo=None, hi=None) -> None:
    """Choose t's dtype, scale and zero point from its statistics (or the given
    range) under the layer's activation settings."""
    st = settings_of(node)
    per_channel, symmetric, restricted = _method(st.quantize_method_for_activation)
    if per_channel and not node.attrs.get("_warned_pc"):
        node.attrs["_warned_pc"] = True
        OPT_WARN(f"layer '{node.name}': per-channel activations are not supported; "
                 f"'{t.name}' is quantized per tensor")
    if lo is None:
        stats: Optional[Statistics] = t.statistics
        if stats is None or stats.empty:
            raise QuantizeError(f"layer '{node.name}': tensor '{t.name}' has no calibration statistics")
        lo, hi = calibrate_range(stats, st.calibration_strategy_for_activation, st.activation_bits, symmetric)
    lo, hi = float(min(lo, 0.0)), float(max(hi, 0.0))
    scale, zp, qmin, qmax, signed = qmath.scale_zp_from_range(lo, hi, st.activation_bits, symmetric, restricted)
    set_quantization(t, scale, zp, qmin, qmax, st.activation_bits, signed, lo, hi)


def int_range(t: PyTensor):
    """Saturation bounds of a quantized tensor: its dtype's full range (what the IR says)."""
    return t.dtype.qmin, t.dtype.qmax


def shifted_input(t: PyTensor, dtype=torch.int64) -> torch.Tensor:
    """q + zp of an input tensor (int64, or a float dtype that holds it exactly):
    the integer proportional to the real value."""
    zp = int(t.zerop)
    y = t.betensor.to(dtype)
    if y is t.betensor:
        return y + zp
    return y.add_(zp) if zp else y


def shifted_input_scratch(t: PyTensor, dtype, slot: str) -> torch.Tensor:
    """shifted_input into a reused buffer (valid until the next use of `slot`)."""
    buf = qmath.scratch(t.betensor.shape, dtype, t.betensor.device, slot)
    buf.copy_(t.betensor)
    zp = int(t.zerop)
    return buf.add_(zp) if zp else buf


def shifted_absmax(t: PyTensor) -> int:
    lo, hi = int_range(t)
    return max(abs(lo + int(t.zerop)), abs(hi + int(t.zerop)))


# ---- weights and biases -----------------------------------------------------
def quantize_weights(node, key: str = "weights", axis: int = 0):
    """Replace float constant `key` by its integer form; returns (scale, zp), per
    channel (float64 / int64 tensors along `axis`) or per tensor (float, int).
    Writes `<key>_scale` (float32) and, when asymmetric, `<key>_zp` (int32) constants."""
    st = settings_of(node)
    c = node.get_constant(key)
    w = c.betensor.detach().to(torch.float32)
    per_channel, symmetric, restricted = _method(st.quantize_method_for_weight)
    stats = Statistics.of_constant(w, st.histc_bins, axis if per_channel else None)
    lo, hi = calibrate_range(stats, st.calibration_strategy_for_weight, st.weight_bits, symmetric)
    signed = True if symmetric else False
    scale, zp, qmin, qmax, signed = qmath.scale_zp_from_range(lo, hi, st.weight_bits, symmetric, restricted,
                                                              signed=signed)
    if per_channel:
        shape = [1] * w.dim()
        shape[axis] = -1
        s_b, z_b = scale.reshape(shape), zp.reshape(shape).to(torch.float32)
    else:
        s_b, z_b = scale, zp
    q = qmath.quantize(w.cpu(), s_b if not per_channel else s_b.cpu(), z_b if not per_channel else z_b.cpu(),
                       qmin, qmax)
    dtype = Dtype.integer(st.weight_bits, signed)
    c.betensor = q.to(dtype.torch_dtype).to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits, c.qmin, c.qmax = dtype, scale, zp, st.weight_bits, qmin, qmax
    c.per_channel_axis = axis if per_channel else None
    svec = scale if per_channel else torch.tensor([scale], dtype=torch.float64)
    _set_constant(node, f"{key}_scale", svec.to(torch.float32), Dtype.FP32, c.betensor.device)
    if not symmetric:
        zvec = zp if per_channel else torch.tensor([zp], dtype=torch.int64)
        _set_constant(node, f"{key}_zp", zvec.to(torch.int32), Dtype.INT32, c.betensor.device)
    return scale, zp


def weight_values(node, key: str = "weights", axis: int = 0) -> torch.Tensor:
    """q_w + zp_w (int64) from the stored constants (zp only when `<key>_zp` exists)."""
    w = node.get_constant(key).betensor.to(torch.int64)
    if f"{key}_zp" in node.constants:
        zp = node.constants[f"{key}_zp"].betensor.to(device=w.device, dtype=torch.int64)
        if zp.numel() == 1:
            w = w + zp.reshape(())
        else:
            shape = [1] * w.dim()
            shape[axis] = -1
            w = w + zp.reshape(shape)
    return w


def quantize_bias(node, in_scale: float, w_scale, key: str = "biases") -> None:
    """biases -> int32: round_half_up(b * s_x * s_w[c]), saturated to int32."""
    if key not in node.constants:
        return
    c = node.constants[key]
    s = torch.as_tensor(w_scale, dtype=torch.float64) * float(in_scale)
    b = c.betensor.detach().to(torch.float64).cpu()
    q = torch.floor(b * s + 0.5).clamp(-(1 << 31), (1 << 31) - 1)
    c.betensor = q.to(torch.int32).to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits = Dtype.INT32, s, 0, 32
    c.qmin, c.qmax = Dtype.INT32.qmin, Dtype.INT32.qmax


def _set_constant(node, name, value: torch.Tensor, dtype: Dtype, device=None) -> None:
    value = value.to(dtype.torch_dtype)
    if device is not None:
        value = value.to(device)
    node.constants[name] = PyTensor(name, value, dtype, tuple(value.shape))


# ---- rescale multipliers in the IR -----------------------------------------
def set_rescale(node, ratio, prefix: str = "", device=None) -> None:
    """Store M, shift for `ratio`: params <prefix>scale_value/<prefix>shift_value when
    a float, constants <prefix>scale/<prefix>shift when a 1-D tensor (per channel)."""
    if isinstance(ratio, torch.Tensor):
        m, s = qmath.multiplier_and_shift(ratio, MULTIPLIER_BITS)
        mtype = Dtype.UINT16 if bool((m >= 0).all()) else Dtype.INT16
        _set_constant(node, f"{prefix}scale", m, mtype, device)
        _set_constant(node, f"{prefix}shift", s, Dtype.INT8, device)
        for k in (f"{prefix}scale_value", f"{prefix}shift_value"):
            node.params.pop(k, None)
        if not prefix:
            node.params.pop("scale_type", None)
            node.params.pop("shift_type", None)
        return
    m, s = qmath.multiplier_and_shift(float(ratio), MULTIPLIER_BITS)
    set_rescale_values(node, m, s, prefix)


def set_rescale_values(node, m, s, prefix: str = "") -> None:
    node.constants.pop(f"{prefix}scale", None)
    node.constants.pop(f"{prefix}shift", None)
    node.params[f"{prefix}scale_value"] = m
    node.params[f"{prefix}shift_value"] = s
    if not prefix:
        ms = m if isinstance(m, list) else [m]
        node.params["scale_type"] = "uint16" if all(v >= 0 for v in ms) else "int16"
        node.params["shift_type"] = "int8"


def get_rescale(node, prefix: str = "", device=None):
    """(M, shift) as stored: ints (or lists) from params, or int64 tensors from constants."""
    if f"{prefix}scale" in node.constants:
        m = node.constants[f"{prefix}scale"].betensor.to(torch.int64)
        s = node.constants[f"{prefix}shift"].betensor.to(torch.int64)
        if device is not None:
            m, s = m.to(device), s.to(device)
        return m, s
    key = f"{prefix}scale_value"
    if key not in node.params:
        raise QuantizeError(f"layer '{node.name}' ({node.type}): quantized, but '{key}' is missing")
    return node.params[key], node.get_param(f"{prefix}shift_value")


# ---- the output stage ---------------------------------------------------------
def fused_activation(node, key: str = "with_activation") -> str:
    return str(node.get_param(key, "NONE")).upper()


def prepare_activation(node, out: PyTensor, ratio, method: str, device=None) -> None:
    """Integer parameters of a fused (or standalone) clamp/leaky activation on
    top of the rescale `ratio` (float or per-channel tensor)."""
    node.params.pop("activation_qmin", None)
    node.params.pop("activation_qmax", None)
    if method == "NONE":
        return
    if method in CLAMP_ACTIVATIONS:
        if method == "RELU":
            lo, hi = 0.0, None
        elif method == "RELU6":
            lo, hi = 0.0, 6.0
        else:
            lo, hi = float(node.get_param("clip_min")), float(node.get_param("clip_max"))
        qlo, qhi = int_range(out)
        node.params["activation_qmin"] = max(qlo, min(qhi, _q_of(lo, out)))
        node.params["activation_qmax"] = qhi if hi is None else max(qlo, min(qhi, _q_of(hi, out)))
        return
    if method == "LEAKYRELU":
        alpha = float(node.get_param("negative_slope_value", 0.01))
        set_rescale(node, ratio * alpha, "negative_", device)
        return
    raise Unsupported(f"layer '{node.name}' ({node.type}): fused activation '{method}' has no integer form")


def _q_of(f: float, t: PyTensor) -> int:
    return int(math.floor(f * float(t.scale) - int(t.zerop) + 0.5))


def finish(node, acc: torch.Tensor, M, shift, out: PyTensor, method: str = None,
           bound: float = None, bias=None) -> torch.Tensor:
    """The common output stage. With z = acc + bias:
    y = rounding_right_shift(z * M, shift), or for LEAKYRELU and z < 0
    y = rounding_right_shift(z * M_neg, shift_neg); then y - zp_out, clamped to
    [activation_qmin, activation_qmax] when present and to the dtype; cast to the
    output's integer dtype and stored as its value. `acc` holds integers (int or
    float dtype); `bound` >= max|acc| enables qmath.requantize_exact's float64 path."""
    method = fused_activation(node) if method is None else method
    zp = int(out.zerop)
    if method == "LEAKYRELU":
        z = acc if bias is None else acc + torch.as_tensor(bias, device=acc.device).to(
            torch.float64 if acc.is_floating_point() else torch.int64)
        bz = None if bound is None else bound + (float(bias.abs().max()) if isinstance(bias, torch.Tensor) else 0.0)
        mn, sn = get_rescale(node, "negative_", acc.device)
        pos = qmath.requantize_exact(z, M, shift, None, zp, bz)
        neg = qmath.requantize_exact(z, mn, sn, None, zp, bz, slot="requantize_negative")
        y = torch.where(z >= 0, pos, neg.to(pos.dtype))
    else:
        y = qmath.requantize_exact(acc, M, shift, bias, zp, bound)
    return store_output(node, y, out)


def finish_mean(node, sums: torch.Tensor, counts, out: PyTensor) -> torch.Tensor:
    """Averages (AVG pooling, Reduce MEAN): S = sum of (q + zp_in), n = element count
    (tensor or int); with the stored M, shift (ratio s_out / s_in):
    out = clamp(round_div(S * M * 2^max(0,-shift), n * 2^max(0,shift)) - zp_out)."""
    M, shift = get_rescale(node)
    num = sums.to(torch.int64) * (int(M) << max(0, -int(shift)))
    den = (counts.to(torch.int64) if isinstance(counts, torch.Tensor) else int(counts)) << max(0, int(shift))
    return store_output(node, qmath.round_div(num, den) - int(out.zerop), out)


def cached(node, key: str, depends, make):
    """node.attrs[key] = make(), rebuilt when any tensor in `depends` changed
    (identity or in-place version): per-forward work on constants is done once."""
    stamp = tuple((id(t), t._version, t.device) for t in depends)
    hit = node.attrs.get(key)
    if hit is None or hit[0] != stamp:
        hit = (stamp, make())
        node.attrs[key] = hit
    return hit[1]


def store_output(node, y: torch.Tensor, out: PyTensor) -> torch.Tensor:
    """Clamp integers y (int or float tensor we own) to the fused activation's and
    the dtype's bounds and cast to the output dtype."""
    lo, hi = int_range(out)
    if "activation_qmin" in node.params:
        lo = max(lo, int(node.params["activation_qmin"]))
        hi = min(hi, int(node.params["activation_qmax"]))
    y = y.clamp_(lo, hi).to(out.dtype.torch_dtype)
    out.betensor = y
    return y


def _is_one(m) -> bool:
    return isinstance(m, int) and m == 1


def check_quantized_inputs(node) -> None:
    for t in node.inputs:
        if not t.is_quantized and not t.qinvariant:
            raise Unsupported(f"layer '{node.name}' ({node.type}): input '{t.name}' is not quantized")


def requantize_to(node, t: PyTensor, out: PyTensor, M, shift) -> torch.Tensor:
    """Input t's integers in out's quantization: rounding_right_shift((q + zp_in) * M, shift) - zp_out."""
    return qmath.rounding_right_shift(shifted_input(t) * M, shift) - int(out.zerop)


# ---- layers with weights ------------------------------------------------------
LINEAR_ACTIVATIONS = ("NONE",) + CLAMP_ACTIVATIONS + ("LEAKYRELU",)


def quantize_linear(node, axis: int = 0, key: str = "weights") -> None:
    """Convolution / FullyConnected / BatchNorm: integer weights (per channel along `axis`
    or per tensor), int32 biases at scale s_x*s_w, the output's quantization, the
    rescale ratio s_y / (s_x * s_w) as multiplier/shift, and the fused activation."""
    method = fused_activation(node)
    if method not in LINEAR_ACTIVATIONS:
        raise Unsupported(f"layer '{node.name}' ({node.type}): fused activation '{method}' has no integer form")
    check_quantized_inputs(node)
    x, out = node.inputs[0], node.outputs[0]
    device = node.get_constant(key).betensor.device
    w_scale, _ = quantize_weights(node, key, axis)
    quantize_bias(node, x.scale, w_scale)
    quantize_activation(node, out)
    if isinstance(w_scale, torch.Tensor):
        ratio = float(out.scale) / (float(x.scale) * w_scale.to(torch.float64))
    else:
        ratio = float(out.scale) / (float(x.scale) * w_scale)
    set_rescale(node, ratio, device=device)
    prepare_activation(node, out, ratio, method, device)


def finish_linear(node, acc: torch.Tensor, bound: float) -> torch.Tensor:
    """The integer forward's end for a layer quantized by quantize_linear: z = acc +
    biases (when stored), the stored per-channel (last axis of acc) or per-tensor
    rescale, the fused activation and saturation. `bound` >= max|acc|."""
    bias = node.constants["biases"].betensor if "biases" in node.constants else None
    M, shift = get_rescale(node, device=acc.device)
    return finish(node, acc, M, shift, node.outputs[0], bound=bound, bias=bias)


def pass_through(node) -> None:
    """Layers that move values without changing them (Reshape, Transpose, MAX pooling,
    Split, Slice, ...): every output takes input 0's quantization."""
    check_quantized_inputs(node)
    for out in node.outputs:
        copy_quantization(node.inputs[0], out)


def quantize_rescaled(node) -> None:
    """Layers whose integer result is a sum of products of their inputs' integers (AVG
    pooling and Reduce mean/sum over one input, MatMul over two): the output quantized
    from its statistics, one rescale s_y / (product of the inputs' scales)."""
    check_quantized_inputs(node)
    out_t = node.outputs[0]
    quantize_activation(node, out_t)
    set_rescale(node, float(out_t.scale) / math.prod(float(t.scale) for t in node.inputs))


def common_shift_multipliers(ratios):
    """Multipliers for several ratios sharing one shift: the largest ratio gets a
    full MULTIPLIER_BITS multiplier, the others M_i = round_half_up(r_i * 2^shift)."""
    big = max(abs(r) for r in ratios)
    _, shift = qmath.multiplier_and_shift(big, MULTIPLIER_BITS)
    ms = [int(math.floor(math.ldexp(r, shift) + 0.5)) for r in ratios]
    return ms + [shift]


def set_lut(node, table: torch.Tensor, dtype: Dtype, device=None) -> None:
    _set_constant(node, "lut", table, dtype, device)
