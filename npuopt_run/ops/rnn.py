"""Recurrent layers (BasicLSTM, GRUv1, GRUv3) and ReverseSequence (docs/integer-semantics.md,
"Recurrent layers"; docs/ir-ops.md for the params).

Float: float64 steps over time. Gate activations by the parser's names, activation_alpha
and activation_beta consumed in order by the functions that take them (ONNX Runtime's
defaults where they run out); every gate input clamped to +-threshold. Initial states:
row i % rows for batch item i. direction reverse reads the input backwards (then its
first time_steps) and writes Y back in the input's order.

Integer, R(v, M, s, lo, hi) = clamp(round_half_even(v * M * 2^-s), lo, hi), I = int32's
range, [qmin, qmax] the top dtype's range, T(q, lut) the lookup of q - qmin_of(in bits) in
a 256-entry table (interpolated at 16 bits):
* BasicLSTM: table scale/shift [M0, M1 (1 or 4 cell), M2 (1 or cell), M3, M4, per step
  M5, M6]; z = x W_x + R(h W_h, M0, S0, I) + b (8 bits), or R(x W_x, 1, S1 - m) +
  R(R(h W_h, 1, S0 - m, I), M0, S1, I) + R(b, 1, S1 - m) (16 bits, m = lut_shift_value);
  gates i, f, o: T(R(z, M1, S1 (16 bits: m), qmin, qmax)), g: T(R(z, M2, S2 (16 bits:
  S2 - S1_i + m))); with d = diff_shifts[t]: c' = R(i g, 1, d) + R(f c, M5, S5 + d),
  h = R(o T(R(c', M3, S3 - d, qmin + 1, qmax)), M4, S4, qmin + 1, qmax),
  c = R(c', M6, S6 - d, qmin + 1, qmax).
* GRU: six rescales (params, or constants of 2, 2, 1, 1 cells and 2); at 16 bits each
  sum is pre-shifted by P = max(S - remain_shift, 0) (default 10) and the rescale
  shifts by min(S, remain_shift) (+ the input pre-shift for the recurrent terms);
  r, u = T(R(x Wgx + R(h Wgh, M0, S0) + bg, M1, S1, qmin, qmax), lut_rt);
  GRUv1: k = r R(h Wch + bh, hidden_scale, hidden_shift, qmin, qmax); GRUv3: k =
  round(r h / 2^bits_in) Wch; c = T(R(x Wcx + R(k, M2, S2) + bc, M3, S3, qmin, qmax), lut_ht);
  h = R(R((qmax - u) c, M4, S4, I) + u h, M5, S5, qmin + 1, qmax).
"""
import math

import numpy as np

from ..intmath import exact_matmul, lut_lookup, requantize, shift_round_even
from .stage import int_param, same_quantization, stored_ints

I32 = (-(1 << 31), (1 << 31) - 1)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# name -> (f(x, alpha, beta), alphas taken, betas taken, default alpha, default beta)
ACTS = {
    "SIGMOID": (lambda x, a, b: _sigmoid(x), 0, 0, 0.0, 0.0),
    "TANH": (lambda x, a, b: np.tanh(x), 0, 0, 0.0, 0.0),
    "RELU": (lambda x, a, b: np.maximum(x, 0.0), 0, 0, 0.0, 0.0),
    "AFFINE": (lambda x, a, b: a * x + b, 1, 1, 1.0, 0.0),
    "LEAKYRELU": (lambda x, a, b: np.where(x >= 0, x, a * x), 1, 0, 0.01, 0.0),
    "THRESHOLDEDRELU": (lambda x, a, b: np.where(x > a, x, 0.0), 1, 0, 1.0, 0.0),
    "SCALEDTANH": (lambda x, a, b: a * np.tanh(b * x), 1, 1, 1.0, 1.0),
    "HARDSIGMOID": (lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), 1, 1, 0.2, 0.5),
    "ELU": (lambda x, a, b: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0.0))), 1, 0, 1.0, 0.0),
    "SOFTSIGN": (lambda x, a, b: x / (1.0 + np.abs(x)), 0, 0, 0.0, 0.0),
    "SOFTPLUS": (lambda x, a, b: np.logaddexp(0.0, x), 0, 0, 0.0, 0.0),
}
GATES = {"BasicLSTM": (4, 4, ("SIGMOID", "TANH", "TANH")), "GRUv3": (3, 3, ("SIGMOID", "TANH")),
         "GRUv1": (3, 4, ("SIGMOID", "TANH"))}


class Shape:
    """The params a recurrent layer's loop needs, checked against its constants."""

    def __init__(self, layer, x):
        gates, bias_rows, default = GATES[layer.type]
        w = layer.const("weights")
        if x.ndim != 3:
            raise layer.error(f"input must be [batch, time, input_size], got {list(x.shape)}")
        self.steps = int_param(layer, "time_steps")
        self.size = int_param(layer, "input_size", x.shape[2])
        self.cell = int_param(layer, "cell_size", w.shape[0] // gates)
        if not 1 <= self.steps <= x.shape[1] or self.size != x.shape[2] or self.cell < 1:
            raise layer.error(f"time_steps {self.steps}, input_size {self.size}, cell_size {self.cell} do not fit "
                              f"the input {list(x.shape)}", "time_steps")
        if w.shape != (gates * self.cell, self.size + self.cell) or layer.const("biases").size != bias_rows * self.cell:
            raise layer.error(f"weights {list(w.shape)} / biases {layer.const('biases').size} do not fit "
                              f"{gates} gates of {self.cell} cells", "weights_shape")
        direction = str(layer.param("direction", "forward")).lower()
        if direction not in ("forward", "reverse"):
            raise layer.error(f"unsupported direction '{direction}'", "direction")
        self.reverse = direction == "reverse"
        names = layer.param("activations", list(default))
        names = [str(n).upper() for n in (names if isinstance(names, list) else [names])]
        if len(names) != len(default) or any(n not in ACTS for n in names):
            raise layer.error(f"unsupported activations {names}", "activations")
        self.acts = self._functions(layer, names)
        self.threshold = float(layer.param("threshold", math.inf))
        seq = layer.param("out_sequence", ["Y"] if layer.type == "BasicLSTM" else ["H"])
        self.out_sequence = [str(s) for s in (seq if isinstance(seq, list) else [seq])]

    @staticmethod
    def _functions(layer, names):
        alphas = [float(v) for v in _as_list(layer.param("activation_alpha", []))]
        betas = [float(v) for v in _as_list(layer.param("activation_beta", []))]
        out = []
        for n in names:
            fn, na, nb, a, b = ACTS[n]
            a = alphas.pop(0) if na and alphas else a
            b = betas.pop(0) if nb and betas else b
            out.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
        return out

    def steps_in(self, x):
        return (x[:, ::-1] if self.reverse else x)[:, :self.steps]

    def seq_out(self, hs):
        y = np.stack(hs, axis=1)
        return y[:, ::-1] if self.reverse else y

    def clamp(self, v):
        return v if math.isinf(self.threshold) else np.clip(v, -self.threshold, self.threshold)


def _as_list(v):
    return v if isinstance(v, list) else [v]


def _state(s, batch):
    return s[np.arange(batch) % s.shape[0]]


# ---- float -----------------------------------------------------------------------------
def lstm_float(layer, xs, infos):
    p = Shape(layer, xs[0])
    H, n = p.cell, p.size
    x = p.steps_in(xs[0])
    w = layer.const("weights").astype(np.float64)
    b = layer.const("biases").astype(np.float64).copy()
    b[2 * H:3 * H] += float(layer.param("forget_bias", 0))
    clip = float(layer.param("cell_clip", math.inf))
    a0, a1, a2 = p.acts
    h, c = _state(xs[1], len(x)), _state(xs[2], len(x))
    hs = []
    for t in range(p.steps):
        z = p.clamp(x[:, t] @ w[:, :n].T + h @ w[:, n:].T + b)
        i, g, f, o = np.split(z, 4, axis=-1)
        c = np.clip(a0(f) * c + a0(i) * a1(g), -clip, clip)
        h = a0(o) * a2(c)
        hs.append(h)
    tops = {"Y": lambda: p.seq_out(hs), "H": lambda: h, "C": lambda: c}
    return [tops[k]() for k in p.out_sequence]


def gru_float(layer, xs, infos):
    p = Shape(layer, xs[0])
    H, n = p.cell, p.size
    x = p.steps_in(xs[0])
    w = layer.const("weights").astype(np.float64)
    b = layer.const("biases").astype(np.float64)
    a0, a1 = p.acts
    h = _state(xs[1], len(x))
    hs = []
    for t in range(p.steps):
        r, u = np.split(a0(p.clamp(x[:, t] @ w[:2 * H, :n].T + h @ w[:2 * H, n:].T + b[:2 * H])), 2, axis=-1)
        if layer.type == "GRUv1":
            k = r * (h @ w[2 * H:, n:].T + b[3 * H:])
        else:
            k = (r * h) @ w[2 * H:, n:].T
        c = a1(p.clamp(x[:, t] @ w[2 * H:, :n].T + b[2 * H:3 * H] + k))
        h = (1.0 - u) * c + u * h
        hs.append(h)
    return [p.seq_out(hs) if k == "H" else h for k in p.out_sequence]


# ---- integer -----------------------------------------------------------------------------
def _table(layer, name, size):
    v = np.asarray(stored_ints(layer, name, name + "_value"), np.int64).reshape(-1)
    if v.size != size:
        raise layer.error(f"{name} holds {v.size} values, expected {size}", name)
    return v


def _lookup(layer, q, name, in_bits, out_dtype):
    return lut_lookup(layer, q + (1 << (in_bits - 1)), layer.const(name), in_bits, out_dtype.qmin, out_dtype.qmax)


def lstm_int(layer, xs, infos):
    p = Shape(layer, xs[0])
    H, n, T = p.cell, p.size, p.steps
    dt = layer.top_types[0]
    lo, hi, in_bits = dt.qmin, dt.qmax, infos[0].dtype.bits
    x = p.steps_in(xs[0])
    w = layer.const("weights").astype(np.int64) + np.asarray(stored_ints(layer, "weights_zp", "weights_zp", 0),
                                                             np.int64).reshape(-1, 1)
    b = layer.const("biases").astype(np.int64)
    per_channel = layer.const("scale").size == 3 + 5 * H + 2 * T
    k1, k2 = (4 * H, H) if per_channel else (1, 1)
    size = 3 + k1 + k2 + 2 * T
    m, s, d = _table(layer, "scale", size), _table(layer, "shift", size), _table(layer, "diff_shifts", T)
    m1, s1, m2, s2 = m[1:1 + k1], s[1:1 + k1], m[1 + k1:1 + k1 + k2], s[1 + k1:1 + k1 + k2]
    j = 1 + k1 + k2
    cell = (lambda v, g: v[g * H:(g + 1) * H]) if per_channel else (lambda v, g: v)
    mshift = int_param(layer, "lut_shift_value", 0)
    look = lambda q, name: _lookup(layer, q, name, in_bits, dt)  # noqa: E731
    h, c = _state(xs[1], len(x)), _state(xs[2], len(x))
    xw = exact_matmul(layer, x, w[:, :n].T)
    hs = []
    for t in range(T):
        hw = exact_matmul(layer, h, w[:, n:].T)
        if dt.bits == 8:
            z = xw[:, t] + requantize(layer, hw, m[0], s[0], 0, *I32) + b
            gate = lambda v, g: requantize(layer, v, cell(m1, g), cell(s1, g), 0, lo, hi)  # noqa: E731
            gg = requantize(layer, np.split(z, 4, axis=-1)[1], m2, s2, 0, lo, hi)
        else:
            hw = requantize(layer, requantize(layer, hw, 1, s[0] - mshift, 0, *I32), m[0], s1, 0, *I32)
            z = (requantize(layer, xw[:, t], 1, s1 - mshift, 0, *I32) + hw +
                 requantize(layer, b, 1, s1 - mshift, 0, *I32))
            z = np.clip(z, *I32)
            gate = lambda v, g: requantize(layer, v, cell(m1, g), mshift, 0, lo, hi)  # noqa: E731
            gg = requantize(layer, np.split(z, 4, axis=-1)[1], m2, s2 - cell(s1, 0) + mshift, 0, lo, hi)
        zi, _, zf, zo = np.split(z, 4, axis=-1)
        i, f, o = look(gate(zi, 0), "lut_it"), look(gate(zf, 2), "lut_ft"), look(gate(zo, 3), "lut_ot")
        g = look(gg, "lut_ct")
        dd = d[t]
        total = np.clip(requantize(layer, i * g, 1, dd, 0, *I32) +
                        requantize(layer, f * c, m[j + 2 + 2 * t], s[j + 2 + 2 * t] + dd, 0, *I32), *I32)
        tc = look(requantize(layer, total, m[j], s[j] - dd, 0, lo + 1, hi), "lut_h")
        h = requantize(layer, o * tc, m[j + 1], s[j + 1], 0, lo + 1, hi)
        c = requantize(layer, total, m[j + 3 + 2 * t], s[j + 3 + 2 * t] - dd, 0, lo + 1, hi)
        hs.append(h)
    tops = {"Y": lambda: p.seq_out(hs), "H": lambda: h, "C": lambda: c}
    return [tops[key]() for key in p.out_sequence]


def _gru_rescales(layer, H):
    if layer.has_const("scale"):
        m, s = _table(layer, "scale", 6 * H + 2), _table(layer, "shift", 6 * H + 2)
        cuts = np.cumsum([0, 2 * H, 2 * H, H, H, 1, 1])
        return [(m[a:e], s[a:e]) for a, e in zip(cuts, cuts[1:])]
    m, s = _table(layer, "scale", 6), _table(layer, "shift", 6)
    return list(zip(m, s))


def gru_int(layer, xs, infos):
    p = Shape(layer, xs[0])
    H, n = p.cell, p.size
    dt = layer.top_types[0]
    lo, hi, in_bits = dt.qmin, dt.qmax, infos[0].dtype.bits
    x = p.steps_in(xs[0])
    w = layer.const("weights").astype(np.int64)
    b = layer.const("biases").astype(np.int64)
    (m0, s0), (m1, s1), (m2, s2), (m3, s3), (m4, s4), (m5, s5) = _gru_rescales(layer, H)
    wide = in_bits > 8
    keep = int_param(layer, "remain_shift", 10)
    pre = (lambda v: np.maximum(v - keep, 0)) if wide else (lambda v: np.zeros_like(v))  # noqa: E731
    post = (lambda v: np.minimum(v, keep)) if wide else (lambda v: v)  # noqa: E731
    r32 = lambda v, mm, ss: requantize(layer, v, mm, ss, 0, *I32)  # noqa: E731
    xg = r32(exact_matmul(layer, x, w[:2 * H, :n].T), 1, pre(s1))
    xc = r32(exact_matmul(layer, x, w[2 * H:, :n].T), 1, pre(s3))
    bg, bc = r32(b[:2 * H], 1, pre(s1)), r32(b[2 * H:3 * H], 1, pre(s3))
    if layer.type == "GRUv1":
        bh = r32(b[3 * H:], 1, pre(s2))
        hm, hsft = int_param(layer, "hidden_scale_value"), int_param(layer, "hidden_shift_value")
    h = _state(xs[1], len(x))
    hs = []
    for t in range(p.steps):
        hg = r32(r32(exact_matmul(layer, h, w[:2 * H, n:].T), 1, pre(s0)), m0, post(s0) + pre(s1))
        gate = requantize(layer, xg[:, t] + hg + bg, m1, post(s1), 0, lo, hi)
        r, u = np.split(_lookup(layer, gate, "lut_rt", in_bits, dt), 2, axis=-1)
        if layer.type == "GRUv1":
            k = r * requantize(layer, exact_matmul(layer, h, w[2 * H:, n:].T) + bh, hm, hsft, 0, lo, hi)
        else:
            k = exact_matmul(layer, shift_round_even(r * h, 16 if wide else 8), w[2 * H:, n:].T)
        k = r32(r32(k, 1, pre(s2)), m2, post(s2) + pre(s3))
        cand = requantize(layer, xc[:, t] + k + bc, m3, post(s3), 0, lo, hi)
        c = _lookup(layer, cand, "lut_ht", in_bits, dt)
        h = requantize(layer, r32((hi - u) * c, m4, s4) + u * h, m5, s5, 0, lo + 1, hi)
        hs.append(h)
    return [p.seq_out(hs) if key == "H" else h for key in p.out_sequence]


# ---- ReverseSequence -----------------------------------------------------------------------
def reverse_sequence(layer, xs, infos):
    """The first lengths[b] steps of item b reversed along time_axis; a lengths input of another
    size than the batch gives every item its first value; lengths past the axis are the axis."""
    x = xs[0]
    nd = x.ndim
    ba, ta = int_param(layer, "batch_axis", 0) % nd, int_param(layer, "time_axis", 1) % nd
    if ba == ta:
        raise layer.error(f"batch_axis and time_axis are both {ba}", "batch_axis")
    batch, steps = x.shape[ba], x.shape[ta]
    lengths = np.asarray(xs[1]).reshape(-1).astype(np.int64) if len(xs) > 1 else np.full(batch, steps)
    if lengths.size == 0 or (lengths < 0).any():
        raise layer.error(f"sequence lengths must be non-negative, got {lengths.tolist()}")
    if lengths.size != batch:
        lengths = np.full(batch, lengths[0])
    lengths = np.minimum(lengths, steps)
    t = np.arange(steps)
    order = np.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    moved = np.moveaxis(x, (ba, ta), (0, 1))
    out = moved[np.arange(batch)[:, None], order]
    return [np.moveaxis(out, (0, 1), (ba, ta))]


def reverse_sequence_int(layer, xs, infos):
    same_quantization(layer, infos[0])
    return reverse_sequence(layer, xs, infos)


FLOAT = {"BasicLSTM": lstm_float, "GRUv1": gru_float, "GRUv3": gru_float, "ReverseSequence": reverse_sequence}
INT = {"BasicLSTM": lstm_int, "GRUv1": gru_int, "GRUv3": gru_int, "ReverseSequence": reverse_sequence_int}
