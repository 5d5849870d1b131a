"""What the integer layers of pre-quantized sources share (ConvInteger, MatMulInteger):
their integer inputs, their zero-point params, and their int32 top.

These layers compute on integers in float and quantized graphs alike; quantizing them
scales nothing (the tool chain's form): their top is int32 with scale 1, zero point 0."""
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT


def integer_operands(node, count: int) -> list:
    """The values of the layer's `count` inputs as float64 (exact for its integers); another
    input count or a float input is an IRError."""
    where = f"layer '{node.name}' ({node.type})"
    if len(node.inputs) != count or len(node.outputs) != 1:
        raise IRError(f"{where}: takes {count} input{'s' if count > 1 else ''} and 1 output, the IR gives "
                      f"{len(node.inputs)} and {len(node.outputs)}")
    for t in node.inputs:
        if not t.dtype.is_integer:
            raise IRError(f"{where}: input '{t.name}' is {t.dtype.value}; it takes integers (uint8 or int8)")
    return [t.betensor.to(torch.float64) for t in node.inputs]


def zero_point(node, key: str, dtype: Dtype) -> int:
    """Zero-point param `key`: an integer within `dtype`'s range (its operand's type)."""
    value = node.get_param(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must be an integer, got {value!r}")
    if dtype.is_integer and not dtype.qmin <= value <= dtype.qmax:
        raise IRError(f"layer '{node.name}' ({node.type}): {key}={value} lies outside its operand's "
                      f"{dtype.value} range [{dtype.qmin}, {dtype.qmax}]")
    return value


def integer_top(node, acc: torch.Tensor) -> torch.Tensor:
    """Exact sums `acc` as the int32 top, saturated to its range (the top's, when quantized)."""
    out = node.outputs[0]
    if node.quantized:
        return QT.store_output(node, acc.clamp_(out.qmin, out.qmax), out)
    out.betensor = acc.clamp_(QT.INT32_MIN, QT.INT32_MAX).to(torch.int32)
    return out.betensor


def int32_quantization(t) -> None:
    """The top of an integer layer: int32 as it is (scale 1, zero point 0, qinvariant)."""
    QT.set_quantization(t, 1.0, 0, QT.INT32_MIN, QT.INT32_MAX, 32, True)
    t.qinvariant = True


def source_integers(t) -> bool:
    """Whether t holds the integers a pre-quantized source states (its grid kept: ir/compat.py)."""
    return t.source_grid is not None
