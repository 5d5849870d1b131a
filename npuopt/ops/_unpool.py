"""What MaxUnpool and UpsampleByIndex share (the tool chain computes both one way): each
value of input 0 is written at the flat position its index (input 1, same shape) names
in the NHWC top of `layer_top_shape` (the batch of the run), every other element 0.

`flatten_dim` says what an index counts (the tool chain adds what it lacks):
  HW    the position in its sample's and channel's H x W plane (NCHW order),
  HWC   the position in its sample's H x W x C block (NHWC order),
  NHWC  the position in the whole NHWC top,
  NCHW  the position in the whole top in NCHW order.
Indices past the end are dropped; negative ones count from the end (NumPy's rule, which
the tool chain's scatter follows); where two values name one position, the later one in
the layout's order (NCHW for HW and NCHW, NHWC for the others) wins.

Quantized: the integers move unchanged; the top takes input 0's quantization and the
positions no value reaches hold the integer of 0.0 (-zp)."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ._layout import nchw_to_nhwc, nhwc_to_nchw, param_choice
from ._movement import fill_value, index_input, integers

FLATTEN_DIMS = ["HW", "HWC", "NHWC", "NCHW"]


def _top_shape(node, values: torch.Tensor, shape_param: str):
    """(N, H, W, C) of the top: the IR's, with the run's batch; `shape_param`, where the IR
    has it, must say the same; C must be the values' channels."""
    out = node.outputs[0]
    shape = [int(d) for d in out.ir_shape]
    given = node.get_param(shape_param, None)
    if len(shape) != 4 or values.dim() != 4:
        raise IRError(f"layer '{node.name}' ({node.type}): takes NHWC values and an NHWC top, got "
                      f"{list(values.shape)} and {shape}")
    if isinstance(given, list) and given and [int(v) for v in given][1:] != shape[1:]:
        raise IRError(f"layer '{node.name}' ({node.type}): {shape_param} {given} differs from the top's "
                      f"shape {shape}")
    if shape[3] != values.shape[3]:
        raise IRError(f"layer '{node.name}' ({node.type}): the top has {shape[3]} channels, the values "
                      f"{values.shape[3]}")
    return values.shape[0], shape[1], shape[2], shape[3]


def unpool_forward(node, shape_param: str):
    if len(node.inputs) != 2:
        raise IRError(f"layer '{node.name}' ({node.type}): takes 2 inputs (values, indices), the IR gives "
                      f"{len(node.inputs)}")
    values = node.inputs[0].betensor
    index = integers(node, index_input(node), "indices")
    flatten = param_choice(node, "flatten_dim", FLATTEN_DIMS)
    n, h, w, c = _top_shape(node, values, shape_param)
    if tuple(index.shape) != tuple(values.shape):
        raise IRError(f"layer '{node.name}' ({node.type}): indices {list(index.shape)} and values "
                      f"{list(values.shape)} differ in shape")
    planes = flatten in ("HW", "NCHW")   # the positions count in NCHW order
    dev = index.device
    if planes:
        values, index = nhwc_to_nchw(values), nhwc_to_nchw(index)
    if flatten == "HW":
        index = index + (torch.arange(n, device=dev).reshape(-1, 1, 1, 1) * c
                         + torch.arange(c, device=dev).reshape(1, -1, 1, 1)) * (h * w)
    elif flatten == "HWC":
        index = index + torch.arange(n, device=dev).reshape(-1, 1, 1, 1) * (h * w * c)
    length = n * h * w * c
    index, values = index.reshape(-1), values.reshape(-1)
    keep = index < length
    index, values = index[keep], values[keep]
    if index.numel() and int(index.min()) < -length:
        raise IRError(f"layer '{node.name}' ({node.type}): index {int(index.min())} lies before the start of "
                      f"a top of {length} elements")
    index = torch.where(index < 0, index + length, index)
    order = torch.arange(index.numel(), device=dev)
    winner = torch.full((length,), -1, dtype=torch.int64, device=dev).scatter_reduce_(0, index, order, "amax")
    reached = winner >= 0
    kind = values.dtype if values.is_floating_point() else torch.float64
    top = torch.full((length,), fill_value(node), dtype=kind, device=values.device)
    top[reached] = values[winner[reached]].to(top.dtype)
    top = top.reshape((n, c, h, w) if planes else (n, h, w, c))
    return nchw_to_nhwc(top) if planes else top


def unpool(node, shape_param: str):
    out = node.outputs[0]
    top = unpool_forward(node, shape_param)
    if node.quantized:
        return QT.store_output(node, top, out)
    out.betensor = top
    return top


def unpool_quantize(node) -> None:
    param_choice(node, "flatten_dim", FLATTEN_DIMS)
    QT.check_quantized_inputs(node)
    QT.copy_quantization(node.inputs[0], node.outputs[0])
