"""AffineGrid and Col2Im (docs/ir-ops.md, docs/integer-semantics.md).

AffineGrid: out[n, (d,) h, w] = theta[n] @ (x_w, y_h(, z_d), 1), x_w = torch's
linspace(-1, 1, W) (times (W - 1) / W without align_corners); sizes from input 1 ([N, (D,)
H, W, C]). Integer: the tables w_lut/h_lut(/d_lut) (coordinates times 2^multiplier_bits),
exact sums on theta's stored integers, clamped to int32, then requantized.
Col2Im: the values of each block added into the image at p * stride - pad_begin + k *
dilation (pad positions dropped); integer: the stored integers summed, then requantized."""
import math

import numpy as np

from ..floats import computing_float
from ..intmath import requantize
from .stage import rescale, top_bounds


def _linspace(n, dtype):
    """torch.linspace(-1, 1, n): the first half from -1, the second from 1."""
    if n == 1:
        return np.array([-1.0], dtype)
    step = dtype(2.0) / dtype(n - 1)
    i = np.arange(n)
    return np.where(i < n // 2, dtype(-1) + i.astype(dtype) * step, dtype(1) - (n - 1 - i).astype(dtype) * step)


def _affine_sizes(layer, xs):
    if len(xs) != 2:
        raise layer.error(f"takes 2 inputs (theta, size), got {len(xs)}")
    theta = xs[0]
    rank = theta.shape[1] if theta.ndim == 3 else 0
    sizes = [int(v) for v in xs[1].reshape(-1)]
    if rank not in (2, 3) or theta.shape[2] != rank + 1 or len(sizes) != rank + 2 or min(sizes[1:-1]) <= 0:
        raise layer.error(f"needs theta [N, 2, 3] or [N, 3, 4] and a size of its rank + 2, got {list(theta.shape)} "
                          f"and {sizes}")
    align = layer.param("align_corners", False)
    if align not in (True, False):
        raise layer.error(f"align_corners {align!r} must be true or false", "align_corners")
    return sizes[1:-1], bool(align)


def _base(lines):
    """[(D *) H * W, rank] points (x, y(, z)) from per-axis lines given as (x, y(, z))."""
    grids = np.meshgrid(*lines[::-1], indexing="ij")[::-1]
    return np.stack(grids, -1).reshape(-1, len(lines))


def affine_grid_float(layer, xs, infos):
    sizes, align = _affine_sizes(layer, xs)
    theta = computing_float(xs[0])
    t = theta.dtype.type
    lines = []
    for size in sizes[::-1]:
        line = _linspace(size, t)
        lines.append(line if align else line * t(size - 1) / t(size))
    base = _base(lines)
    out = []
    for i in range(len(sizes)):  # elementwise sums in the order x, y(, z), translation
        total = base[None, :, 0] * theta[:, i, 0, None]
        for k in range(1, len(sizes)):
            total = total + base[None, :, k] * theta[:, i, k, None]
        out.append(total + theta[:, i, -1, None])
    return [np.stack(out, -1).reshape([theta.shape[0]] + sizes + [len(sizes)])]


def affine_grid_int(layer, xs, infos):
    sizes, _ = _affine_sizes(layer, xs)
    bits = layer.param("multiplier_bits", 0)
    if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 30:
        raise layer.error(f"multiplier_bits {bits!r} must be an integer in [0, 30]", "multiplier_bits")
    lines = [layer.const(f"{a}_lut").astype(np.int64).reshape(-1) for a in "whd"[:len(sizes)]]
    if [len(v) for v in lines] != sizes[::-1]:
        raise layer.error(f"w_lut/h_lut/d_lut hold {[len(v) for v in lines]} values, the grid is {sizes[::-1]}")
    q = xs[0].astype(np.int64)
    out = np.einsum("pk,nik->npi", _base(lines), q[:, :, :-1]) + q[:, None, :, -1] * (1 << bits)
    out = np.clip(out, -2 ** 31, 2 ** 31 - 1)
    zp, lo, hi = top_bounds(layer)
    y = requantize(layer, out, *rescale(layer, 1), zp, lo, hi)
    return [y.reshape([q.shape[0]] + sizes + [len(sizes)])]


# ---- Col2Im -------------------------------------------------------------------------------
def _count(layer, key, default, least):
    v = layer.param(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise layer.error(f"{key} {v!r} must be an integer >= {least}", key)
    return v


def _fold_index(layer, xs):
    if len(xs) != 3:
        raise layer.error(f"takes 3 inputs (columns, image shape, block shape), got {len(xs)}")
    image = [int(v) for v in xs[1].reshape(-1)]
    kernel = [int(v) for v in xs[2].reshape(-1)]
    if len(image) not in (2, 3) or len(kernel) != len(image) or min(image + kernel) <= 0:
        raise layer.error(f"image shape {image} and block shape {kernel} must be 2 or 3 positive sizes")
    axes = ("z", "y", "x")[3 - len(image):]
    pads = [("pad_top", "pad_bottom"), ("pad_left", "pad_right")] if len(image) == 2 else \
        [(f"pad_{a}_begin", f"pad_{a}_end") for a in axes]
    index, valid = np.zeros((1, 1), np.int64), np.ones((1, 1), bool)
    for a, size, k, (pb, pe) in zip(axes, image, kernel, pads):
        stride, dil = _count(layer, f"stride_{a}", 1, 1), _count(layer, f"dilation_{a}", 1, 1)
        begin, end = _count(layer, pb, 0, 0), _count(layer, pe, 0, 0)
        span = size + begin + end - dil * (k - 1) - 1
        if span < 0:
            raise layer.error(f"a kernel of {k} does not fit the padded {a} axis", f"kernel_{a}")
        pos = np.arange(span // stride + 1)[None, :] * stride - begin + np.arange(k)[:, None] * dil
        ok = (pos >= 0) & (pos < size)
        index = (index[:, None, :, None] * size + pos[None, :, None, :]).reshape(index.shape[0] * k, -1)
        valid = (valid[:, None, :, None] & ok[None, :, None, :]).reshape(index.shape)
    x = xs[0]
    if x.ndim != 3 or x.shape[1] % index.shape[0] or x.shape[2] != index.shape[1]:
        raise layer.error(f"input 0 {list(x.shape)} must be [N, C * {index.shape[0]}, {index.shape[1]}]")
    return image, np.where(valid, index, -1)


def _fold(x, image, index):
    n = x.shape[0]
    c = x.shape[1] // index.shape[0]
    flat = index.reshape(-1)
    keep = flat >= 0
    out = np.zeros((n, c, math.prod(image)), x.dtype)
    np.add.at(out, (slice(None), slice(None), flat[keep]), x.reshape(n, c, -1)[:, :, keep])
    return out.reshape([n, c] + image)


def col2im_float(layer, xs, infos):
    image, index = _fold_index(layer, xs)
    return [_fold(computing_float(xs[0]), image, index)]


def col2im_int(layer, xs, infos):
    image, index = _fold_index(layer, xs)
    s = _fold(xs[0].astype(np.int64), image, index)
    zp, lo, hi = top_bounds(layer)
    return [requantize(layer, s, *rescale(layer, 1), zp, lo, hi)]


FLOAT = {"AffineGrid": affine_grid_float, "Col2Im": col2im_float}
INT = {"AffineGrid": affine_grid_int, "Col2Im": col2im_int}
