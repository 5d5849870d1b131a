"""RotaryEmbedding: inputs x, cos, sin[, position_ids].

x is [B, S, num_heads * D] or [B, H, S, D]. The first R = rotary_embedding_dim values of
each head (R < 1: all D) turn in pairs (a, b): the halves of those R values, or the even
and odd ones with `interleaved`. Each pair at position p = position_ids[b, s] (default s)
turns by the table rows c = cos[p], t = sin[p] (cos/sin [P, W] or [B, P, W], their first
R/2 columns): (a c - b t, a t + b c). The values past R pass.

Integer (zero points 0 throughout): with the float32 params r_c = rotate_rescale_cos,
r_s = rotate_rescale_sin, r_n = not_rotate_rescale, a pair's new values are
clamp(rint(fl32(fl32(c a) r_c) -/+ fl32(fl32(t b) r_s))) in float32, and a passed value
clamp(rint(fl32(x r_n))).
"""
import numpy as np

from ..intmath import quantize
from .stage import int_param


def _heads(layer, x):
    """x as [B, H, S, D], and how to put a result back into x's layout."""
    if x.ndim == 4:
        return x, lambda y: y
    if x.ndim != 3:
        raise layer.error(f"takes a 3-D or 4-D input, got {x.ndim}-D", "layer_bottom_shape")
    b, s, hidden = x.shape
    h = int_param(layer, "num_heads")
    if h < 1 or hidden % h:
        raise layer.error(f"num_heads {h} does not split a hidden size of {hidden}", "num_heads")
    return x.reshape(b, s, h, hidden // h).transpose(0, 2, 1, 3), \
        lambda y: y.transpose(0, 2, 1, 3).reshape(b, s, hidden)


def _rows(layer, xs, batch, seq, half):
    """The cos and sin rows at each position: [B, 1, S, half]."""
    if len(xs) not in (3, 4):
        raise layer.error(f"takes 3 or 4 inputs, the IR gives {len(xs)}", "layer_bottom")
    if len(xs) == 4:
        pos = np.asarray(xs[3]).astype(np.int64)
        if pos.ndim != 2 or pos.shape[1] != seq or pos.shape[0] not in (1, batch):
            raise layer.error(f"position_ids of shape {list(pos.shape)} for [{batch}, {seq}]", "layer_bottom_shape")
    else:
        pos = np.arange(seq)[None]
    pos = np.broadcast_to(pos, (batch, seq))
    out = []
    for table in xs[1:3]:
        table = table[None] if table.ndim == 2 else table
        if table.ndim != 3 or table.shape[0] not in (1, batch) or table.shape[2] < half:
            raise layer.error(f"cos/sin of shape {list(table.shape)} for {half} columns", "layer_bottom_shape")
        positions = table.shape[1]
        if pos.size and (pos.min() < -positions or pos.max() >= positions):
            raise layer.error(f"position_ids outside [-{positions}, {positions})")
        which = np.arange(batch)[:, None] if table.shape[0] == batch else np.zeros((batch, 1), np.int64)
        out.append(table[which, pos % positions][..., :half][:, None])
    return out


def _apply(layer, xs, turn, keep):
    x, back = _heads(layer, xs[0])
    d = x.shape[-1]
    r = int_param(layer, "rotary_embedding_dim", 0)
    r = d if r < 1 else r
    if r > d or r % 2:
        raise layer.error(f"rotary_embedding_dim {r} for heads of {d}", "rotary_embedding_dim")
    c, t = _rows(layer, xs, x.shape[0], x.shape[2], r // 2)
    part = x[..., :r]
    interleaved = layer.param("interleaved", 0)
    if interleaved not in (0, 1):
        raise layer.error(f"interleaved must be 0 or 1, got {interleaved!r}", "interleaved")
    a, b = (part[..., 0::2], part[..., 1::2]) if interleaved else (part[..., :r // 2], part[..., r // 2:])
    first, second = turn(a, b, c, t)
    if interleaved:
        turned = np.stack([first, second], axis=-1).reshape(part.shape)
    else:
        turned = np.concatenate([first, second], axis=-1)
    return [back(np.concatenate([turned, keep(x[..., r:])], axis=-1))]


def rope_float(layer, xs, infos):
    floats = [np.asarray(v, np.float64) for v in xs[:3]] + list(xs[3:])
    return [y.astype(np.float32) for y in _apply(layer, floats, lambda a, b, c, t: (a * c - b * t, a * t + b * c),
                                                  lambda rest: rest)]


def rope_int(layer, xs, infos):
    for info in infos[:3]:
        if info.quant(layer)[1] != 0:
            raise layer.error(f"input '{info.name}' has zero point {info.zp}; the integer form takes none")
    if layer.top_zps[0] != 0:
        raise layer.error("the top's zero point must be 0", "layer_top_zp")
    lo, hi = layer.top_range(0)
    r_c, r_s, r_n = (np.float32(layer.param(k)) for k in ("rotate_rescale_cos", "rotate_rescale_sin",
                                                          "not_rotate_rescale"))

    def product(u, v, ratio):
        return (np.asarray(u, np.int64) * np.asarray(v, np.int64)).astype(np.float32) * ratio

    def turn(a, b, c, t):
        return (quantize(product(c, a, r_c) - product(t, b, r_s), 1.0, 0, lo, hi),
                quantize(product(t, a, r_s) + product(c, b, r_c), 1.0, 0, lo, hi))
    return _apply(layer, xs, turn, lambda rest: quantize(rest.astype(np.float32) * r_n, 1.0, 0, lo, hi))


FLOAT = {"RotaryEmbedding": rope_float}
INT = {"RotaryEmbedding": rope_int}
