"""What the recurrent layers (BasicLSTM, GRUv1, GRUv3) share: their params as the parser
writes them (checked as one-line IRErrors), the gate activations (the parser's names of
ONNX's, with activation_alpha/activation_beta consumed in order as ONNX Runtime does), the
initial states over the batch, the time loop's order, the internal tensors calibration
measures (placeholders), and the pieces of the integer form: gate tables, grids and the
multiplier/shift tables (docs/integer-semantics.md, "Recurrent layers")."""
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Dict, List

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from ..quant.statistics import Statistics
from ..quant.strategies import calibrate_range
from ..tensor import PyTensor
from ._layout import param_choice
from ._movement import int_param
from .activation import build_lut

F = torch.nn.functional
# name -> (function of x, alpha, beta; the alphas and betas it takes; default alpha and beta)
GATE_FUNCTIONS = {
    "SIGMOID": (lambda x, a, b: torch.sigmoid(x), 0, 0, 0.0, 0.0),
    "TANH": (lambda x, a, b: torch.tanh(x), 0, 0, 0.0, 0.0),
    "RELU": (lambda x, a, b: torch.relu(x), 0, 0, 0.0, 0.0),
    "AFFINE": (lambda x, a, b: a * x + b, 1, 1, 1.0, 0.0),
    "LEAKYRELU": (lambda x, a, b: F.leaky_relu(x, a), 1, 0, 0.01, 0.0),
    "THRESHOLDEDRELU": (lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)), 1, 0, 1.0, 0.0),
    "SCALEDTANH": (lambda x, a, b: a * torch.tanh(b * x), 1, 1, 1.0, 1.0),
    "HARDSIGMOID": (lambda x, a, b: torch.clamp(a * x + b, 0.0, 1.0), 1, 1, 0.2, 0.5),
    "ELU": (lambda x, a, b: F.elu(x, a), 1, 0, 1.0, 0.0),
    "SOFTSIGN": (lambda x, a, b: F.softsign(x), 0, 0, 0.0, 0.0),
    "SOFTPLUS": (lambda x, a, b: F.softplus(x), 0, 0, 0.0, 0.0),
}
# layer type -> (gates, inputs, activations by default, bias rows per cell)
KINDS = {"BasicLSTM": (4, 3, ("SIGMOID", "TANH", "TANH"), 4), "GRUv3": (3, 2, ("SIGMOID", "TANH"), 3),
         "GRUv1": (3, 2, ("SIGMOID", "TANH"), 4)}
# the activations the integer form has tables for, and the input beyond which each is
# within half a step of its limit at 8 and 16 bits (ln(2 qmax), ln(4 qmax) / 2): a gate
# table covers the calibrated range up to there
TABLE_LIMITS = {"SIGMOID": {8: math.log(254.0), 16: math.log(65534.0)},
                "TANH": {8: math.log(508.0) / 2, 16: math.log(131068.0) / 2}}

# how far past its calibrated magnitude an internal grid reaches, by activation bits
HEADROOM = {16: 2.0}


@dataclass
class Recurrent:
    """A recurrent layer's params, checked against its inputs and constants."""
    time_steps: int
    input_size: int
    cell_size: int
    reverse: bool
    activations: List[str]
    functions: List[Callable]
    threshold: float                # gate inputs clamped to +-threshold (inf: no clamp)
    out_sequence: List[str]


def bad(node, text: str) -> IRError:
    return IRError(f"layer '{node.name}' ({node.type}): {text}")


def read_params(node, out_sequences) -> Recurrent:
    """The params of a recurrent layer; `out_sequences` maps the accepted out_sequence
    values (tuples) to how many tops they give."""
    gates, n_inputs, default_acts, bias_rows = KINDS[node.type]
    if len(node.inputs) != n_inputs:
        raise bad(node, f"takes {n_inputs} inputs (the sequence and its initial state"
                        f"{'s' if n_inputs > 2 else ''}), the IR gives {len(node.inputs)}")
    x = shape_of(node.inputs[0])
    if len(x) != 3:
        raise bad(node, f"input 0 must be [batch, time, input_size], got shape {list(x)}")
    steps = int_param(node, "time_steps", minimum=1)
    if steps > x[1]:
        raise bad(node, f"time_steps {steps} is more than the input's {x[1]} steps")
    size = int_param(node, "input_size", x[2], minimum=1)
    if size != x[2]:
        raise bad(node, f"input_size {size} does not match the input's last axis ({x[2]})")
    w = node.get_constant("weights").betensor
    cell = int_param(node, "cell_size", w.shape[0] // gates if w.dim() == 2 else 1, minimum=1)
    if tuple(w.shape) != (gates * cell, size + cell):
        raise bad(node, f"weights have shape {list(w.shape)}, expected [{gates * cell}, {size + cell}] "
                        f"({gates} gates of cell_size {cell}, input_size {size} + cell_size)")
    b = node.get_constant("biases").betensor
    if tuple(b.shape) != (bias_rows * cell,):
        raise bad(node, f"biases have shape {list(b.shape)}, expected [{bias_rows * cell}]")
    for i, t in enumerate(node.inputs[1:], 1):
        s = shape_of(t)
        if len(s) != 2 or s[1] != cell or s[0] < 1:
            raise bad(node, f"initial state (input {i}) must be [batch, {cell}], got shape {list(s)}")
    reverse = param_choice(node, "direction", ("forward", "reverse"), "forward") == "reverse"
    names = _activation_names(node, default_acts)
    functions = _gate_functions(node, names)
    threshold = _threshold(node)
    sequence = node.get_param("out_sequence", list(next(iter(out_sequences))))
    sequence = [str(s) for s in (sequence if isinstance(sequence, (list, tuple)) else [sequence])]
    if tuple(sequence) not in out_sequences:
        raise bad(node, f"unsupported out_sequence {sequence} (supported: "
                        f"{', '.join(str(list(s)) for s in out_sequences)})")
    if len(node.outputs) != len(sequence):
        raise bad(node, f"out_sequence {sequence} gives {len(sequence)} tops, the IR has {len(node.outputs)}")
    return Recurrent(steps, size, cell, reverse, names, functions, threshold, sequence)


def shape_of(t: PyTensor) -> tuple:
    """A tensor's shape: its value's, or the IR's where it holds none (while quantizing)."""
    return tuple(t.betensor.shape) if t.betensor.dim() else tuple(t.ir_shape)


def _activation_names(node, default_acts) -> List[str]:
    names = node.get_param("activations", list(default_acts))
    names = [str(a).upper() for a in (names if isinstance(names, (list, tuple)) else [names])]
    if len(names) != len(default_acts):
        raise bad(node, f"activations must name {len(default_acts)} functions, got {names}")
    unknown = [a for a in names if a not in GATE_FUNCTIONS]
    if unknown:
        raise bad(node, f"unsupported activations {unknown} (supported: {', '.join(GATE_FUNCTIONS)})")
    return names


def _float_list(node, key: str) -> List[float]:
    values = node.get_param(key, [])
    values = values if isinstance(values, (list, tuple)) else [values]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise bad(node, f"{key} must be a list of numbers, got {values!r}")
    return [float(v) for v in values]


def _gate_functions(node, names) -> List[Callable]:
    """Each activation with its alpha and beta: the lists consumed in order by the
    functions that take them, defaults where they run out."""
    alphas, betas = _float_list(node, "activation_alpha"), _float_list(node, "activation_beta")
    functions = []
    for name in names:
        fn, n_alpha, n_beta, alpha, beta = GATE_FUNCTIONS[name]
        if n_alpha and alphas:
            alpha = alphas.pop(0)
        if n_beta and betas:
            beta = betas.pop(0)
        functions.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return functions


def _threshold(node) -> float:
    value = node.get_param("threshold", math.inf)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise bad(node, f"threshold must be a positive number, got {value!r}")
    return float(value)


# ---- the time loop -----------------------------------------------------------
def forward(node, out_sequences, float_form, integer_form):
    """A recurrent layer's forward: its params read, its float or integer form run, its tops set."""
    p = read_params(node, out_sequences)
    outs = integer_form(node, p) if node.quantized else float_form(node, p)
    for t, v in zip(node.outputs, outs):
        t.betensor = v
    return outs[0] if len(outs) == 1 else outs


def float_operands(node, p: Recurrent):
    """(the input's dtype, its steps in reading order, weights, biases): float64."""
    x = node.inputs[0].betensor
    w = node.get_constant("weights").betensor.to(torch.float64)
    return x.dtype, sequence_in(x.to(torch.float64), p), w, node.get_constant("biases").betensor.to(torch.float64)


def sequence_in(x: torch.Tensor, p: Recurrent) -> torch.Tensor:
    """The input steps in the order the layer reads them: reversed first for direction
    reverse, then the first time_steps."""
    return (torch.flip(x, [1]) if p.reverse else x)[:, :p.time_steps]


def sequence_out(steps: List[torch.Tensor], p: Recurrent) -> torch.Tensor:
    """Each step's state stacked along time, in the input's order."""
    y = torch.stack(steps, dim=1)
    return torch.flip(y, [1]) if p.reverse else y


def initial_state(t: PyTensor, batch: int, dtype) -> torch.Tensor:
    """Row i of the initial state for batch item i: rows cycled when the state has fewer
    (a constant of batch 1 serves every item), as the tool chain takes them."""
    s = t.betensor
    rows = torch.arange(batch, device=s.device) % s.shape[0]
    return s[rows].to(dtype)


def gate_input(x: torch.Tensor, p: Recurrent) -> torch.Tensor:
    return x if math.isinf(p.threshold) else torch.clamp(x, -p.threshold, p.threshold)


# ---- internal tensors that calibration measures ---------------------------------
def record(node, values: Dict[str, torch.Tensor]) -> None:
    """The layer's internal tensors as its placeholders (made on the first float forward,
    named after the layer), which calibration measures like its tops."""
    have = {t.name: t for t in node.placeholders}
    for key, value in values.items():
        name = f"{node.name}/{key}"
        if name not in have:
            have[name] = PyTensor(name, value.detach().to(torch.float32), Dtype.FP32)
            node.placeholders.append(have[name])
        have[name].betensor = value.detach().to(torch.float32)


def absmax_of(node, key: str) -> float:
    """The magnitude internal tensor `key` reached in calibration (its extrema, whatever the
    activation strategy: a state or gate input clipped feeds back into every later step),
    with headroom at 16 bits (HEADROOM: a bit of sixteen costs less than a clipped value)."""
    name = f"{node.name}/{key}"
    t = next((p for p in node.placeholders if p.name == name), None)
    if t is None or t.statistics is None or t.statistics.empty:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): its internal tensor '{key}' has no calibration "
                             f"statistics (a statistic_file written before this layer type was supported?)")
    room = HEADROOM.get(settings_of(node).activation_bits, 1.0)
    return max(-float(t.statistics.min), float(t.statistics.max)) * room


# ---- grids, tables and rescales of the integer form ---------------------------------
def layer_bits(node) -> int:
    """The layer's activation bits (8 or 16, the tool chain's forms); its sequence input
    must have them too, since its integers index the gate tables."""
    st = settings_of(node)
    bits = st.activation_bits
    if bits not in (8, 16) or st.fp8_activations:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): recurrent layers compute with 8- or 16-bit "
                             f"activations, not {st.activation_type if st.fp8_activations else bits}-bit")
    if node.inputs[0].qbits != bits or node.inputs[0].dtype.is_float:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): its input is {node.inputs[0].dtype.value}; its "
                             f"gate tables are indexed by {bits}-bit inputs")
    return bits


def qmax_of(bits: int) -> int:
    return (1 << (bits - 1)) - 1


def symmetric_scale(absmax: float, bits: int) -> float:
    """The restricted symmetric grid (zp 0, +-qmax) over +-absmax (scale 1 for an empty range)."""
    scale, _, _, _ = qmath.linear_quant_params(-absmax, absmax, bits, True, False, True)
    return scale


def set_state_grid(t: PyTensor, scale: float, bits: int) -> None:
    QT.set_quantization(t, scale, 0, -qmax_of(bits), qmax_of(bits), bits, True)


def state_grid(node, index: int, calibrated: float, bits: int):
    """The scale the recurrence keeps a state on, given input `index`'s initial state:
    `calibrated` when that state is all zeros, else the state input's own scale, which
    the tool chain's forward reads its integers with (zero point 0 and `bits` bits
    needed)."""
    t = node.inputs[index]
    zero = absmax_input(node, t) == 0.0
    if not t.qinvariant and int(torch.as_tensor(t.zerop).abs().max()) != 0:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): initial state (input {index}) has zero point "
                             f"{t.zerop}; the recurrence reads its integers without one")
    if zero:
        return calibrated
    if t.qbits != bits or t.dtype.is_float:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): initial state (input {index}) is "
                             f"{t.dtype.value}, the layer computes in {bits} bits")
    return float(t.scale)


def absmax_input(node, t: PyTensor) -> float:
    if t.statistics is None or t.statistics.empty:
        return 0.0
    lo, hi = QT.activation_range(node, t, True)
    return max(-float(lo), float(hi))


def gate_grid(node, name: str, calibrated: float, bits: int, threshold: float, exact_unit: bool = False):
    """(input scale, output scale) of a gate table: the input grid over the calibrated
    range (within +-threshold) up to where `name` saturates; the output grid over the
    function's magnitude there (`exact_unit`: 1.0 is qmax exactly, which GRU's 1 - u
    needs)."""
    if name not in TABLE_LIMITS:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): the integer form has tables for SIGMOID and TANH "
                             f"gates, not {name}")
    reach = min(calibrated, threshold, TABLE_LIMITS[name][bits]) or TABLE_LIMITS[name][bits]
    qmax = qmax_of(bits)
    edge = float(torch.tanh(torch.tensor(reach)) if name == "TANH" else torch.sigmoid(torch.tensor(reach)))
    return symmetric_scale(reach, bits), float(qmax) if exact_unit else qmax / edge


def gate_table(node, fn, in_scale: float, out_scale: float, bits: int) -> torch.Tensor:
    """The 256-entry table of fn from the gate input grid (codes from -2^(bits-1)) to the
    output grid (+-qmax): exact entries at 8 bits, interpolated ones at 16."""
    qmax = qmax_of(bits)
    inp = SimpleNamespace(scale=in_scale, zerop=0, qbits=bits, qmin=-qmax - 1, qmax=qmax,
                          dtype=Dtype.integer(bits, True))
    out = SimpleNamespace(scale=out_scale, zerop=0, qmin=-qmax, qmax=qmax)
    return build_lut(node, fn, inp, out, items_bits=8)


def lookup(q: torch.Tensor, table: torch.Tensor, in_bits: int, out_bits: int) -> torch.Tensor:
    """The tool chain's lookup of integers q (signed, in_bits) in a 2^k table (float64 result)."""
    return qmath.lut_lookup(q.to(torch.int64) + (1 << (in_bits - 1)), table, in_bits, out_bits, True).to(
        torch.float64)


def rescales(ratios: List[torch.Tensor], mult_bits: int):
    """Multiplier and shift of each ratio (numbers or vectors), flattened in order: float64 tensors."""
    ms, ss = [], []
    for r in ratios:
        r = torch.as_tensor(r, dtype=torch.float32).reshape(-1)
        rs = Rescale.from_ratio(r if r.numel() > 1 else float(r), mult_bits, unify_shifts=False)
        ms.append(torch.as_tensor(rs.multiplier, dtype=torch.float64).reshape(-1))
        ss.append(torch.as_tensor(rs.shift, dtype=torch.float64).reshape(-1))
    return torch.cat(ms), torch.cat(ss)


def write_table(node, multipliers: torch.Tensor, shifts: torch.Tensor, mult_bits: int) -> None:
    """Multipliers and shifts as the constants `scale` and `shift`."""
    fields.set_constant(node, "scale", multipliers, fields.multiplier_dtype(mult_bits))
    fields.set_constant(node, "shift", shifts, fields.shift_dtype(shifts))


def read_table(node, name: str, size: int) -> torch.Tensor:
    """A quantized layer's table constant as float64, `size` values long."""
    t = node.get_constant(name).betensor.to(torch.float64).reshape(-1)
    if t.numel() != size:
        raise bad(node, f"constant '{name}' has {t.numel()} values, expected {size}")
    return t


def weight_scales(node, w: torch.Tensor, per_channel: bool, row_sum_limit: float = None):
    """Symmetric scales of a block of weight rows (one per row, or one for the block,
    repeated per row) under the layer's weight strategy and bits, and the integer bounds;
    with `row_sum_limit`, narrowed where a row's integers would sum (in magnitude) past it."""
    st = settings_of(node)
    stats = Statistics.of_constant(w, st.histc_bins, 0 if per_channel else None)
    lo, hi = calibrate_range(stats, st.calibration_strategy_for_weight, st.weight_bits, True)
    absmax = torch.maximum(torch.as_tensor(lo).abs(), torch.as_tensor(hi).abs()).to(torch.float32).reshape(-1)
    if per_channel and bool((absmax > 0).any()):  # an all-zero row takes the others' median, as weight grids do
        absmax = torch.where(absmax > 0, absmax, absmax[absmax > 0].median())
    full = st.quantize_method_for_weight.full_range
    scale, _, qmin, qmax = qmath.linear_quant_params(-absmax, absmax, st.weight_bits, True, full, True)
    scale = torch.as_tensor(scale, dtype=torch.float32).reshape(-1).expand(w.shape[0]).clone()
    if row_sum_limit is not None:
        sums = w.abs().sum(1).to(torch.float32)
        cap = row_sum_limit / sums.clamp(min=1e-30)
        scale = torch.minimum(scale, cap if per_channel else cap.min().expand_as(scale))
    return scale, qmin, qmax


def quantize_weight_blocks(node, per_channel: bool, blocks, per_tensor=(), row_sum_limit: float = None) -> tuple:
    """The weights as integers, each block (rows, columns) on its own symmetric grid (the
    tool chain's recurrent forwards read no weight zero point; blocks listed in
    `per_tensor` take one scale even with per-channel weights). Returns each block's
    scales (one per row) and the integers (float64). The constant states one scale per
    block, or per block row with per-channel weights, as the tool chain writes them."""
    c = node.get_constant("weights")
    w = c.betensor.detach().to(torch.float32).cpu()
    st = settings_of(node)
    q = torch.zeros_like(w, dtype=torch.float64)
    scales, stated = [], []
    for k, (rows, cols) in enumerate(blocks):
        by_row = per_channel and k not in per_tensor
        scale, qmin, qmax = weight_scales(node, w[rows, cols], by_row, row_sum_limit)
        q[rows, cols] = qmath.quantize(w[rows, cols], scale[:, None], 0, qmin, qmax).to(torch.float64)
        scales.append(scale)
        stated.append(scale if per_channel else scale[:1])
    dtype = Dtype.integer(st.weight_bits, True)
    c.betensor = q.to(dtype.torch_dtype).to(c.betensor.device)
    c.dtype, c.qbits, c.qmin, c.qmax = dtype, st.weight_bits, qmin, qmax
    stated = torch.cat(stated)
    c.scale = stated if stated.numel() > 1 else float(stated[0])
    c.zerop = torch.zeros(stated.numel(), dtype=torch.int64) if stated.numel() > 1 else 0
    c.key_axis = 0 if stated.numel() > 1 else None
    return scales, q
