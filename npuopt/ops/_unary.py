"""What the unary math layers (Abs, Negative, Sign, Sqrt, Exp, Log, Sine, ...) share.

Float: the function on the float32 input, as the tool chain computes it.

Quantized, in the tool chain's forms (docs/integer-semantics.md):
* Abs rescales |q + zp_in| (`scale_value`/`shift_value`); Negative and Sign are exact
  integer maps with no params;
* every other type is a lookup in a table `lut` (Activation's lookup), indexed by the
  input code minus a base that depends on the type: the tool chain's Sqrt, Rsqrt,
  Reciprocal, BNLL and 8-bit Sine/Cosine index from the input's qmin, the others from
  Activation's base (qmin - 1 for a signed restricted range);
* Sine/Cosine on inputs wider than 8 bits reduce the input to one period with a
  rescale and index a table of one period.
"""
import math
from types import SimpleNamespace

import torch

from ..dtype import Dtype, computing_float
from ..errors import IRError
from ..quant import fields, qmath
from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from .activation import build_lut, lut_index_base

INT32_MIN, INT32_MAX = QT.INT32_MIN, QT.INT32_MAX


def operands(node):
    """(input, output) of a one-input layer; a one-line IRError for any other count."""
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        raise IRError(f"layer '{node.name}' ({node.type}): takes 1 input and 1 output, the IR gives "
                      f"{len(node.inputs)} and {len(node.outputs)}")
    return node.inputs[0], node.outputs[0]


def float_forward(node, fn):
    inp, out = operands(node)
    out.betensor = fn(computing_float(inp.betensor))
    return out.betensor


# ---- lookup-table layers ---------------------------------------------------------
def lut_base(inp, from_qmin: bool) -> int:
    return inp.qmin if from_qmin else lut_index_base(inp)


def _indexed_from(inp, base: int):
    """inp as build_lut sees a tensor whose table starts at code `base` (an unsigned view
    with qmin = base: build_lut only reads the scale, zero point, bits and base)."""
    return SimpleNamespace(scale=inp.scale, zerop=inp.zerop, qbits=inp.qbits, qmin=base, qmax=inp.qmax,
                           dtype=Dtype.integer(inp.qbits, False))


def lut_quantize(node, fn, from_qmin: bool = False) -> None:
    """Output quantized from its calibrated range (signed when it has negative values);
    the table holds fn at every input code (interpolated entries past
    lut_items_in_bits), from the type's base. As in the tool chain's tables, NaN (outside
    the domain, e.g. sqrt(-1)) is code 0 and +-inf saturate."""
    QT.check_quantized_inputs(node)
    inp, out = operands(node)
    QT.quantize_activation(node, out)
    view = _indexed_from(inp, lut_base(inp, from_qmin))
    fields.write_lut(node, build_lut(node, fn, view, out), out.dtype)


def lut_forward(node, fn, from_qmin: bool = False):
    if not node.quantized:
        return float_forward(node, fn)
    inp, out = operands(node)
    table, dtype = fields.read_lut(node)
    index = inp.betensor.to(torch.int64) - lut_base(inp, from_qmin)
    y = qmath.lut_lookup(index, table, inp.qbits, dtype.bits, dtype.is_signed)
    return QT.store_output(node, y, out)


# ---- Sine, Cosine --------------------------------------------------------------------
def periodic_quantize(node, fn) -> None:
    """8-bit inputs: a table from the input's qmin. Wider: the output is fn * (2^(bits-1) - 1)
    (zp 0, symmetric range), the table holds one period at n = 2^min(bits,
    lut_items_in_bits) points (entry i = fn(2 pi i / n)), and the rescale maps
    q + zp to table steps (ratio n / (2 pi scale_in))."""
    QT.check_quantized_inputs(node)
    inp, out = operands(node)
    if inp.qbits <= 8:
        lut_quantize(node, fn, from_qmin=True)
        return
    st = settings_of(node)
    bits = st.activation_bits
    qmax = (1 << (bits - 1)) - 1
    QT.set_quantization(out, float(qmax), 0, -qmax, qmax, bits, True)
    n = 1 << min(bits, st.lut_items_in_bits)
    samples = fn(torch.arange(n, dtype=torch.float64) * (2 * math.pi / n))
    fields.write_lut(node, qmath.quantize(samples, out.scale, 0, -qmax, qmax), out.dtype)
    Rescale.from_ratio(n / (2 * math.pi) / inp.scale, st.multiplier_bits).write(node)


def periodic_forward(node, fn):
    if not node.quantized:
        return float_forward(node, fn)
    inp, out = operands(node)
    if inp.qbits <= 8:
        return lut_forward(node, fn, from_qmin=True)
    table, _ = fields.read_lut(node)
    n = table.numel()
    if n & (n - 1):
        raise IRError(f"layer '{node.name}' ({node.type}): lut has {n} entries, not a power of two")
    r = Rescale.read(node)
    steps = qmath.requantize(QT.shifted(inp), r.multiplier, r.shift, 0, INT32_MIN, INT32_MAX)
    index = steps.to(torch.int64) & (n - 1)  # the step count modulo one period
    return QT.store_output(node, table.reshape(-1).to(index.device)[index], out)


# ---- exact integer layers --------------------------------------------------------------
def abs_quantize(node) -> None:
    """An integer-valued (qinvariant) input keeps its quantization; otherwise the output
    is unsigned, from its calibrated range, with the rescale scale_out / scale_in."""
    QT.check_quantized_inputs(node)
    inp, out = operands(node)
    if inp.qinvariant:
        QT.copy_quantization(inp, out)
        return
    QT.quantize_activation(node, out, signed=False)
    Rescale.from_ratio(out.scale / inp.scale, settings_of(node).multiplier_bits).write(node)


def abs_forward(node):
    inp, out = operands(node)
    if not node.quantized:
        out.betensor = torch.abs(inp.betensor)
        return out.betensor
    r = Rescale.read(node, required=False)
    if r is None:  # integer values: |q| wrapped into the output dtype, as a C cast does
        span = 1 << out.dtype.bits
        y = (inp.betensor.to(torch.int64).abs() - out.dtype.qmin) % span + out.dtype.qmin
    else:
        y = r.apply(QT.shifted(inp).abs(), out.zerop, out.qmin, out.qmax)
    return QT.store_output(node, y, out)


def negative_quantize(node) -> None:
    """The input's scale and bits, signed; the zero point makes -(q + zp_in) fit:
    zp_out = 1 - zp_in for a signed input (q_out = -q - 1), -zp_in - qmax for an
    unsigned one (q_out = qmax - q), qmax that of the signed type."""
    QT.check_quantized_inputs(node)
    inp, out = operands(node)
    dtype = Dtype.integer(inp.qbits, True)
    zp = 1 - int(inp.zerop) if inp.dtype.is_signed else -int(inp.zerop) - dtype.qmax
    QT.set_quantization(out, inp.scale, zp, dtype.qmin, dtype.qmax, inp.qbits, True)
    out.qinvariant = inp.qinvariant


def negative_forward(node):
    inp, out = operands(node)
    if not node.quantized:
        out.betensor = torch.neg(inp.betensor)
        return out.betensor
    y = torch.clamp(-QT.shifted(inp) - float(out.zerop), out.qmin, out.qmax)
    return QT.store_output(node, y, out)


def sign_quantize(node) -> None:
    """-1, 0, 1 as integers: scale 1, zero point 0, signed, the input's bits."""
    QT.check_quantized_inputs(node)
    inp, out = operands(node)
    dtype = Dtype.integer(inp.qbits, True)
    QT.set_quantization(out, 1.0, 0, dtype.qmin, dtype.qmax, inp.qbits, True)
    out.qinvariant = True


def sign_forward(node):
    inp, out = operands(node)
    if not node.quantized:
        out.betensor = torch.sign(inp.betensor)
        return out.betensor
    return QT.store_output(node, torch.sign(QT.shifted(inp)), out)
