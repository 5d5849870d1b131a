"""Resize H and W of an NHWC tensor to the top shape's, NEAREST or BILINEAR, with the
half_pixel, align_corners or asymmetric coordinate mapping.

Rounding of NEAREST: asymmetric floors (PyTorch 'nearest', TF), half_pixel floors the
shifted coordinate (PyTorch 'nearest-exact', TF half_pixel_centers), align_corners
rounds halves up (TF align_corners)."""
import torch
import torch.nn.functional as F

from ..errors import IRError
from ..registry import OpType, op_register
from ._layout import nchw_to_nhwc, nhwc_to_nchw, param_choice

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


@op_register(OpType.Resize, "1.0")
def resize_forward(self, *args):
    x = self.inputs[0].betensor
    top_shape = self.outputs[0].ir_shape
    if x.dim() != 4 or len(top_shape) != 4:
        raise IRError(f"layer '{self.name}': Resize takes an NHWC input and needs its 4-D top shape "
                      f"(layer_top_shape), got input {list(x.shape)} and top shape {list(top_shape)}")
    method = param_choice(self, "method", ["NEAREST", "BILINEAR"])
    mode = param_choice(self, "mode", ["half_pixel", "align_corners", "asymmetric"], "half_pixel")
    size = (int(top_shape[1]), int(top_shape[2]))
    nchw = nhwc_to_nchw(x)
    if (method, mode) in _TORCH_RESIZE:
        out = F.interpolate(nchw, size=size, **_TORCH_RESIZE[(method, mode)])
    else:
        out = _resize_axis(_resize_axis(nchw, 2, size[0], method, mode), 3, size[1], method, mode)
    out = nchw_to_nhwc(out)
    self.outputs[0].betensor = out
    return out
