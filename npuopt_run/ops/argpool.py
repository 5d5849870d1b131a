"""Pooling with indices: MaxPoolingWithArgMax, its inverse MaxUnpool (and UpsampleByIndex,
computed alike), and FractionalPool.

MaxPoolingWithArgMax: the input padded with -2^31, windows of the padded input (ceil_mode
on the padded size, taps past its end skipped), the first maximum in the window's
row-major order; (r, c) its input row and column: index r * W + c (storage_order 1:
c * H + r), then HW as it is, HWC index * C + ch, NHWC n * HWC + index * C + ch, NCHW
n * HWC + ch * H * W + index. A window of padding alone: value 0, index 0 (the tool chain
marks it -(Hp * Wp * C * N + 2), which every flatten_dim keeps negative, then clips at 0).
MaxUnpool / UpsampleByIndex: top of layer_top_shape (the run's batch) filled with 0.0
(-zp_in), each value stored at its index: HW adds (n * C + ch) * H * W and counts in NCHW
order, HWC adds n * HWC, NHWC and NCHW are global (NCHW order for NCHW); indices past the
end are dropped, NumPy's assignment (negative ones from the end, the last write wins).
FractionalPool: boundaries drawn from std::mt19937 (NumPy's RandomState is that generator)
as the tool chain draws them; seed 0 stands for 5489. MAX, AVG (float: sum / area;
integer: sum of q rescaled by the 8-bit fl32(1 / area), no zero point)."""
import numpy as np

from ..intmath import requantize, scale_approximation_f32
from .geometry import out_size
from .pool import checked_window
from .stage import same_quantization, top_bounds

FLATTEN = ("HW", "HWC", "NHWC", "NCHW")
PAD = -float(2 ** 31)


def _flatten(layer):
    flatten = str(layer.param("flatten_dim")).upper()
    if flatten not in FLATTEN:
        raise layer.error(f"unsupported flatten_dim '{flatten}' ({', '.join(FLATTEN)})", "flatten_dim")
    return flatten


# ---- MaxPoolingWithArgMax --------------------------------------------------------------
def argmax_pool(layer, xs, infos):
    x = np.asarray(xs[0], np.float64)
    flatten = _flatten(layer)
    order = layer.param("storage_order", 0)
    if order not in (0, 1):
        raise layer.error(f"storage_order must be 0 or 1, got {order!r}", "storage_order")
    w = checked_window(layer)
    ceil_mode = bool(layer.param("ceil_mode", False))
    n, h, wd, c = x.shape
    top, bottom, left, right = w["pads"]
    hp, wp = h + top + bottom, wd + left + right
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=PAD)
    (kh, kw), (sy, sx), (dy, dx) = w["kernel"], w["stride"], w["dilation"]
    oh, ow = out_size(hp, kh, sy, dy, 0, 0, ceil_mode), out_size(wp, kw, sx, dx, 0, 0, ceil_mode)
    best = np.full((n, oh, ow, c), -np.inf)
    flat = np.full((n, oh, ow, c), -1, np.int64)
    oy, ox = np.arange(oh) * sy, np.arange(ow) * sx
    for i in range(kh):
        for j in range(kw):
            rows, cols = oy + i * dy, ox + j * dx
            ok = (rows < hp)[:, None] & (cols < wp)[None, :]
            v = padded[:, np.minimum(rows, hp - 1)][:, :, np.minimum(cols, wp - 1)]
            better = ok[None, :, :, None] & ((v > best) | (flat < 0))
            best = np.where(better, v, best)
            flat = np.where(better, (rows[:, None] * wp + cols[None, :])[None, :, :, None], flat)
    empty = best == PAD
    best = np.where(empty, 0.0, best)
    flat = np.where(empty, -(hp * wp * c * n + 2), flat)
    r, col = np.floor_divide(flat, wp) - top, np.mod(flat, wp) - left
    index = r * wd + col
    if order == 1:
        index = np.where(r >= 0, col * h + r, index)
    ch = np.arange(c)
    sample = np.arange(n).reshape(-1, 1, 1, 1) * (h * wd * c)
    index = {"HW": index, "HWC": index * c + ch, "NHWC": sample + index * c + ch,
             "NCHW": sample + ch * (h * wd) + index}[flatten]
    return [best, np.maximum(index, 0)]


def argmax_pool_int(layer, xs, infos):
    scale, zp = infos[0].quant(layer)
    if (layer.top_scales[0], layer.top_zps[0]) != (scale, zp) or layer.top_types[0] != infos[0].dtype:
        raise layer.error("the values' scale/zp/dtype differ from the input's; MaxPoolingWithArgMax does not rescale")
    values, index = argmax_pool(layer, xs, infos)
    return [values.astype(np.int64), index]


# ---- MaxUnpool / UpsampleByIndex ---------------------------------------------------------
def unpool(fill):
    def forward(layer, xs, infos):
        values, index = xs[0], np.asarray(xs[1])
        if not np.issubdtype(index.dtype, np.integer) and not np.array_equal(index, np.floor(index)):
            raise layer.error("the indices (input 1) must be integers")
        index = index.astype(np.int64)
        flatten = _flatten(layer)
        _, h, w, c = (int(d) for d in layer.top_shapes[0])
        n = values.shape[0]
        if values.ndim != 4 or index.shape != values.shape or values.shape[3] != c:
            raise layer.error(f"values {list(values.shape)} and indices {list(index.shape)} do not fit the top "
                              f"{list(layer.top_shapes[0])}")
        nchw = flatten in ("HW", "NCHW")
        if nchw:
            values, index = values.transpose(0, 3, 1, 2), index.transpose(0, 3, 1, 2)
        if flatten == "HW":
            index = index + (np.arange(n).reshape(-1, 1, 1, 1) * c + np.arange(c).reshape(1, -1, 1, 1)) * (h * w)
        elif flatten == "HWC":
            index = index + np.arange(n).reshape(-1, 1, 1, 1) * (h * w * c)
        top = np.full(n * h * w * c, fill(layer, infos), dtype=values.dtype)
        index, values = index.reshape(-1), values.reshape(-1)
        keep = index < top.size
        top[index[keep]] = values[keep]
        top = top.reshape((n, c, h, w) if nchw else (n, h, w, c))
        return [top.transpose(0, 2, 3, 1) if nchw else top]
    return forward


def _zero_float(layer, infos):
    return 0.0


def _zero_int(layer, infos):
    same_quantization(layer, infos[0])
    return -infos[0].quant(layer)[1]


# ---- FractionalPool ----------------------------------------------------------------------
class _Draws:
    """The generator's 32-bit outputs one at a time."""

    def __init__(self, seed: int):
        self.state = np.random.RandomState(seed)

    def __call__(self) -> int:
        return int(self.state.randint(0, 1 << 32, dtype=np.uint64))


def _below(draw, bound: int) -> int:
    """std::uniform_int_distribution on [0, bound]."""
    scaling = (2 ** 32 - 1) // (bound + 1)
    while True:
        v = draw()
        if v < (bound + 1) * scaling:
            return v // scaling


def _boundaries(length: int, count: int, pseudo: bool, seed: int) -> np.ndarray:
    draw = _Draws(seed)
    k = length // count
    if pseudo:
        first = draw()
        r = (float(first) + float(draw()) * 2.0 ** 32) / 2.0 ** 64
        a = length / count
        u = r * min((k + 2) / a - 1, (length + 1 - k) / a - (count - 1))
        inner = np.ceil(np.array([a * (i + u) for i in range(1, count)], np.float64).astype(np.float32))
        return np.concatenate([[0], inner.astype(np.int64) - 1, [length]]).astype(np.int64)
    steps = np.array([k + 1] * (length % count) + [k] * (count - length % count), np.int64)
    if count * count <= 2 ** 32 - 1:
        i = 1
        if count % 2 == 0:
            j = _below(draw, 1)
            steps[[1, j]] = steps[[j, 1]]
            i = 2
        while i < count:
            x = _below(draw, (i + 1) * (i + 2) - 1)
            for pos in (x // (i + 2), x % (i + 2)):
                steps[[i, pos]] = steps[[pos, i]]
                i += 1
    return np.concatenate([[0], np.cumsum(steps)])


def _fractional(layer, x):
    method = str(layer.param("method")).upper()
    if method not in ("MAX", "AVG"):
        raise layer.error(f"unsupported method '{method}' (MAX, AVG)", "method")
    seed = int(layer.param("seed", 0)) % (1 << 32) or 5489
    pseudo, overlap = bool(layer.param("pseudo", False)), int(bool(layer.param("overlap", False)))
    sequences, blocks = [], []
    for axis in (1, 2):
        length, count = x.shape[axis], int(layer.top_shapes[0][axis])
        if not 1 <= count <= length:
            raise layer.error(f"the top's axis {axis} ({count}) must lie in [1, {length}]")
        b = _boundaries(length, count, pseudo, seed)
        sequences.append(b)
        blocks.append([(int(b[i]), min(int(b[i + 1]) + overlap, length)) for i in range(count)])
    return method, sequences, blocks


def _pooled(x, blocks, reduce):
    return np.stack([np.stack([reduce(x[:, r0:r1, c0:c1]) for c0, c1 in blocks[1]], 1) for r0, r1 in blocks[0]], 1)


def fractional_float(layer, xs, infos):
    x = xs[0]
    method, sequences, blocks = _fractional(layer, x)
    if method == "MAX":
        y = _pooled(x, blocks, lambda v: v.max(axis=(1, 2)))
    else:
        y = _pooled(x.astype(np.float64), blocks, lambda v: v.sum(axis=(1, 2)) / (v.shape[1] * v.shape[2]))
    return [y] + sequences


def fractional_int(layer, xs, infos):
    x = xs[0]
    scale, zp = infos[0].quant(layer)
    if (layer.top_scales[0], layer.top_zps[0]) != (scale, zp):
        raise layer.error("the values' scale/zp differ from the input's; FractionalPool does not rescale")
    method, sequences, blocks = _fractional(layer, x)
    if method == "MAX":
        return [_pooled(x, blocks, lambda v: v.max(axis=(1, 2)))] + sequences
    _, lo, hi = top_bounds(layer)

    def average(v):
        m, s = scale_approximation_f32(np.float32(1.0) / np.float32(v.shape[1] * v.shape[2]), 8)
        return requantize(layer, v.sum(axis=(1, 2)), m, s, 0, lo, hi)
    return [_pooled(x, blocks, average)] + sequences


FLOAT = {"MaxPoolingWithArgMax": argmax_pool, "MaxUnpool": unpool(_zero_float),
         "UpsampleByIndex": unpool(_zero_float), "FractionalPool": fractional_float}
INT = {"MaxPoolingWithArgMax": argmax_pool_int, "MaxUnpool": unpool(_zero_int), "UpsampleByIndex": unpool(_zero_int),
       "FractionalPool": fractional_int}
