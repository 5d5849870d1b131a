"""What Dilation and Erosion share (grey-scale morphology on NHWC, TensorFlow's dilation2d
and erosion2d): one structuring element per channel, `weights` [C, kh, kw, 1] as the
parser writes them; kernel_y/x, stride_y/x, dilation_y/x, pad_top/bottom/left/right.

Float (as the tool chain): x padded with -inf (Dilation) or +inf (Erosion), then
  Dilation  out[y, x] = max over taps (i, j) of  x[y*sy + i*dy, x*sx + j*dx] + w[i, j]
  Erosion   out[y, x] = min over taps (i, j) of  x[y*sy + i*dy, x*sx + j*dx] - w[kh-1-i, kw-1-j]
(the element reflected, which is erosion2d = -dilation2d(-x, reverse(w))).

Quantized, A = q + zp_in, W the stored weights (symmetric, zero point 0, of the
activations' bits, as the tool chain quantizes them), `scale_value = [M_out, M_x, M_w]`,
`shift_value` s (Eltwise's branch multipliers):
  X = max (min) over taps of A * M_x + (+-)W * M_w,  out = clamp(round_half_even(X * M_out * 2^-s) - zp_out)
with the pads +-inf (a window wholly in the padding saturates)."""
import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..quant.settings import settings_of
from ._layout import nchw_to_nhwc, nhwc_to_nchw, pad_nchw
from .eltwise import branch_multipliers
from .pooling import checked_window


def _geometry(node, x: torch.Tensor):
    """(window params, out_h, out_w) of NHWC x, the weights' shape checked against them."""
    if x.dim() != 4:
        raise IRError(f"layer '{node.name}' ({node.type}): takes an NHWC input, got {x.dim()}-D")
    w = checked_window(node)
    (kh, kw), (sh, sw), (dh, dw) = w["kernel"], w["stride"], w["dilation"]
    top, bottom, left, right = w["pads"]
    channels = x.shape[3]
    shape = tuple(node.get_constant("weights").betensor.shape)
    if shape != (channels, kh, kw, 1):
        raise IRError(f"layer '{node.name}' ({node.type}): weights {list(shape)} do not fit a {kh}x{kw} "
                      f"kernel over {channels} channels (want [{channels}, {kh}, {kw}, 1])")
    out_h = (x.shape[1] + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (x.shape[2] + left + right - dw * (kw - 1) - 1) // sw + 1
    if out_h < 1 or out_w < 1:
        raise IRError(f"layer '{node.name}' ({node.type}): a {kh}x{kw} kernel (dilation {dh}x{dw}) does not fit "
                      f"the padded {x.shape[1]}x{x.shape[2]} input")
    return w, out_h, out_w


def _taps(node, x: torch.Tensor, w: torch.Tensor, erosion: bool, pick):
    """pick-reduction over the taps of x[..] (+ or -) w[tap] (NHWC x, w [C, kh, kw, 1]),
    the element reflected for Erosion, pads +-inf."""
    geo, out_h, out_w = _geometry(node, x)
    (kh, kw), (sh, sw), (dh, dw) = geo["kernel"], geo["stride"], geo["dilation"]
    fill = float("inf") if erosion else float("-inf")
    padded = pad_nchw(nhwc_to_nchw(x), geo["pads"], fill)
    element = w[..., 0].flip(1, 2).neg() if erosion else w[..., 0]  # [C, kh, kw]
    best = None
    for i in range(kh):
        for j in range(kw):
            rows = padded[:, :, i * dh: i * dh + (out_h - 1) * sh + 1: sh, j * dw: j * dw + (out_w - 1) * sw + 1: sw]
            v = rows + element[:, i, j].reshape(1, -1, 1, 1)
            best = v if best is None else pick(best, v)
    return nchw_to_nhwc(best)


def morphology_forward(node, erosion: bool):
    x_t, out = node.inputs[0], node.outputs[0]
    if len(node.inputs) != 1:
        raise IRError(f"layer '{node.name}' ({node.type}): takes 1 input, the IR gives {len(node.inputs)}")
    pick = torch.minimum if erosion else torch.maximum
    w = node.get_constant("weights").betensor
    if not node.quantized:
        out.betensor = _taps(node, computing_float(x_t.betensor), computing_float(w), erosion, pick)
        return out.betensor
    branches = BranchRescales.read(node, 3)
    if branches is None:
        raise IRError(f"layer '{node.name}' ({node.type}): quantized, but 'scale_value' is missing")
    m_out, m_x, m_w = branches.multipliers
    a = QT.shifted(x_t) * float(m_x)
    acc = _taps(node, a, w.to(torch.float64) * float(m_w), erosion, pick)
    return QT.store_output(node, Rescale(m_out, branches.shifts).apply(acc, out.zerop, out.qmin, out.qmax), out)


def morphology_quantize(node) -> None:
    """Weights on a symmetric grid of the activations' bits (the tool chain's forward adds no
    weight zero point), the output on its calibrated range, the branch multipliers."""
    QT.check_quantized_inputs(node)
    x_t, out = node.inputs[0], node.outputs[0]
    if x_t.qinvariant or x_t.is_per_channel:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): an unscaled or per-channel input")
    st = settings_of(node)
    c = node.get_constant("weights")
    f = c.betensor.detach().to(torch.float32).cpu()
    absmax = float(f.abs().max()) if f.numel() else 0.0
    bits = st.activation_bits
    scale, zp, qmin, qmax = qmath.linear_quant_params(-absmax, absmax, bits, True,
                                                      st.quantize_method_for_weight.full_range, True)
    q = qmath.quantize(f, scale, zp, qmin, qmax)
    dtype = Dtype.integer(bits, True)
    c.betensor = q.to(dtype.torch_dtype).to(c.betensor.device)
    c.dtype, c.scale, c.zerop, c.qbits, c.qmin, c.qmax = dtype, scale, zp, bits, qmin, qmax
    c.key_axis = c.block_size = None
    QT.quantize_activation(node, out)
    ratios = [out.scale / x_t.scale, out.scale / scale]
    absmaxes = [QT.shifted_absmax(x_t), int(q.abs().max()) if q.numel() else 0]
    (m_x, m_w), m_out, shift = branch_multipliers(ratios, absmaxes, st.multiplier_bits)
    BranchRescales([m_out, m_x, m_w], shift).write(node)
