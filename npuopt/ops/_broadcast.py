"""What the broadcasting arithmetic layers share (Add, Sub, Mul, Div,
SquaredDifference, Gemm's bias): input checks, NumPy-style broadcasting, float32
operands, and the Eltwise arithmetic that Add/Sub/Mul are (the tool chain computes
them as an Eltwise of that method)."""
import contextlib
from typing import Sequence

import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import tensors as QT
from ..quant.fields import Rescale
from .activation import apply_fused_activation
from .eltwise import FLOAT_ELTWISE, eltwise_quantize, eltwise_quantized


def check_inputs(node, counts: Sequence[int]) -> None:
    if len(node.inputs) not in counts:
        want = " or ".join(str(c) for c in counts)
        raise IRError(f"layer '{node.name}' ({node.type}): takes {want} inputs, the IR gives {len(node.inputs)}")


def broadcast_shape(node, *tensors: torch.Tensor) -> torch.Size:
    """The NumPy broadcast of the operands' shapes; a one-line IRError when there is none."""
    try:
        return torch.broadcast_shapes(*(t.shape for t in tensors))
    except RuntimeError:
        shapes = " and ".join(str(list(t.shape)) for t in tensors)
        raise IRError(f"layer '{node.name}' ({node.type}): input shapes {shapes} do not broadcast") from None


def float_operands(node, count: int = 2):
    """The first `count` inputs as float32 (float64 in float64 mode: dtype.computing_float),
    broadcast-checked: the tool chain computes these layers' float forward in float32,
    whatever the inputs' dtypes."""
    xs = [computing_float(t.betensor) for t in node.inputs[:count]]
    broadcast_shape(node, *xs)
    return xs


def check_quantized_operands(node, count: int = 2) -> None:
    broadcast_shape(node, *(t.betensor for t in node.inputs[:count]))


# ---- Add / Sub / Mul: Eltwise with a fixed method ---------------------------------------
def arithmetic_forward(node, method: str) -> torch.Tensor:
    check_inputs(node, (2,))
    out = node.outputs[0]
    if node.quantized:
        check_quantized_operands(node)
        return QT.store_output(node, eltwise_quantized(node, method), out)
    a, b = float_operands(node)
    out.betensor = apply_fused_activation(node, FLOAT_ELTWISE[method](a, b))
    return out.betensor


@contextlib.contextmanager
def _as_eltwise(node, method: str):
    """The node seen as an Eltwise of `method` (its `method` param set for the duration)."""
    saved = node.params.get("method")
    node.params["method"] = method
    try:
        yield
    finally:
        if saved is None:
            node.params.pop("method")
        else:
            node.params["method"] = saved


def arithmetic_quantize(node, method: str) -> None:
    check_inputs(node, (2,))
    with _as_eltwise(node, method):
        eltwise_quantize(node)


# ---- helpers of the other layers ------------------------------------------------------
def requantize_into(node, acc: torch.Tensor, rescale: Rescale) -> torch.Tensor:
    """acc (exact integers) rescaled into the output's quantization, stored as its value."""
    out = node.outputs[0]
    return QT.store_output(node, rescale.apply(acc, out.zerop, out.qmin, out.qmax), out)

