"""BasicLSTM: an LSTM over the time axis of a [batch, time, input_size] input, as the
parser writes ONNX LSTM (one direction per layer). Inputs: the sequence, the initial
hidden state h0 and cell state c0 ([batch or 1, cell_size]); weights [4 cell, input +
cell] (gates i, g, f, o; input columns first), biases [4 cell]. Each step:
z = [x, h] W^T + b (forget_bias added to f, every gate clamped to +-threshold),
i, f, o = act0, g = act1, c = f c + i g (clamped to +-cell_clip), h = o act2(c).
Tops as out_sequence lists them: Y (h of every step), H (the last h), C (the last c).

Quantized (the tool chain's form, docs/integer-semantics.md "Recurrent layers"): integer
weights and biases, 256-entry gate tables lut_it/lut_ft/lut_ot (act0), lut_ct (act1),
lut_h (act2), the multipliers/shifts `scale`/`shift` (5 + 2 per step; per-channel
weights: 3 + 5 cell + 2 per step), `diff_shifts` (one per step) and, at 16 bits,
`lut_shift_value`. The cell state has its own grid at every step."""
import math

import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _rnn as R

OUT_SEQUENCES = {tuple(s): len(s) for s in ("Y", "H", "C", "YH", "YC", "HC", "YHC")}
INT32_MIN, INT32_MAX = QT.INT32_MIN, QT.INT32_MAX
TABLES = ("lut_it", "lut_ft", "lut_ot", "lut_ct", "lut_h")


def _cell_clip(node) -> float:
    value = node.get_param("cell_clip", math.inf)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise R.bad(node, f"cell_clip must be a positive number, got {value!r}")
    return float(value)


def _forget_bias(node) -> float:
    value = node.get_param("forget_bias", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise R.bad(node, f"forget_bias must be a number, got {value!r}")
    return float(value)


def _publish(p, hs, hlast, clast):
    tops = {"Y": lambda: R.sequence_out(hs, p), "H": lambda: hlast, "C": lambda: clast}
    return [tops[s]() for s in p.out_sequence]


@op_register(OpType.BasicLSTM, "1.0")
def basiclstm_forward(self, *args):
    return R.forward(self, OUT_SEQUENCES, _float, _integer)


def _float(node, p):
    dtype, xs, w, b = R.float_operands(node, p)
    batch, H, I = xs.shape[0], p.cell_size, p.input_size
    b = b.clone()
    b[2 * H:3 * H] += _forget_bias(node)
    clip = _cell_clip(node)
    act0, act1, act2 = p.functions
    xw = xs @ w[:, :I].T + b
    wh = w[:, I:].T
    h, c = R.initial_state(node.inputs[1], batch, w.dtype), R.initial_state(node.inputs[2], batch, w.dtype)
    hs, cs, sig_in, g_in = [], [], [], []
    for t in range(p.time_steps):
        i, g, f, o = R.gate_input(xw[:, t] + h @ wh, p).chunk(4, dim=-1)
        sig_in.append(torch.cat([i, f, o], dim=-1))
        g_in.append(g)
        c = act0(f) * c + act0(i) * act1(g)
        if not math.isinf(clip):
            c = torch.clamp(c, -clip, clip)
        h = act0(o) * act2(c)
        hs.append(h)
        cs.append(c)
    R.record(node, {"h": torch.stack(hs, 1), "sigmoid_in": torch.stack(sig_in, 1), "g_in": torch.stack(g_in, 1),
                    "c_in": torch.stack(cs, 1), **{f"c{t}": v for t, v in enumerate(cs)}})
    return [v.to(dtype) for v in _publish(p, hs, h, c)]


# ---- quantized ------------------------------------------------------------------
@quant_register(OpType.BasicLSTM, "1.0")
def basiclstm_quantize(self, *args):
    QT.check_quantized_inputs(self)
    p = R.read_params(self, OUT_SEQUENCES)
    bits = R.layer_bits(self)
    qmax = R.qmax_of(bits)
    st = settings_of(self)
    per_channel = st.quantize_method_for_weight.per_channel
    H, I, T = p.cell_size, p.input_size, p.time_steps
    x = self.inputs[0]
    sh = R.state_grid(self, 1, R.symmetric_scale(R.absmax_of(self, "h"), bits), bits)
    sc = [R.symmetric_scale(R.absmax_of(self, f"c{t}"), bits) for t in range(T)]
    sc0 = R.state_grid(self, 2, sc[0], bits)
    clip = _cell_clip(self)
    act0, act1, act2 = p.activations
    f_in, f_out = R.gate_grid(self, act0, R.absmax_of(self, "sigmoid_in"), bits, p.threshold)
    g_in, g_out = R.gate_grid(self, act1, R.absmax_of(self, "g_in"), bits, p.threshold)
    c_in, c_out = R.gate_grid(self, act2, R.absmax_of(self, "c_in"), bits, clip)
    fn0, fn1, fn2 = p.functions
    clamp = lambda fn, limit: (lambda v: fn(torch.clamp(v, -limit, limit)))  # noqa: E731
    tables = {"lut_it": R.gate_table(self, clamp(fn0, p.threshold), f_in, f_out, bits),
              "lut_ct": R.gate_table(self, clamp(fn1, p.threshold), g_in, g_out, bits),
              "lut_h": R.gate_table(self, clamp(fn2, clip), c_in, c_out, bits)}
    tables["lut_ft"] = tables["lut_ot"] = tables["lut_it"]

    (sw,), wq = R.quantize_weight_blocks(self, per_channel, [(slice(None), slice(None))])
    b = self.get_constant("biases")
    bias = b.betensor.to(torch.float32).clone()
    bias[2 * H:3 * H] += _forget_bias(self)
    b.betensor = bias
    xw = float(x.scale) * sw
    QT.quantize_biases(self, xw if per_channel else float(xw[0]), wq[:, :I].sum(1), int(x.zerop))

    mb = st.multiplier_bits
    gate = xw if per_channel else xw[:1]
    ratios = [float(x.scale) / sh, f_in / gate, g_in / gate[H:2 * H] if per_channel else g_in / gate,
              c_in / (f_out * g_out), sh / (f_out * c_out)]
    for t in range(T):
        ratios += [g_out / (sc0 if t == 0 else sc[t - 1]), sc[t] / (f_out * g_out)]
    m, s = R.rescales(ratios, mb)
    if per_channel:  # the 16-bit form shifts the g rows' sums by the i rows' shifts: the same per cell
        s[1 + H:1 + 2 * H] = s[1:1 + H]
    diff = torch.zeros(T, dtype=torch.float64)
    shift_m = 0
    if bits == 16:  # room for the cell sum in 32 bits, and the pre-shift of the gate sums
        for t in range(T):
            diff[t] = max(0, math.ceil(math.log2(4.0 * qmax / sc[t] * f_out * g_out / 2.0 ** 31)))
        shift_m = _lut_shift(self, x, wq, b, I, m, s, per_channel, H)
    R.write_table(self, m, s, mb)
    fields.set_constant(self, "diff_shifts", diff, fields.shift_dtype(diff))
    self.params["lut_shift_value"], self.params["lut_shift_type"] = int(shift_m), Dtype.INT8.value
    for name in TABLES:
        fields.write_lut(self, tables[name], Dtype.integer(bits, True), name)
    grids = {"Y": sh, "H": sh, "C": sc[T - 1]}
    for t, key in zip(self.outputs, p.out_sequence):
        R.set_state_grid(t, grids[key], bits)


def _lut_shift(node, x, wq, b, I, m, s, per_channel, H) -> int:
    """The 16-bit form's pre-shift m: the gate sums are kept at 2^(m - S1) of their grid
    (S1 the gate multipliers' shifts) and h W at 2^(m - S0): as large as keeps every
    term and their sum below 2^29 (bounds from the weights' row sums)."""
    x_bound = QT.int_absmax(x) * float(wq[:, :I].abs().sum(1).max())
    h_bound = R.qmax_of(16) * float(wq[:, I:].abs().sum(1).max())
    b_bound = float(b.betensor.to(torch.float64).abs().max())
    s0, s1 = float(s[0]), float(s[1:1 + (4 * H if per_channel else 1)].min())
    m0 = float(m[0]) * 2.0 ** -s0
    total = x_bound + b_bound + h_bound * m0
    need_x = math.ceil(math.log2(max(total, 1.0) / 2.0 ** 29))
    need_h = math.ceil(math.log2(max(h_bound, 1.0) / 2.0 ** 29))
    return int(min(s1 - need_x, s0 - need_h))


def _integer(node, p):
    """The tool chain's integer LSTM (its forward of a quantized IR), over the whole batch."""
    out0 = node.outputs[0]
    bits, in_bits = out0.dtype.bits, node.inputs[0].qbits
    qmin, qmax = out0.dtype.qmin, out0.dtype.qmax
    H, I, T = p.cell_size, p.input_size, p.time_steps
    f64 = torch.float64
    xs = R.sequence_in(node.inputs[0].betensor.to(f64), p)
    batch = xs.shape[0]
    wc, bc = node.get_constant("weights"), node.get_constant("biases")
    w = QT.integer_weights(wc)
    bias = bc.betensor.to(f64)
    per_channel = node.get_constant("scale").betensor.numel() == 3 + 5 * H + 2 * T
    size = (3 + 5 * H if per_channel else 5) + 2 * T
    m, s = R.read_table(node, "scale", size), R.read_table(node, "shift", size)
    diff = R.read_table(node, "diff_shifts", T)
    n1 = 4 * H if per_channel else 1
    m1, s1 = m[1:1 + n1], s[1:1 + n1]
    m2, s2 = m[1 + n1:1 + n1 + (H if per_channel else 1)], s[1 + n1:1 + n1 + (H if per_channel else 1)]
    k = 1 + n1 + m2.numel()
    (m0, s0), (m3, s3), (m4, s4) = (m[0], s[0]), (m[k], s[k]), (m[k + 1], s[k + 1])
    steps_m, steps_s = m[k + 2:], s[k + 2:]
    if not per_channel:  # one multiplier for the gates, one for g: numbers
        m1, s1, m2, s2 = m1[0], s1[0], m2[0], s2[0]
    part = (lambda v, j: v[j * H:(j + 1) * H]) if per_channel else (lambda v, j: v)
    luts = {n: node.get_constant(n).betensor.to(torch.int64) for n in TABLES}
    look = lambda v, name: R.lookup(v, luts[name], in_bits, bits)  # noqa: E731
    shift_m = int(node.get_param("lut_shift_value", 0))
    xw = xs @ w[:, :I].T
    wh = w[:, I:].T
    h = R.initial_state(node.inputs[1], batch, f64)
    c = R.initial_state(node.inputs[2], batch, f64)
    hs = []
    for t in range(T):
        hw = h @ wh
        if bits == 8:
            z = xw[:, t] + qmath.requantize(hw, m0, s0, 0, INT32_MIN, INT32_MAX) + bias
            zi, zg, zf, zo = z.chunk(4, dim=-1)
            rq = lambda v, j: qmath.requantize(v, part(m1, j), part(s1, j), 0, qmin, qmax)  # noqa: E731
            gi, gf, go = rq(zi, 0), rq(zf, 2), rq(zo, 3)
            gg = qmath.requantize(zg, m2, s2, 0, qmin, qmax)
        else:
            hw = qmath.requantize(qmath.requantize(hw, 1, s0 - shift_m, 0, INT32_MIN, INT32_MAX), m0, s1, 0,
                                  INT32_MIN, INT32_MAX)
            z = qmath.requantize(xw[:, t], 1, s1 - shift_m, 0, INT32_MIN, INT32_MAX) + hw + \
                qmath.requantize(bias, 1, s1 - shift_m, 0, INT32_MIN, INT32_MAX)
            z = torch.clamp(torch.round(z), INT32_MIN, INT32_MAX)
            zi, zg, zf, zo = z.chunk(4, dim=-1)
            rq = lambda v, j: qmath.requantize(v, part(m1, j), shift_m, 0, qmin, qmax)  # noqa: E731
            gi, gf, go = rq(zi, 0), rq(zf, 2), rq(zo, 3)
            gg = qmath.requantize(zg, m2, s2 - part(s1, 0) + shift_m, 0, qmin, qmax)
        fi, ff, fo, fg = look(gi, "lut_it"), look(gf, "lut_ft"), look(go, "lut_ot"), look(gg, "lut_ct")
        d = float(diff[t])
        ig = qmath.requantize(fi * fg, 1, d, 0, INT32_MIN, INT32_MAX)
        fc = qmath.requantize(ff * c, steps_m[2 * t], steps_s[2 * t] + d, 0, INT32_MIN, INT32_MAX)
        ctmp = torch.clamp(ig + fc, INT32_MIN, INT32_MAX)
        tanh_c = look(qmath.requantize(ctmp, m3, s3 - d, 0, qmin + 1, qmax), "lut_h")
        h = qmath.requantize(fo * tanh_c, m4, s4, 0, qmin + 1, qmax)
        c = qmath.requantize(ctmp, steps_m[2 * t + 1], steps_s[2 * t + 1] - d, 0, qmin + 1, qmax)
        hs.append(h)
    return [QT.store_output(node, v, t) for v, t in zip(_publish(p, hs, h, c), node.outputs)]
