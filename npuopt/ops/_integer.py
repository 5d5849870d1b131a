"""What the integer and check layers share (BitShift, Bitwise, Mod, DivMod, IsInf, IsNaN,
CTCGreedyDecoder): integer operands checked as one-line IRErrors, results stored in the
top's integer type as the tool chain fits a top to its type (NaN 0, values clamped to the
type's range), and tops of integers that are their own values (scale 1, zero point 0)."""
import numpy as np
import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ._broadcast import broadcast_shape, check_inputs

WIDEST_BITS = 32  # the parser writes these layers' integer inputs in types of at most 32 bits


def integer_operands(node, counts=(2,)) -> list:
    """The inputs as int64 tensors (their values), counted and broadcast-checked; each
    must be an integer type of at most 32 bits."""
    check_inputs(node, counts)
    for t in node.inputs:
        if not t.dtype.is_integer or t.dtype.bits > WIDEST_BITS or t.betensor.is_floating_point():
            raise IRError(f"layer '{node.name}' ({node.type}): takes integer inputs of at most {WIDEST_BITS} "
                          f"bits, input '{t.name}' is {t.dtype.value}")
    xs = [t.betensor.to(torch.int64) for t in node.inputs]
    broadcast_shape(node, *xs)
    return xs


def promoted(*dtypes: Dtype) -> Dtype:
    """The type NumPy computes two integer types in (int8 with uint8: int16)."""
    names = [np.dtype(d.value) for d in dtypes]
    return Dtype.from_name(np.result_type(*names).name)


def wrap(y: torch.Tensor, dtype: Dtype) -> torch.Tensor:
    """int64 values wrapped modulo 2^bits into `dtype` (two's complement, as a C cast)."""
    return torch.remainder(y - dtype.qmin, 1 << dtype.bits) + dtype.qmin


def fit_top(t, y: torch.Tensor, natural: Dtype) -> torch.Tensor:
    """y as top t's value: in t's integer type (NaN 0, clamped to its range, as the tool
    chain fits a top to its type), or where t has no integer type yet (a graph being
    built) in `natural`'s."""
    dtype = t.dtype if t.dtype.is_integer else natural
    if dtype.is_integer:
        if y.is_floating_point():
            y = torch.nan_to_num(y.to(torch.float64), nan=0.0)
        y = torch.clamp(y, dtype.qmin, dtype.qmax)
    t.betensor = y.to(dtype.torch_dtype)
    return t.betensor


def integer_inputs_only(node) -> None:
    """The tool chain quantizes these layers only on integers (qinvariant inputs); others
    stay in float."""
    for t in node.inputs:
        if not t.qinvariant:
            raise QT.Unsupported(f"layer '{node.name}' ({node.type}): input '{t.name}' holds scaled values; "
                                 f"the tool chain computes this layer on integers only, npuopt keeps it in float")


def integer_top(t, dtype: Dtype) -> None:
    """Top t holds integers that are their own values, in `dtype`."""
    QT.set_quantization(t, 1.0, 0, dtype.qmin, dtype.qmax, dtype.bits, dtype.is_signed)
    t.dtype = dtype
    t.qinvariant = True


def original_integer_top(t, fallback: Dtype) -> None:
    """integer_top in the float IR's integer type of t (the tool chain's
    layer_top_type_original), or in `fallback` where that is not an integer type."""
    integer_top(t, t.ir_dtype if t.ir_dtype.is_integer else fallback)


# ---- IsInf, IsNaN -------------------------------------------------------------------------
def set_mask(node, mask: torch.Tensor) -> torch.Tensor:
    """A check's 0/1 top (uint8, as the parser types it)."""
    return fit_top(node.outputs[0], mask.to(torch.int64), Dtype.UINT8)


def mask_quantize(node) -> None:
    """The check's top is uint8 0/1 (scale 1, zero point 0), as the tool chain's; on an
    integer (quantized) input it is 0 everywhere."""
    QT.check_quantized_inputs(node)
    integer_top(node.outputs[0], Dtype.UINT8)
