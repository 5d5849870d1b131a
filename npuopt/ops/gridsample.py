"""GridSample: out[n, p] = input 0 (NHWC, or NDHWC) sampled at grid[n, p] (input 1, [N, Ho,
Wo, 2] or [N, Do, Ho, Wo, 3]: x, y(, z) in [-1, 1]). Top [N, Ho, Wo, C] (or [N, Do, Ho,
Wo, C]). A coordinate g of an axis of `size` becomes (g + 1) / 2 (size - 1) with
align_corners, else ((g + 1) size - 1) / 2, in float32 (the tool chain's order).

* NEAREST: the pixel at round-half-even of it; BILINEAR (LINEAR): the taps floor and next,
  t = top + (bottom - top) f_y, top = tl + (tr - tl) f_x (5-D: the same per depth plane,
  then along z). ZEROS padding reads 0 outside the map, BORDER the nearest pixel: as the
  tool chain's float forward.
* CUBIC or REFLECTION: torch's grid_sample (bicubic with A = -0.75, coordinates reflected
  at the borders). The tool chain's float forward computes these as BILINEAR and ZEROS
  and its quantizer refuses them: npuopt keeps them in float.

Quantized (NEAREST/BILINEAR with ZEROS/BORDER; docs/integer-semantics.md, GridSample):
the map's integers are interpolated with integer weights; the top keeps the map's
quantization. Two forms, as the tool chain's forward picks them by the grid's bits:
* a 4-D layer with a grid of at most 8 bits: tables indexed by the grid code + 128
  (`lutx`, `luty`: int16 pixel indices; BILINEAR also `x_terp`, `y_terp`: uint16
  fractions of 2^coordinate_x_shift / 2^coordinate_y_shift);
* otherwise the coordinate in Q(coordinate_x_shift) (int16) of (q + zp) M >> s
  (scale_value/shift_value per axis) + (size - 1) 2^(shift - 1); NEAREST adds 2^(shift - 1)
  (both clamped to int16) before >> shift; BILINEAR takes >> shift and the fraction.
A tap outside the map reads -zp (ZEROS) or the nearest pixel (BORDER); the products
(d * f) >> shift floor."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from . import _grid as GI
from . import _roi
from ._layout import param_choice

METHODS = {"NEAREST": "NEAREST", "BILINEAR": "BILINEAR", "LINEAR": "BILINEAR", "CUBIC": "CUBIC",
           "BICUBIC": "CUBIC"}


def grid_params(node):
    method = METHODS[param_choice(node, "method", list(METHODS), "BILINEAR")]
    padding = param_choice(node, "padding_mode", ["ZEROS", "BORDER", "REFLECTION"], "ZEROS")
    align = node.get_param("align_corners", False)
    if align not in (True, False):
        raise IRError(f"layer '{node.name}' (GridSample): align_corners {align!r} must be true or false")
    return method, padding, bool(align)


def check_grid(node):
    _roi.check_inputs(node, 2)
    x, grid = (t.betensor for t in node.inputs)
    if x.dim() not in (4, 5) or grid.dim() != x.dim() or grid.shape[-1] != x.dim() - 2 or \
            grid.shape[0] != x.shape[0]:
        raise IRError(f"layer '{node.name}' (GridSample): needs a map [N, (D,) H, W, C] and a grid [N, ..., "
                      f"{x.dim() - 2}] of its batch and rank, got {list(x.shape)} and {list(grid.shape)}")
    return x, grid


def float_grid_sample(x, grid, method, padding, align):
    if method == "CUBIC" or padding == "REFLECTION":
        if method == "CUBIC" and x.dim() == 5:
            raise IRError("GridSample: CUBIC takes a 4-D map")
        mode = {"NEAREST": "nearest", "BILINEAR": "bilinear", "CUBIC": "bicubic"}[method]
        perm = list(range(x.dim()))
        chw = x.permute(0, perm[-1], *perm[1:-1])
        out = torch.nn.functional.grid_sample(chw, grid.to(x.dtype), mode=mode, padding_mode=padding.lower(),
                                              align_corners=align)
        return out.permute(0, *perm[2:], 1)
    g = grid.to(torch.float32)
    sizes = x.shape[1:-1]
    coords = [GI.denormalized(g[..., len(sizes) - 1 - k], size, align) for k, size in enumerate(sizes)]
    if method == "NEAREST":
        return GI.taps(x, [torch.round(c).long() for c in coords], padding, 0.0)
    lows = [torch.floor(c) for c in coords]
    fracs = [(c - lo).to(x.dtype).unsqueeze(-1) for c, lo in zip(coords, lows)]
    return GI.interpolate(x, [lo.long() for lo in lows], padding, 0.0, lambda a, b, k: a + (b - a) * fracs[k])


@op_register(OpType.GridSample, "1.0")
def grid_sample_forward(self, *args):
    x, grid = check_grid(self)
    method, padding, align = grid_params(self)
    out_t = self.outputs[0]
    if not self.quantized:
        try:
            out_t.betensor = float_grid_sample(x, grid, method, padding, align)
        except IRError as e:
            raise IRError(f"layer '{self.name}' ({self.type}): {str(e).split(': ', 1)[1]}") from None
        return out_t.betensor
    y = GI.int_grid_sample(self, method, padding, x, grid)
    return QT.store_output(self, torch.clamp(y, out_t.qmin, out_t.qmax), out_t)


@quant_register(OpType.GridSample, "1.0")
def grid_sample_quantize(self, *args):
    _roi.check_inputs(self, 2)
    method, padding, align = grid_params(self)
    if method == "CUBIC" or padding == "REFLECTION":
        raise QT.Unsupported(f"layer '{self.name}' (GridSample): {method} with {padding} padding has no integer "
                             f"form in the tool chain; kept in float")
    GI.quantize_grid_sample(self, method, padding, align)
