"""Signal, colour, layout and BEV layers (docs/ir-ops.md, "Signal, colour, layout and BEV
layers"): OverlapAdd, RgbToYuv, YuvToRgb, Preprocess, BatchToSpaceND, QueryRebatch,
SlotUpdate.

Integer forms: OverlapAdd and SlotUpdate sum A = q + zp exactly and rescale the sums
(scale_value/shift_value); the colour conversions compute on the stored pixels with the
integer coefficients (the float32 steps of the tool chain are exact there) and hold the
0..255 results in the top's type; the others move integers unchanged (QueryRebatch fills
the integer 0 past a list's end). QueryRebatch's third axis follows the data."""
import numpy as np

from ..intmath import requantize
from .indexing import dummy, dummy_int
from .stage import int_param, int_value, same_quantization, shifted, stored_ints, top_bounds

DATA_DEPENDENT_SHAPES = ("QueryRebatch",)


def _one_input(layer, xs):
    if len(xs) != 1:
        raise layer.error(f"takes 1 input, the IR gives {len(xs)}", "layer_bottom")
    return xs[0]


def _rescaled(layer, sums):
    """Exact integer sums through the layer's scale_value/shift_value into its top."""
    zp, lo, hi = top_bounds(layer)
    return requantize(layer, sums, stored_ints(layer, "scale", "scale_value"),
                      stored_ints(layer, "shift", "shift_value"), zp, lo, hi)


# ---- OverlapAdd --------------------------------------------------------------------------
def _overlap_add(layer, frames):
    """[..., F, L] -> [..., (F - 1) * step + L], frame f added at f * step."""
    if frames.ndim < 2:
        raise layer.error(f"the input must be at least 2-D, got shape {list(frames.shape)}")
    count, length = frames.shape[-2:]
    step = int_param(layer, "frame_step", 1)
    if not 1 <= step <= length:
        raise layer.error(f"frame_step {step} must be within 1..{length} (the frame length)", "frame_step")
    out = np.zeros(frames.shape[:-2] + ((count - 1) * step + length,), frames.dtype)
    for f in range(count):
        out[..., f * step:f * step + length] += frames[..., f, :]
    return out


def overlap_add(layer, xs, infos):
    return [_overlap_add(layer, _one_input(layer, xs))]


def overlap_add_int(layer, xs, infos):
    return [_rescaled(layer, _overlap_add(layer, shifted(_one_input(layer, xs), infos[0], layer)))]


# ---- RgbToYuv and YuvToRgb -----------------------------------------------------------------
def _coefficients(layer):
    """(input offsets, output offsets, 3x3 matrix) in float32 and the shift."""
    values = layer.param("coefficient")
    if not isinstance(values, list) or len(values) != 15 or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise layer.error(f"coefficient must be 15 numbers, got {values!r}", "coefficient")
    if str(layer.param("format", "I420")).upper() != "I420":
        raise layer.error(f"format '{layer.param('format')}' is not supported (only I420)", "format")
    shift = int_param(layer, "coefficient_shift")
    if shift < 0:
        raise layer.error(f"coefficient_shift {shift} is negative", "coefficient_shift")
    c = np.array(values, np.float32)
    return c[0:3], c[3:6], c[6:].reshape(3, 3), shift


def _dot3(a, b):
    """sum_k a[..., k] * b[..., k] in float32, left to right."""
    return (a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1]) + a[..., 2] * b[..., 2]


def _pixels(layer, values, quantized):
    """0..255; in the integer form held in the top's type (an int8 top saturates at 127)."""
    values = np.clip(values, 0, 255)
    if not quantized:
        return values
    lo, hi = layer.top_range(0)
    return np.clip(values, lo, hi).astype(np.int64)


def _rgb_to_yuv(layer, xs, quantized):
    """floor(matrix . RGB + bias) * 2^-shift (bias = -in . matrix + out * 2^shift + 512); the
    Y plane, then U and V at every second row and column; rounded when quantized."""
    x = _one_input(layer, xs)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise layer.error(f"needs an NHWC RGB input [N, H, W, 3], got shape {list(x.shape)}")
    in_off, out_off, m, shift = _coefficients(layer)
    two = np.float32(2.0 ** shift)
    bias = np.array([-_dot3(in_off, m[:, j]) for j in range(3)], np.float32) + out_off * two + np.float32(512)
    rgb = x.astype(np.float32)
    yuv = np.stack([np.floor(_dot3(rgb, m[o]) + bias[o]) * np.float32(0.5 ** shift) for o in range(3)], axis=1)
    n = x.shape[0]
    rows = np.concatenate([yuv[:, 0].reshape(n, -1), yuv[:, 1:, ::2, ::2].reshape(n, -1)], axis=1)
    return [_pixels(layer, np.round(rows) if quantized else rows, quantized)]


def _nearest(size_in, size_out):
    """torch's nearest source index: floor(i * in / out) in float32, within the input."""
    scale = np.float32(size_in) / np.float32(size_out)
    return np.minimum(np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.int64), size_in - 1)


def _yuv_to_rgb(layer, xs, quantized):
    """Chroma brought to full size (nearest, then odd rows and inner columns interpolated and
    rounded), RGB = round(((YUV - in) . matrix^T + 128) * 2^-shift + out), 0..255."""
    x = _one_input(layer, xs)
    shape = list(layer.top_shapes[0])
    if len(shape) != 4 or shape[-1] != 3:
        raise layer.error(f"the top must be an NHWC RGB image [N, H, W, 3], the IR says {shape}", "layer_top_shape")
    h, w = shape[1:3]
    size = h * w + 2 * (h // 2) * (w // 2)
    if x.ndim != 2 or x.shape[1] != size:
        raise layer.error(f"an I420 input of a {h}x{w} image is [N, {size}], got shape {list(x.shape)}")
    in_off, out_off, m, shift = _coefficients(layer)
    n = x.shape[0]
    y = x[:, :h * w].reshape(n, 1, h, w).astype(np.float32)
    uv = x[:, h * w:].reshape(n, 2, h // 2, w // 2).astype(np.float32)
    uv = uv[:, :, _nearest(h // 2, h)][:, :, :, _nearest(w // 2, w)]
    half = np.float32(0.5)
    for r in range(1, h - 1, 2):
        uv[:, :, r] = np.round(uv[:, :, r - 1] * half + uv[:, :, r + 1] * half)
    left, right = uv[..., :-2].copy(), uv[..., 2:].copy()
    three, quarter = np.float32(3), np.float32(0.25)
    for c in range(1, w - 1):  # odd columns lean on the left neighbour, even ones on the right
        a, b = left[..., c - 1], right[..., c - 1]
        uv[..., c] = np.round((a * three + b if c % 2 else a + b * three) * quarter)
    yuv = np.concatenate([y, uv], axis=1).transpose(0, 2, 3, 1) - in_off
    rgb = np.stack([_dot3(yuv, m[c]) for c in range(3)], axis=-1)
    rgb = (rgb + np.float32(128)) * np.float32(0.5 ** shift) + out_off
    return [_pixels(layer, np.round(rgb), quantized)]


# ---- BatchToSpaceND ----------------------------------------------------------------------
def batch_to_space_nd(layer, xs, infos):
    """Batch (i_1 * b_2 * ... + i_M) * N' + n goes to offset (i_1..i_M) of sample n's blocks;
    then the crops are cut off."""
    x = _one_input(layer, xs)
    blocks = layer.param("block_size")
    blocks = [blocks] if isinstance(blocks, int) else blocks
    crops = layer.param("crops", [[0, 0]] * len(blocks))
    flat = [int_value(layer, "crops", v) for pair in crops for v in (pair if isinstance(pair, list) else [pair])]
    m = len(blocks)
    if not m or x.ndim < m + 1 or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in blocks):
        raise layer.error(f"block_size {blocks} does not fit a {x.ndim}-D input", "block_size")
    if len(flat) != 2 * m or min(flat) < 0:
        raise layer.error(f"crops {crops} must be {m} pairs of non-negative integers", "crops")
    total = int(np.prod(blocks))
    if x.shape[0] % total:
        raise layer.error(f"the batch {x.shape[0]} is not a multiple of {total}")
    n, spatial, rest = x.shape[0] // total, list(x.shape[1:1 + m]), list(x.shape[1 + m:])
    y = x.reshape(blocks + [n] + spatial + rest)
    order = [m] + [i for a in range(m) for i in (m + 1 + a, a)] + list(range(2 * m + 1, y.ndim))
    y = y.transpose(order).reshape([n] + [s * b for s, b in zip(spatial, blocks)] + rest)
    cut = []
    for a, (s, b) in enumerate(zip(spatial, blocks)):
        begin, end = flat[2 * a], flat[2 * a + 1]
        if begin + end >= s * b:
            raise layer.error(f"crops ({begin}, {end}) leave nothing of spatial axis {a + 1}", "crops")
        cut.append(slice(begin, s * b - end))
    return [y[(slice(None), *cut)]]


# ---- QueryRebatch and SlotUpdate ---------------------------------------------------------
def _lists(layer, xs, rows):
    """Inputs 1..K: 1-D integer index lists within [-rows, rows), as non-negative int64."""
    if len(xs) < 2:
        raise layer.error(f"needs the queries and one index list per camera, the IR gives {len(xs)} input(s)")
    lists = []
    for i, idx in enumerate(xs[1:], 1):
        idx = np.asarray(idx)
        if idx.ndim != 1 or (idx.dtype.kind == "f" and not np.array_equal(idx, np.floor(idx))):
            raise layer.error(f"index list {i} must be 1-D integers, got shape {list(idx.shape)}")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < -rows or idx.max() >= rows):
            raise layer.error(f"index list {i} [{idx.min()}, {idx.max()}] out of range for {rows} rows")
        lists.append(np.where(idx < 0, idx + rows, idx))
    return lists


def query_rebatch(layer, xs, infos):
    """[N, K, longest list, C...]: camera k's row j the query its list names; 0 after its end."""
    q = xs[0]
    if q.ndim < 2:
        raise layer.error(f"the queries need a batch and a query axis, got shape {list(q.shape)}")
    lists = _lists(layer, xs, q.shape[1])
    if list(layer.top_shapes[0][1:2]) != [len(lists)]:
        raise layer.error(f"{len(lists)} index lists for a top of shape {list(layer.top_shapes[0])} (cameras "
                          f"on its second axis)", "layer_top_shape")
    out = np.zeros((q.shape[0], len(lists), max(i.size for i in lists)) + q.shape[2:], q.dtype)
    for k, idx in enumerate(lists):
        out[:, k, :idx.size] = q[:, idx]
    return [out]


def _slot_update(layer, xs, values):
    """Zeros [N, Q, C...], then camera k's row j added into the slot its list names."""
    q = xs[0]
    slots = list(layer.top_shapes[0])
    if q.ndim < 3 or len(slots) != q.ndim - 1 or slots[2:] != list(q.shape[3:]):
        raise layer.error(f"queries {list(q.shape)} do not fit the top {slots}", "layer_top_shape")
    lists = _lists(layer, xs, slots[1])
    if len(lists) != q.shape[1] or any(idx.size > q.shape[2] for idx in lists):
        raise layer.error(f"{len(lists)} index lists (of {[i.size for i in lists]} entries) do not fit queries "
                          f"{list(q.shape)}")
    out = np.zeros((q.shape[0], slots[1]) + q.shape[3:], values.dtype)
    for k, idx in enumerate(lists):
        np.add.at(out, (slice(None), idx), values[:, k, :idx.size])
    return out


def slot_update(layer, xs, infos):
    return [_slot_update(layer, xs, xs[0])]


def slot_update_int(layer, xs, infos):
    return [_rescaled(layer, _slot_update(layer, xs, shifted(xs[0], infos[0], layer)))]


def _moves(move):
    def forward(layer, xs, infos):
        same_quantization(layer, infos[0])
        return move(layer, xs, infos)
    return forward


def rgb_to_yuv(layer, xs, infos):
    return _rgb_to_yuv(layer, xs, False)


def rgb_to_yuv_int(layer, xs, infos):
    return _rgb_to_yuv(layer, xs, True)


def yuv_to_rgb(layer, xs, infos):
    return _yuv_to_rgb(layer, xs, False)


def yuv_to_rgb_int(layer, xs, infos):
    return _yuv_to_rgb(layer, xs, True)


FLOAT = {"OverlapAdd": overlap_add, "RgbToYuv": rgb_to_yuv, "YuvToRgb": yuv_to_rgb, "Preprocess": dummy,
         "BatchToSpaceND": batch_to_space_nd, "QueryRebatch": query_rebatch, "SlotUpdate": slot_update}
INT = {"OverlapAdd": overlap_add_int, "RgbToYuv": rgb_to_yuv_int, "YuvToRgb": yuv_to_rgb_int, "Preprocess": dummy_int,
       "BatchToSpaceND": _moves(batch_to_space_nd), "QueryRebatch": _moves(query_rebatch),
       "SlotUpdate": slot_update_int}
