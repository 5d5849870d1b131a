"""Resize H and W of an NHWC tensor to the top shape's, NEAREST or BILINEAR, as the
tool chain computes it (float64 coordinates; the float forward's result is then
rounded to float32).

Source coordinate of output index i along an axis of `size` inputs and `out` outputs,
in float64 and in this order of operations; r is ratio_y/ratio_x when the IR gives them
(float forward only: quantized layers always use size / out):
  HALF_PIXEL         (i + 0.5) * (1 / r) - 0.5, or (i + 0.5) * size / out - 0.5
  PYTORCH_HALF_PIXEL the same, but 0 when out == 1
  ALIGN_CORNERS      i * (size - 1) / (out - 1), 0 when out == 1 (r unused)
  ASYMMETRIC         i * (1 / r), or i * size / out
  TF_HALF_PIXEL_FOR_NN  (i + 0.5) * (1 / r), or (i + 0.5) * size / out
  HALF_PIXEL_SYMMETRIC  o + (i + 0.5) * (1 / r) - 0.5 with o = size / 2 * (1 - out / (size * r)),
                     or (i + 0.5) * size / out - 0.5

NEAREST picks the input at nearest_mode(c) clamped to [0, size - 1]: ROUND_PREFER_FLOOR
(default; round half to even except that exact halves k + 1/2 (k = trunc(c)) go down),
ROUND_PREFER_CEIL floor(c + 1/2), FLOOR, CEIL, SIMPLE (ceil when downsampling, else
trunc). Quantized: the same on the integers (quantization passed through).

BILINEAR: c0 = max(floor(c), 0), c1 = min(ceil(c), size - 1), w1 = c - c0, w0 = 1 - w1
per axis; the four products W = wy * wx (float64), then
out = (in[y0,x0] W00 + in[y0,x1] W01 + in[y1,x0] W10 + in[y1,x1] W11) / 2^F summed in
that order in float64. Float: F = 0. Quantized (on q, not q + zp; quantization passed
through): F = `interp_shift_value`, each W = floor(W * 2^F + 1/2) first, then
out = clamp(round_half_even(sum / 2^F)) (exact: integers below 2^53).
"""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import Shift
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice

METHODS = ["NEAREST", "BILINEAR"]
MODES = ["HALF_PIXEL", "ALIGN_CORNERS", "ASYMMETRIC", "PYTORCH_HALF_PIXEL", "TF_HALF_PIXEL_FOR_NN",
         "HALF_PIXEL_SYMMETRIC"]
NEAREST_MODES = ["ROUND_PREFER_FLOOR", "ROUND_PREFER_CEIL", "FLOOR", "CEIL", "SIMPLE"]
INTERP_SHIFT = 13           # the tool chain's default weight precision
MAX_INTERP_SHIFT = 30       # weights below 2^32 keep the integer sums exact in float64


def source_coordinates(mode: str, out: int, size: int, ratio, device) -> torch.Tensor:
    i = torch.arange(out, dtype=torch.float64, device=device)
    if mode == "ALIGN_CORNERS":
        return i * 0.0 if out == 1 else i * (size - 1) / (out - 1)
    if mode == "PYTORCH_HALF_PIXEL" and out <= 1:
        return i * 0.0
    if mode == "ASYMMETRIC":
        return i * (1.0 / ratio) if ratio is not None else i * size / out
    if mode == "TF_HALF_PIXEL_FOR_NN":
        return (i + 0.5) * (1.0 / ratio) if ratio is not None else (i + 0.5) * size / out
    if mode == "HALF_PIXEL_SYMMETRIC" and ratio is not None:
        offset = size / 2.0 * (1.0 - out / (size * ratio))
        return offset + (i + 0.5) * (1.0 / ratio) - 0.5
    return (i + 0.5) * (1.0 / ratio) - 0.5 if ratio is not None else (i + 0.5) * size / out - 0.5


def nearest_index(c: torch.Tensor, nearest_mode: str, size: int, downsampling: bool) -> torch.Tensor:
    if nearest_mode == "ROUND_PREFER_FLOOR":
        index = torch.where(c == c.trunc() + 0.5, c.floor(), c.round())
    elif nearest_mode == "ROUND_PREFER_CEIL":
        index = torch.floor(c + 0.5)
    elif nearest_mode == "FLOOR":
        index = c.floor()
    elif nearest_mode == "CEIL":
        index = c.ceil()
    else:  # SIMPLE
        index = c.ceil() if downsampling else c.trunc()
    return index.to(torch.int64).clamp_(0, size - 1)


def bilinear(x: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor, shift: int) -> torch.Tensor:
    """The BILINEAR sum over NHWC x (float64) at source coordinates ys, xs."""
    h, w = x.shape[1], x.shape[2]
    y0, y1 = ys.floor().clamp(min=0), ys.ceil().clamp(max=h - 1)
    x0, x1 = xs.floor().clamp(min=0), xs.ceil().clamp(max=w - 1)
    wy1, wx1 = ys - y0, xs - x0
    wy0, wx0 = 1 - wy1, 1 - wx1
    one = float(1 << shift)

    def weight(a, b):
        wgt = (a.reshape(-1, 1) * b.reshape(1, -1) * one).unsqueeze(-1)
        return torch.floor(wgt + 0.5) if shift else wgt

    rows0, rows1 = x.index_select(1, y0.long()), x.index_select(1, y1.long())
    total = rows0.index_select(2, x0.long()) * weight(wy0, wx0)
    total = total + rows0.index_select(2, x1.long()) * weight(wy0, wx1)
    total = total + rows1.index_select(2, x0.long()) * weight(wy1, wx0)
    total = total + rows1.index_select(2, x1.long()) * weight(wy1, wx1)
    return total / one


def ratio_of(node, key: str):
    value = node.get_param(key, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise IRError(f"layer '{node.name}' (Resize): {key} must be a positive number, got {value!r}")
    return float(value)


@op_register(OpType.Resize, "1.0")
def resize_forward(self, *args):
    x_t, out_t = self.inputs[0], self.outputs[0]
    x = x_t.betensor
    top_shape = out_t.ir_shape
    if x.dim() != 4 or len(top_shape) != 4:
        raise IRError(f"layer '{self.name}': Resize takes an NHWC input and needs its 4-D top shape "
                      f"(layer_top_shape), got input {list(x.shape)} and top shape {list(top_shape)}")
    if self.get_param("antialias", False):
        raise IRError(f"layer '{self.name}' (Resize): antialias=true is not supported")
    method = param_choice(self, "method", METHODS)
    mode = param_choice(self, "mode", MODES, "HALF_PIXEL")
    (h, w), (out_h, out_w) = x.shape[1:3], (int(top_shape[1]), int(top_shape[2]))
    ratio_y, ratio_x = (None, None) if self.quantized else (ratio_of(self, "ratio_y"), ratio_of(self, "ratio_x"))
    ys = source_coordinates(mode, out_h, h, ratio_y, x.device)
    xs = source_coordinates(mode, out_w, w, ratio_x, x.device)
    if method == "NEAREST":
        nearest_mode = param_choice(self, "nearest_mode", NEAREST_MODES, "ROUND_PREFER_FLOOR")
        out = x.index_select(1, nearest_index(ys, nearest_mode, h, out_h / h < 1))
        out = out.index_select(2, nearest_index(xs, nearest_mode, w, out_w / w < 1))
        if self.quantized:
            out = out.clamp(out_t.qmin, out_t.qmax)
    elif not self.quantized:
        out = bilinear(x.to(torch.float64), ys, xs, 0).to(torch.float32)
    else:
        shift = Shift.read(self, "interp_").value
        if not 0 <= shift <= MAX_INTERP_SHIFT:
            raise IRError(f"layer '{self.name}' (Resize): interp_shift_value {shift} is outside "
                          f"[0, {MAX_INTERP_SHIFT}]")
        out = torch.round(bilinear(x.to(torch.float64), ys, xs, shift)).clamp_(out_t.qmin, out_t.qmax)
    if self.quantized:
        return QT.store_output(self, out, out_t)
    out_t.betensor = out
    return out


@quant_register(OpType.Resize, "1.0")
def resize_quantize(self, *args):
    """The input's quantization passed through (the integers are interpolated as they
    are); BILINEAR weights of INTERP_SHIFT bits."""
    if self.get_param("antialias", False):
        raise QT.Unsupported(f"layer '{self.name}' (Resize): antialias=true has no integer form here")
    QT.pass_through(self)
    shift = INTERP_SHIFT if param_choice(self, "method", METHODS) == "BILINEAR" else 0
    Shift(shift, Dtype.INT8).write(self, "interp_")
