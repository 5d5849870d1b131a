"""Resize H and W of an NHWC tensor to the top shape's, NEAREST or BILINEAR, with the
half_pixel, align_corners or asymmetric coordinate mapping.

Rounding of NEAREST: asymmetric floors (PyTorch 'nearest', TF), half_pixel floors the
shifted coordinate (PyTorch 'nearest-exact', TF half_pixel_centers), align_corners
rounds halves up (TF align_corners).

Quantized (the input's quantization passed through; integer coordinates, exact):
NEAREST picks integers at source indices computed in integers with the rounding above;
BILINEAR interpolates A = q + zp with fixed-point weights of F = `interp_frac_bits`
fractional bits per axis: U = sum wh * ww * A (wh, ww in [0, 2^F], each axis' pair
summing to 2^F), q_out = rounding_right_shift(U, 2F) - zp."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..quant import tensors as QT
from ..quant import layers as QL  # noqa: F401  (being ported)
from ..quant import qmath
from ..registry import OpType, op_register, quant_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, param_choice

INTERP_FRAC_BITS = 15
MAX_INTERP_FRAC_BITS = 17   # keeps the float64 computation exact (see _lerp_axis)
METHODS = ["NEAREST", "BILINEAR"]
MODES = ["half_pixel", "align_corners", "asymmetric"]

# the (method, mode) pairs PyTorch computes itself, fastest and bit-exact with it
_TORCH_RESIZE = {
    ("NEAREST", "asymmetric"): dict(mode="nearest"),
    ("NEAREST", "half_pixel"): dict(mode="nearest-exact"),
    ("BILINEAR", "half_pixel"): dict(mode="bilinear", align_corners=False),
    ("BILINEAR", "align_corners"): dict(mode="bilinear", align_corners=True),
}


def _resize_axis(x, dim, out_size, method, mode):
    """One axis of a separable resize, for the pairs PyTorch lacks
    (NEAREST align_corners, BILINEAR asymmetric)."""
    size = x.shape[dim]
    dst = torch.arange(out_size, dtype=torch.float32, device=x.device)
    if mode == "align_corners":
        src = dst * ((size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    else:
        src = dst * (size / out_size)
    if method == "NEAREST":
        return x.index_select(dim, (src + 0.5).floor().long().clamp(max=size - 1))
    low = src.floor().long()
    high = (low + 1).clamp(max=size - 1)
    frac = (src - low).to(x.dtype).reshape((-1,) + (1,) * (x.dim() - 1 - dim))
    return torch.lerp(x.index_select(dim, low), x.index_select(dim, high), frac)


def nearest_index(size, out_size, mode, device):
    """Source index of every output index along one axis, in exact integers:
    asymmetric floor(d*in/out), half_pixel floor((d+1/2)*in/out), align_corners
    round_half_up(d*(in-1)/(out-1)); clamped to the axis."""
    d = torch.arange(out_size, dtype=torch.int64, device=device)
    if mode == "asymmetric":
        index = torch.div(d * size, out_size, rounding_mode="floor")
    elif mode == "half_pixel":
        index = torch.div((2 * d + 1) * size, 2 * out_size, rounding_mode="floor")
    else:
        index = qmath.round_div(d * (size - 1), out_size - 1) if out_size > 1 else torch.zeros_like(d)
    return index.clamp_(0, size - 1)


def bilinear_position(size, out_size, mode, frac_bits, device):
    """Source coordinate of every output index along one axis, times 2^frac_bits,
    rounded half up in exact integers: asymmetric d*in/out, half_pixel
    (d+1/2)*in/out - 1/2 (negative -> 0), align_corners d*(in-1)/(out-1)."""
    d = torch.arange(out_size, dtype=torch.int64, device=device)
    one = 1 << frac_bits
    if mode == "asymmetric":
        return qmath.round_div(d * size * one, out_size)
    if mode == "half_pixel":
        return qmath.round_div(((2 * d + 1) * size - out_size) * one, 2 * out_size).clamp_(min=0)
    return qmath.round_div(d * (size - 1) * one, out_size - 1) if out_size > 1 else torch.zeros_like(d)


def _lerp_axis(v, dim, out_size, mode, frac_bits):
    """One axis of the integer bilinear resize, v[i0] + (v[i1] - v[i0]) * frac / 2^F, in
    float64: values are multiples of 2^-(2F+1) below 2^18, so with F <= 17 every
    intermediate (whatever the order of operations) fits float64's 53 significant
    bits and no operation rounds; the doc's integer U is this value times 2^2F."""
    size = v.shape[dim]
    pos = bilinear_position(size, out_size, mode, frac_bits, v.device)
    low = (pos >> frac_bits).clamp_(max=size - 1)
    high = (low + 1).clamp_(max=size - 1)
    frac = (pos & ((1 << frac_bits) - 1)).to(torch.float64) * 2.0 ** -frac_bits
    lo = v.index_select(dim, low)
    step = v.index_select(dim, high).sub_(lo)
    return lo.addcmul_(step, frac.reshape((-1,) + (1,) * (v.dim() - 1 - dim)))


def resize_quantized(self, x_t, method, mode, size):
    out_t = self.outputs[0]
    if method == "NEAREST":
        x = x_t.betensor
        out = x.index_select(1, nearest_index(x.shape[1], size[0], mode, x.device))
        out = out.index_select(2, nearest_index(x.shape[2], size[1], mode, x.device))
        return QL.store_output(self, out, out_t)
    frac_bits = self.get_param("interp_frac_bits")
    if not isinstance(frac_bits, int) or not 0 <= frac_bits <= MAX_INTERP_FRAC_BITS:
        raise IRError(f"layer '{self.name}': interp_frac_bits '{frac_bits}' is not an integer "
                      f"in [0, {MAX_INTERP_FRAC_BITS}]")
    # RRS(U, 2F) - zp_out = floor(U / 2^2F + 1/2 - zp_out); the weights of each axis sum
    # to one, so the constant 1/2 - zp_out is added to the (small) input instead
    v = x_t.betensor.to(torch.float64).add_(int(x_t.zerop) - int(out_t.zerop) + 0.5)
    u = _lerp_axis(_lerp_axis(v, 1, size[0], mode, frac_bits), 2, size[1], mode, frac_bits)
    return QL.store_output(self, u.floor_(), out_t)


@op_register(OpType.Resize, "1.0")
def resize_forward(self, *args):
    x = self.inputs[0].betensor
    top_shape = self.outputs[0].ir_shape
    if x.dim() != 4 or len(top_shape) != 4:
        raise IRError(f"layer '{self.name}': Resize takes an NHWC input and needs its 4-D top shape "
                      f"(layer_top_shape), got input {list(x.shape)} and top shape {list(top_shape)}")
    method = param_choice(self, "method", METHODS)
    mode = param_choice(self, "mode", MODES, "half_pixel")
    size = (int(top_shape[1]), int(top_shape[2]))
    if self.quantized:
        return resize_quantized(self, self.inputs[0], method, mode, size)
    nchw = nhwc_to_nchw(x)
    if (method, mode) in _TORCH_RESIZE:
        out = F.interpolate(nchw, size=size, **_TORCH_RESIZE[(method, mode)])
    else:
        out = _resize_axis(_resize_axis(nchw, 2, size[0], method, mode), 3, size[1], method, mode)
    out = nchw_to_nhwc(out)
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Resize, "1.0")
def resize_quantize(self, *args):
    raise QT.Unsupported(f"layer '{self.name}' ({self.type}): quantized form not ported to the tool chain's format yet")
    """Both methods keep the input's quantization: bilinear values are convex
    combinations of the inputs, so they stay inside its range."""
    QL.pass_through(self)
    if param_choice(self, "method", METHODS) == "BILINEAR":
        self.params["interp_frac_bits"] = INTERP_FRAC_BITS
