"""GRUv3 and GRUv1: a GRU over the time axis of a [batch, time, input_size] input, as the
parser writes ONNX GRU (GRUv1 for linear_before_reset = 1, what torch exports; GRUv3 for
0). Inputs: the sequence and the initial state h0 ([batch or 1, cell_size]); weights
[3 cell, input + cell] (rows: reset r, update u, candidate; input columns first), biases
[3 cell] (GRUv1: [4 cell], the last cell the candidate's recurrent bias). Each step, every
gate input clamped to +-threshold: r, u = act0([x, h] Wg^T + bg); the candidate
c = act1(x Wcx^T + bc + r (h Wch^T + bh)) (GRUv1) or act1([x, r h] Wc^T + bc) (GRUv3);
h = (1 - u) c + u h. Tops as out_sequence says: [H] every step's h, [Hn] the last, or both.

Quantized (the tool chain's form, docs/integer-semantics.md "Recurrent layers"): integer
weights (four blocks, each on its own grid) and biases, 256-entry gate tables lut_rt,
lut_zt (act0) and lut_ht (act1), six multipliers/shifts (`scale_value`/`shift_value`, or
per-channel weights the constants `scale`/`shift` of 2 + 2 + 1 + 1 cells and 2 values),
GRUv1 also `hidden_scale_value`/`hidden_shift_value`, and at 16 bits `remain_shift`."""
import math

import torch

from ..dtype import Dtype
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import BranchRescales, Rescale
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from . import _rnn as R

OUT_SEQUENCES = {("H",): 1, ("Hn",): 1, ("H", "Hn"): 2}
INT32_MIN, INT32_MAX = QT.INT32_MIN, QT.INT32_MAX
TABLES = ("lut_rt", "lut_zt", "lut_ht")
REMAIN_SHIFT = 10   # the tool chain's forward, when the layer states none


def _linear_before_reset(node) -> bool:
    return node.type == "GRUv1"


def _publish(p, hs, hlast):
    return [R.sequence_out(hs, p) if key == "H" else hlast for key in p.out_sequence]


def _float(node, p):
    dtype, xs, w, b = R.float_operands(node, p)
    batch, H, I = xs.shape[0], p.cell_size, p.input_size
    act0, act1 = p.functions
    xg = xs @ w[:2 * H, :I].T + b[:2 * H]
    xc = xs @ w[2 * H:, :I].T + b[2 * H:3 * H]
    wgh, wch = w[:2 * H, I:].T, w[2 * H:, I:].T
    h = R.initial_state(node.inputs[1], batch, w.dtype)
    hs, gates_in, cand_in, hidden = [], [], [], []
    for t in range(p.time_steps):
        g = R.gate_input(xg[:, t] + h @ wgh, p)
        r, u = act0(g).chunk(2, dim=-1)
        if _linear_before_reset(node):
            hidden.append(h @ wch + b[3 * H:])
            c = R.gate_input(xc[:, t] + r * hidden[-1], p)
        else:
            c = R.gate_input(xc[:, t] + (r * h) @ wch, p)
        gates_in.append(g)
        cand_in.append(c)
        h = (1.0 - u) * act1(c) + u * h
        hs.append(h)
    internal = {"h": torch.stack(hs, 1), "gates_in": torch.stack(gates_in, 1), "cand_in": torch.stack(cand_in, 1)}
    if hidden:
        internal["hidden"] = torch.stack(hidden, 1)
    R.record(node, internal)
    return [v.to(dtype) for v in _publish(p, hs, h)]


# ---- quantized ------------------------------------------------------------------
def gru_quantize(self, *args):
    QT.check_quantized_inputs(self)
    p = R.read_params(self, OUT_SEQUENCES)
    bits = R.layer_bits(self)
    st = settings_of(self)
    per_channel = st.quantize_method_for_weight.per_channel
    v1 = _linear_before_reset(self)
    H, I = p.cell_size, p.input_size
    x = self.inputs[0]
    sx = float(x.scale)
    sh = R.state_grid(self, 1, R.symmetric_scale(R.absmax_of(self, "h"), bits), bits)
    act0, act1 = p.activations
    f_in, f_out = R.gate_grid(self, act0, R.absmax_of(self, "gates_in"), bits, p.threshold, exact_unit=True)
    g_in, g_out = R.gate_grid(self, act1, R.absmax_of(self, "cand_in"), bits, p.threshold)
    fn0, fn1 = p.functions
    limit = p.threshold
    table0 = R.gate_table(self, lambda v: fn0(torch.clamp(v, -limit, limit)), f_in, f_out, bits)
    table1 = R.gate_table(self, lambda v: fn1(torch.clamp(v, -limit, limit)), g_in, g_out, bits)

    rows_g, rows_c, cols_x, cols_h = slice(0, 2 * H), slice(2 * H, 3 * H), slice(0, I), slice(I, None)
    # GRUv1's recurrent candidate block takes one scale: its rescale is a single number in the IR
    blocks = [(rows_g, cols_x), (rows_g, cols_h), (rows_c, cols_x), (rows_c, cols_h)]
    (s_gx, s_gh, s_cx, s_ch), wq = _weights(self, per_channel, blocks, v1, bits, x)
    gb, cb = sx * s_gx, sx * s_cx
    mb = st.multiplier_bits
    factor = 1.0 if v1 else float(1 << x.qbits)
    if v1:
        s_hid = R.symmetric_scale(R.absmax_of(self, "hidden"), bits)
        hidden = Rescale.from_ratio(s_hid / (sh * float(s_ch[0])), mb)
        hidden.write(self, prefix="hidden_")
        cand_h = cb / (f_out * s_hid)
    else:
        cand_h = factor * cb / (sh * f_out * s_ch)
    ratios = [gb / (sh * s_gh), f_in / gb, cand_h, g_in / cb, sh / g_out, 1.0 / f_out]
    if not per_channel:
        ratios = [torch.as_tensor(r).reshape(-1)[:1] for r in ratios]
    m, s = R.rescales(ratios, mb)
    if per_channel:
        R.write_table(self, m, s, mb)
    else:
        BranchRescales([int(v) for v in m], [int(v) for v in s], fields.multiplier_dtype(mb),
                       [fields.shift_dtype(s)] * 6).write(self)
    if x.qbits > 8:  # no pre-shift of the biases (the tool chain's forward repeats it at every step)
        self.params["remain_shift"] = int(s[:-2].max())

    bias_scale = [gb, cb] + ([sh * s_ch] if v1 else [])
    w_sums = torch.cat([wq[rows_g, cols_x].sum(1), wq[rows_c, cols_x].sum(1)] + ([torch.zeros(H)] if v1 else []))
    QT.quantize_biases(self, torch.cat([v.reshape(-1).expand(n) for v, n in zip(bias_scale, (2 * H, H, H))]),
                       w_sums, int(x.zerop))
    for name, table in zip(TABLES, (table0, table0, table1)):
        fields.write_lut(self, table, Dtype.integer(bits, True), name)
    for t in self.outputs:
        R.set_state_grid(t, sh, bits)


def _weights(node, per_channel, blocks, v1, bits, x):
    """The four weight blocks on their grids (GRUv1's recurrent candidate block per tensor).
    At 16 bits each block's grid is narrowed where needed for its products with the
    inputs (x, or the state) to sum below 2^30 in every row: the tool chain's forward
    clamps them to 32 bits."""
    limit = None if x.qbits <= 8 else float(2 ** 30) / max(QT.int_absmax(x), R.qmax_of(bits))
    return R.quantize_weight_blocks(node, per_channel, blocks, per_tensor=(3,) if v1 else (), row_sum_limit=limit)


@op_register(OpType.GRUv3, "1.0")
def gruv3_forward(self, *args):
    return R.forward(self, OUT_SEQUENCES, _float, _integer)


@op_register(OpType.GRUv1, "1.0")
def gruv1_forward(self, *args):
    return R.forward(self, OUT_SEQUENCES, _float, _integer)


@quant_register(OpType.GRUv3, "1.0")
def gruv3_quantize(self, *args):
    gru_quantize(self, *args)


@quant_register(OpType.GRUv1, "1.0")
def gruv1_quantize(self, *args):
    gru_quantize(self, *args)


def _tables(node, H):
    """The six multipliers and shifts: numbers (params) or per-cell vectors (constants)."""
    if "scale" in node.constants:
        size = 6 * H + 2
        m, s = R.read_table(node, "scale", size), R.read_table(node, "shift", size)
        cuts = [0, 2 * H, 4 * H, 5 * H, 6 * H, 6 * H + 1, 6 * H + 2]
        return [(m[a:b], s[a:b]) for a, b in zip(cuts, cuts[1:])]
    r = BranchRescales.read(node, 6)
    if r is None or not isinstance(r.shifts, list):
        raise R.bad(node, "quantized, but 'scale_value'/'shift_value' (six values each) are missing")
    return [(torch.tensor(float(a), dtype=torch.float64), torch.tensor(float(b), dtype=torch.float64))
            for a, b in zip(r.multipliers, r.shifts)]


def _integer(node, p):
    """The tool chain's integer GRU (its forward of a quantized IR), over the whole batch."""
    out0 = node.outputs[0]
    bits, in_bits = out0.dtype.bits, node.inputs[0].qbits
    qmin, qmax = out0.dtype.qmin, out0.dtype.qmax
    H, I = p.cell_size, p.input_size
    f64 = torch.float64
    xs = R.sequence_in(node.inputs[0].betensor.to(f64), p)
    w = node.get_constant("weights").betensor.to(f64)
    b = node.get_constant("biases").betensor.to(f64)
    (m0, s0), (m1, s1), (m2, s2), (m3, s3), (m4, s4), (m5, s5) = _tables(node, H)
    wide = node.inputs[0].dtype.bits > 8
    keep = float(node.get_param("remain_shift", REMAIN_SHIFT))
    # 16 bits: sums pre-shifted by what passes remain_shift, the rest after the multiplier
    pre = (lambda v: torch.clamp(v - keep, min=0)) if wide else (lambda v: torch.zeros_like(v))  # noqa: E731
    post = (lambda v: torch.clamp(v, max=keep)) if wide else (lambda v: v)  # noqa: E731
    pre_h, pre_x, pre_ch, pre_cx = pre(s0), pre(s1), pre(s2), pre(s3)
    post_h, post_x, post_ch, post_cx = post(s0) + pre_x, post(s1), post(s2) + pre_cx, post(s3)
    rq32 = lambda v, mult, sh: qmath.requantize(v, mult, sh, 0, INT32_MIN, INT32_MAX)  # noqa: E731
    bg = rq32(b[:2 * H], 1, pre_x)
    bc = rq32(b[2 * H:3 * H], 1, pre_cx)
    if _linear_before_reset(node):
        bh = rq32(b[3 * H:], 1, pre_ch)
        hidden = Rescale.read(node, prefix="hidden_")
    xg = rq32(xs @ w[:2 * H, :I].T, 1, pre_x)
    xc = rq32(xs @ w[2 * H:, :I].T, 1, pre_cx)
    wgh, wch = w[:2 * H, I:].T, w[2 * H:, I:].T
    luts = {n: node.get_constant(n).betensor.to(torch.int64) for n in TABLES}
    h = R.initial_state(node.inputs[1], xs.shape[0], f64)
    hs = []
    for t in range(p.time_steps):
        hg = rq32(rq32(h @ wgh, 1, pre_h), m0, post_h)
        gate = qmath.requantize(xg[:, t] + hg + bg, m1, post_x, 0, qmin, qmax)
        r, u = R.lookup(gate, luts["lut_rt"], in_bits, bits).chunk(2, dim=-1)
        if _linear_before_reset(node):
            hc = r * qmath.requantize(h @ wch + bh, hidden.multiplier, hidden.shift, 0, qmin, qmax)
        else:
            hc = torch.round(r * h / float(1 << (16 if wide else 8))) @ wch
        hc = rq32(rq32(hc, 1, pre_ch), m2, post_ch)
        cand = qmath.requantize(xc[:, t] + hc + bc, m3, post_cx, 0, qmin, qmax)
        c = R.lookup(cand, luts["lut_ht"], in_bits, bits)
        h = qmath.requantize(rq32((qmax - u) * c, m4, s4) + u * h, m5, s5, 0, qmin + 1, qmax)
        hs.append(h)
    return [QT.store_output(node, v, t) for v, t in zip(_publish(p, hs, h), node.outputs)]
