"""What the ops' quantize functions and integer forwards share: choosing a tensor's
quantization from its calibrated range, quantizing weights and biases, and
handing integer results on in the output's dtype."""
from typing import Optional

import torch

from ..dtype import Dtype, fit_float
from ..errors import QuantizeError
from ..tensor import PyTensor
from . import formats, minifloat, qmath
from .bias_bits import adapted_bias_bits
from .settings import settings_of
from .statistics import Statistics
from .strategies import activation_range_of
from .weight_plans import planned, set_planned
from .weight_ranges import weight_range

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


class Unsupported(QuantizeError):
    """This layer cannot be quantized with these settings; the pipeline keeps it in float."""


# ---- activations ------------------------------------------------------------
def activation_range(node, t: PyTensor, symmetric: bool):
    """(lo, hi) of activation t: the range planned for it (t.planned_range, set by a
    global calibration method or a plugin), the IR's layer_top_range under the in_ir
    strategy, or the one from its statistics and the layer's strategy, widened to
    include 0 and to a grid that last-bit differences of float sums do not cross
    (outward_to_grid)."""
    if t.planned_range is not None:
        lo, hi = t.planned_range
        return min(lo, 0.0), max(hi, 0.0)
    st = settings_of(node)
    if st.calibration_strategy_for_activation.kind == "in_ir" and t.ir_range is not None:
        lo, hi = t.ir_range   # the IR's layer_top_range (a parser IR of a quantized model)
        return min(lo, 0.0), max(hi, 0.0)
    stats: Optional[Statistics] = t.statistics
    if stats is None or stats.empty:
        raise QuantizeError(f"layer '{node.name}': tensor '{t.name}' has no calibration statistics")
    return activation_range_of(stats, st.calibration_strategy_for_activation, st.activation_bits, symmetric)


def plan_activation_range(t: PyTensor, lo: Optional[float], hi: Optional[float]) -> None:
    """A global calibration method's range for activation t (of the float graph), used
    by activation_range instead of the calibrated one (lo None: back to that). Kept as
    the tensor's min/max, where the Compass Optimizer's methods put it."""
    t.planned_range = None if lo is None else (lo, hi)


def quantize_activation(node, t: PyTensor, lo: float = None, hi: float = None, signed: bool = None) -> None:
    """Decide t's quantization with the layer's activation settings, from [lo, hi] or
    its activation_range: signed when the range has negative values (or as asked). A
    tensor with a pre-quantized source's grid (t.source_grid) takes that grid."""
    if t.source_grid is not None:  # a pre-quantized source's grid: decided, not chosen
        g = t.source_grid
        set_quantization(t, g.scale, g.zp, g.dtype.qmin, g.dtype.qmax, g.dtype.bits, g.dtype.is_signed)
        return
    st = settings_of(node)
    method = st.quantize_method_for_activation
    if method.per_channel:
        raise Unsupported(f"layer '{node.name}': per-channel activations are not supported")
    if lo is None:
        lo, hi = activation_range(node, t, method.symmetric or st.fp8_activations)
    if st.fp8_activations:  # a scaled fp8 format (quant/minifloat.py): symmetric, zero point 0
        fmt = Dtype(st.activation_type)
        scale = minifloat.scale_of(max(abs(float(lo)), abs(float(hi))), fmt.value)
        set_quantization(t, scale, 0, fmt.qmin, fmt.qmax, 8, True)
        t.dtype = fmt
        return
    signed = _signed(node, lo, signed)
    set_quantization(t, *activation_grid(node, lo, hi, signed), st.activation_bits, signed)


def _signed(node, lo: float, signed: Optional[bool]) -> bool:
    """Signed when the range has negative values (or as asked), or when the layer's
    force_dtype_int says so (the tool chain's `out_signed = ... or force_dtype_int`)."""
    return (min(lo, 0.0) < 0 if signed is None else signed) or bool(node.force_dtype_int)


def activation_grid(node, lo: float, hi: float, signed: bool = None) -> tuple:
    """(scale, zp, qmin, qmax) of the layer's activation settings over [lo, hi] (widened
    to include 0), signed as _signed says."""
    st = settings_of(node)
    method = st.quantize_method_for_activation
    lo, hi = float(min(lo, 0.0)), float(max(hi, 0.0))
    return qmath.linear_quant_params(lo, hi, st.activation_bits, method.symmetric, method.full_range,
                                     _signed(node, lo, signed))


def on_activation_grid(node, v: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """v (float32) rounded to activation_grid(node, lo, hi), as real values."""
    scale, zp, qmin, qmax = activation_grid(node, lo, hi)
    return qmath.dequantize(qmath.quantize(v.to(torch.float32), scale, zp, qmin, qmax), scale, zp)


def set_quantization(t: PyTensor, scale, zp, qmin: int, qmax: int, bits: int, signed: bool) -> None:
    t.scale, t.zerop = scale, zp
    t.qbits, t.qmin, t.qmax = bits, qmin, qmax
    t.dtype = Dtype.integer(bits, signed)
    t.qinvariant = False


QUANTIZATION_FIELDS = ("scale", "zerop", "qbits", "qmin", "qmax", "dtype", "qinvariant", "key_axis")


def copy_quantization(src: PyTensor, dst: PyTensor) -> None:
    for key in QUANTIZATION_FIELDS:
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
class WeightGrid:
    """The grid a layer's float weights are rounded onto, from the weights and the layer's
    settings alone: integers q = clamp(round(w * scale - zp), qmin, qmax), or with `fmt` a
    minifloat format's values (zp 0); scale and zp numbers or float32 tensors along `axis`,
    or per block (`block`: one per block of each output channel, channel-major). Global
    calibration reads it to choose roundings other than the nearest."""

    def __init__(self, scale, zp, qmin: int, qmax: int, bits: int, axis: int, shape, block: int = None,
                 fmt: str = None):
        self.scale, self.zp, self.qmin, self.qmax, self.bits, self.axis = scale, zp, qmin, qmax, bits, axis
        self.per_channel = isinstance(scale, torch.Tensor)
        self.block, self.shape, self.fmt = block, tuple(int(d) for d in shape), fmt
        self._shape = [1] * len(self.shape)
        self._shape[axis] = -1

    def along(self, v):
        """scale or zp shaped to broadcast against the weights."""
        if self.block and isinstance(v, torch.Tensor):
            return formats.block_values(v, self.shape, self.block)
        return v.reshape(self._shape) if isinstance(v, torch.Tensor) else v

    def quantize(self, w: torch.Tensor) -> torch.Tensor:
        """Round to nearest (the default rounding), float32 holding the grid's values."""
        if self.fmt:
            return self._elementwise(lambda t, s, _: minifloat.quantize(t, s, self.fmt), w)
        return self._elementwise(lambda t, s, z: qmath.quantize(t, s, z, self.qmin, self.qmax), w)

    def to_grid(self, v: torch.Tensor) -> torch.Tensor:
        """Values in the grid's units (w * scale - zp) rounded to its nearest, in v's dtype."""
        if self.fmt:
            return minifloat.round_to(v, self.fmt).to(v.dtype)
        return v.round().clamp_(self.qmin, self.qmax)

    def dequantize(self, q: torch.Tensor) -> torch.Tensor:
        return self._elementwise(qmath.dequantize, q)

    def _elementwise(self, fn, t: torch.Tensor) -> torch.Tensor:
        """fn(t, scale, zp) with the grid's scale and zero point against t; per block, a few
        channels at a time (formats.by_channels)."""
        if self.block and self.axis == 0 and tuple(t.shape) == self.shape:
            return formats.by_channels(fn, t, self.scale, self.zp, self.block)
        return fn(t, self.along(self.scale), self.along(self.zp))


def weight_grid(node, key: str = "weights", axis: int = 0, groups: int = 1, rng: tuple = None) -> WeightGrid:
    """The grid of float constant `key` over its weight_range (or `rng`): symmetric (zp 0)
    or asymmetric, signed, weight_bits wide; or the minifloat weights format at largest / absmax;
    or the grid a pre-quantized source states for it (its source_grid)."""
    source = node.get_constant(key).source_grid
    if source is not None:  # a pre-quantized source's grid (and integers: weight_integers)
        shape, dtype = node.get_constant(key).betensor.shape, source.dtype
        return WeightGrid(source.scale, source.zp, dtype.qmin, dtype.qmax, dtype.bits, axis, shape)
    st = settings_of(node)
    method = st.quantize_method_for_weight
    lo, hi = rng if rng is not None else weight_range(node, key, axis, groups)
    fmt = None if st.weights_format == "int" else st.weights_format
    if fmt:
        absmax = torch.maximum(lo.abs(), hi.abs()) if isinstance(lo, torch.Tensor) else max(abs(lo), abs(hi))
        dtype = Dtype(fmt)
        scale, qmin, qmax, bits = minifloat.scale_of(absmax, fmt), dtype.qmin, dtype.qmax, dtype.bits
        zp = torch.zeros_like(scale) if isinstance(scale, torch.Tensor) else 0
    else:
        scale, zp, qmin, qmax = qmath.linear_quant_params(lo, hi, st.weight_bits, method.symmetric,
                                                          method.full_range, True)
        bits = st.weight_bits
    shape = node.get_constant(key).betensor.shape
    return WeightGrid(scale, zp, qmin, qmax, bits, axis, shape, st.weight_block_size if method.per_block else None,
                      fmt)


def plan_weight_range(node, key: str, lo, hi) -> None:
    """A global calibration method's range for constant `key` (numbers, or tensors
    along the grid's axis), used by weight_grid instead of the calibrated one (lo
    None: back to that)."""
    set_planned(node, "planned_ranges", key, None if lo is None else (lo, hi))


ROUNDED_AT_ONCE = 1 << 22  # planned integers narrowed to their type per slice of this many


def plan_weight_integers(node, key: str, q: torch.Tensor) -> None:
    """A global calibration method's rounding of constant `key` (integers on the layer's
    WeightGrid, or its minifloat values), used by quantize_weights instead of rounding to
    nearest; integers kept in the narrowest integer type that holds them (in float32 the
    plans of a default run held the model's size again: 344 MB on ViT-B/16)."""
    fmt = settings_of(node).weights_format
    if fmt != "int":  # minifloat values, kept as float32
        set_planned(node, "planned_integers", key, minifloat.round_to(q.detach().cpu(), fmt))
        return
    q = q.detach().cpu()
    lo, hi = (round(float(v)) for v in q.aminmax()) if q.numel() else (0, 0)
    kind = next(t for t in (torch.int8, torch.int16, torch.int32)
                if torch.iinfo(t).min <= lo and hi <= torch.iinfo(t).max)
    narrow = torch.empty(q.shape, dtype=kind)
    for a, b in zip(narrow.reshape(-1).split(ROUNDED_AT_ONCE), q.reshape(-1).split(ROUNDED_AT_ONCE)):
        a.copy_(b.round())  # a slice at a time: a decoder's head rounded whole is 113 MB more
    set_planned(node, "planned_integers", key, narrow)


def _within(q: torch.Tensor, qmin: int, qmax: int) -> bool:
    lo, hi = q.aminmax()  # one pass over a decoder's head, not two
    return qmin <= int(lo) and int(hi) <= qmax


def weight_integers(node, key: str, grid: WeightGrid, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The integers constant `key` will be stored as (in `dtype`, on the CPU): a pre-quantized
    source's, the rounding a global calibration method planned for it (the plan's own
    tensor where it is held in `dtype` and lies on the grid: a decoder's planned
    integers were held twice), or the nearest."""
    c = node.get_constant(key)
    if c.source_grid is not None and c.source_grid.integers is not None:  # the source's, exactly
        return c.source_grid.integers.to(torch.float32).cpu().to(dtype)
    w = c.betensor
    q = planned(node, "planned_integers", key)
    if q is not None and tuple(q.shape) == tuple(w.shape):
        if q.dtype == dtype and (not q.numel() or _within(q, grid.qmin, grid.qmax)):
            return q
        return q.to(torch.float32, copy=True).clamp_(grid.qmin, grid.qmax).to(dtype)
    return grid.quantize(w.detach().to(torch.float32).cpu()).to(dtype)


def quantize_weights(node, key: str = "weights", axis: int = 0, groups: int = 1):
    """Replace float constant `key` by its integers (or minifloat values) on its WeightGrid
    (weight_integers). Returns the scale (a number, or a float32 tensor along `axis`)."""
    c = node.get_constant(key)
    grid = weight_grid(node, key, axis, groups)
    dtype = Dtype(grid.fmt) if grid.fmt else c.source_grid.dtype if c.source_grid else Dtype.integer(grid.bits, True)
    q = weight_integers(node, key, grid, dtype.torch_dtype)
    c.key_axis = axis if grid.per_channel else None
    c.block_size = grid.block
    c.betensor = q.to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits, c.qmin, c.qmax = dtype, grid.scale, grid.zp, grid.bits, grid.qmin, grid.qmax
    return grid.scale


# layer types whose weights hold output channels on axis 0 (grouped along it), as the
# integer linear layers quantize them: the ones weight-only quantization applies to
WEIGHT_ONLY_TYPES = ("Convolution", "DepthwiseConv", "FullyConnected", "ConvTranspose", "Convolution3D",
                     "ConvTranspose3D")


def quantize_weights_only(node) -> bool:
    """A layer kept in float with weight-only settings (trigger_float_op = *_act_int_wht):
    its weights become integers on their grid, per tensor, per channel or per block,
    stored with their scale and zero point; its biases and activations stay float, and
    its forward dequantizes the weights (PyNode.forward). False where it has no weights
    of WEIGHT_ONLY_TYPES (it stays wholly float)."""
    if not settings_of(node).weight_only or node.type not in WEIGHT_ONLY_TYPES or "weights" not in node.constants:
        return False
    quantize_weights(node, "weights", axis=0)
    return True


def store_in_float(node) -> None:
    """A layer kept in float, in its settings' float dtype (float16/bfloat16): its float
    tops take that dtype (PyNode.forward rounds them to it), its float constants are
    rounded to it, but biases and negative slopes, which stay float32, as the tool chain
    stores them; a Cast to a float type casts to that dtype (its to_dtype), as the tool
    chain writes it (its subgraphs run without fitting tops to their dtypes)."""
    dtype = settings_of(node).float_dtype
    if dtype is Dtype.FP32:
        return
    for t in node.outputs:
        if t.dtype.is_float:
            t.dtype = dtype
    if node.type == "Cast" and node.outputs[0].dtype.is_float:
        node.params["to_dtype"] = dtype.value
    for key, c in node.constants.items():
        if c.dtype.is_float and key not in ("biases", "negative_slope"):
            # a new tensor (the float graph's stays), held in its dtype as an IR read back holds it
            c.betensor, c.dtype = fit_float(c.betensor, dtype).to(dtype.torch_dtype), dtype


def cached_by_weights(node, name: str, extra: tuple, build):
    """build() kept in node.attrs[name] while constant 'weights' holds the same tensor,
    not changed in place, and `extra` stays equal. The entry holds that tensor itself:
    a key of its id() would match a new tensor that took a freed one's id (a method
    that quantizes a layer again then ran it with its old weights)."""
    w = node.get_constant("weights").betensor
    cached = node.attrs.get(name)
    if cached is None or cached[0] is not w or cached[1] != (w._version, extra):
        cached = (w, (w._version, extra), build())
        node.attrs[name] = cached
    return cached[2]


def integer_weights(c: PyTensor) -> torch.Tensor:
    """q_w + zp_w of quantized weights (float64 holding integers)."""
    return shifted(c)


def integer_weight_sums(c: PyTensor) -> torch.Tensor:
    """The sum of q_w + zp_w over each output channel (axis 0), float64: the sums of q_w
    made a few channels at a time (a float64 copy of a decoder's whole head was 226 MB,
    SmolLM2-135M's), plus each zero point times the weights it covers."""
    n = int(c.ir_shape[0])
    q = c.betensor.reshape(n, -1)
    k = q.shape[1]
    sums = formats.by_channels(lambda part, _scale, _zp: part.sum(dim=1, dtype=torch.float64), q, None, None, 0)
    zp = c.zerop
    if not isinstance(zp, torch.Tensor) or zp.numel() <= 1:
        return sums + float(zp) * k
    zp = zp.to(device=q.device, dtype=torch.float64).reshape(n, -1)  # per channel, or per block
    covered = torch.full((zp.shape[1],), float(c.block_size or k), dtype=torch.float64, device=q.device)
    covered[-1] = k - (zp.shape[1] - 1) * covered[0]  # the last block's weights
    return sums + zp @ covered


def quantize_biases(node, scale, w_sums: torch.Tensor, x_zp: int, key: str = "biases") -> None:
    """biases -> integers of the layer's bias_bits at `scale` (s_x * s_w, float32 per
    channel or a number), with the input zero point folded in: b_q + zp_x * sum(q_w +
    zp_w) over each output channel, which is what the tool chain's forward adds (it
    pads the input with -zp_x); clamped to the bits' range before and after the fold,
    stored in the narrowest integer type that holds them (int16, int32, int64 for 16 to
    48 bits, as the tool chain stores them).
    With bias_effective_bits below bias_bits the low bits are cleared before and after
    the fold (qmath.clear_low_bits), as the tool chain does; with
    bias_effective_bits_auto_adaption the biases are clamped to the width
    adapted_bias_bits finds first."""
    if key not in node.constants:
        return
    c = node.constants[key]
    st = settings_of(node)
    bits, effective = st.bias_bits, st.cfg_attrs.get("bias_effective_bits", "")
    s = scale.to(torch.float32) if isinstance(scale, torch.Tensor) else float(scale)
    f = c.betensor.detach().to(torch.float32).cpu()
    compress = effective != "" and effective < bits
    adapted = adapted_bias_bits(f, s, bits, effective) if compress and \
        st.cfg_attrs.get("bias_effective_bits_auto_adaption") else bits
    lo, hi = qmath.integer_range(adapted, True)
    source = c.source_grid.integers if c.source_grid is not None else None  # a pre-quantized source's
    b = (source.cpu() if source is not None else qmath.quantize(f, s, 0, lo, hi)).to(torch.float64)
    if compress:
        b = qmath.clear_low_bits(b, effective)
    b = (b + float(x_zp) * w_sums.cpu().to(torch.float64)).clamp_(lo, hi)
    if compress:
        b = qmath.clear_low_bits(b, effective)
    dtype = Dtype.integer(bits, True)
    c.betensor = b.to(dtype.torch_dtype).to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits, c.qmin, c.qmax = dtype, s, 0, bits, *qmath.integer_range(bits, True)
    c.key_axis = 0 if isinstance(s, torch.Tensor) else None


def pass_through(node) -> None:
    """Layers that move values without changing them (Reshape, Transpose, MAX pooling,
    Split, Slice, ...): every output takes input 0's quantization."""
    check_quantized_inputs(node)
    for out in node.outputs:
        copy_quantization(node.inputs[0], out)
