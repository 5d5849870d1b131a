"""What the data-movement layers share: integer params checked as one-line IRErrors,
axes normalised against a rank, and index tensors checked against an axis size."""
import torch

from ..errors import IRError

_MISSING = object()


def int_param(node, key: str, default=_MISSING, minimum: int = None) -> int:
    """An integer param (not a bool), at least `minimum` when given."""
    value = node.get_param(key) if default is _MISSING else node.get_param(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must be at least {minimum}, got {value}")
    return value


def int_list(node, key: str, default=_MISSING):
    """A list of integers param (one int is a list of one)."""
    value = node.get_param(key) if default is _MISSING else node.get_param(key, default)
    value = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(value, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must be a list of integers, got {value!r}")
    return [int(v) for v in value]


def bool_param(node, key: str, default: bool) -> bool:
    """A flag written as true/false (or 0/1)."""
    value = node.get_param(key, default)
    if value in (0, 1):  # True/False included
        return bool(value)
    raise IRError(f"layer '{node.name}' ({node.type}): {key} must be true or false, got {value!r}")


def axis_of(node, ndim: int, key: str = "axis", default=_MISSING) -> int:
    """An axis in [-ndim, ndim) as a non-negative axis."""
    axis = int_param(node, key, default)
    if not -ndim <= axis < ndim:
        raise IRError(f"layer '{node.name}' ({node.type}): {key} {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def divides(node, what: str, size: int, block: int) -> None:
    if size % block:
        raise IRError(f"layer '{node.name}' ({node.type}): {what} {size} is not a multiple of {block}")


def integers(node, values: torch.Tensor, what: str) -> torch.Tensor:
    """An index-like tensor as int64; non-integral values are an IRError."""
    if values.is_floating_point() and not torch.equal(values, values.floor()):
        raise IRError(f"layer '{node.name}' ({node.type}): {what} must be integers")
    return values.to(torch.int64)


def check_indices(node, indices: torch.Tensor, size: int, what: str = "indices") -> torch.Tensor:
    """Integer indices into an axis of `size`, negative ones counted from the end; any
    outside [-size, size) is an IRError. Returns them as non-negative int64."""
    idx = integers(node, indices, what)
    if idx.numel() and (int(idx.min()) < -size or int(idx.max()) >= size):
        raise IRError(f"layer '{node.name}' ({node.type}): {what} [{int(idx.min())}, {int(idx.max())}] "
                      f"out of range for an axis of {size}")
    return torch.where(idx < 0, idx + size, idx)


def block_sizes(node):
    """(block_size_y, block_size_x), both positive."""
    return int_param(node, "block_size_y", minimum=1), int_param(node, "block_size_x", minimum=1)


def nhwc_input(node) -> torch.Tensor:
    x = node.inputs[0].betensor
    if x.dim() != 4:
        raise IRError(f"layer '{node.name}' ({node.type}): needs a 4-D NHWC input, got {x.dim()}-D")
    return x


def fill_value(node) -> float:
    """What padding adds: real 0, which is the integer -zp in a quantized layer."""
    if not node.quantized:
        return 0.0
    return -float(torch.as_tensor(node.inputs[0].zerop).reshape(-1)[0])


def set_output(node, out: torch.Tensor) -> torch.Tensor:
    node.outputs[0].betensor = out
    return out


def index_input(node, i: int = 1) -> torch.Tensor:
    if len(node.inputs) <= i:
        raise IRError(f"layer '{node.name}' ({node.type}): needs its indices as input {i}")
    return node.inputs[i].betensor


def batch_dims_of(node, data: torch.Tensor, indices: torch.Tensor, limit: int) -> int:
    """batch_dims (negative: counted from the indices' rank), at most `limit`; the leading
    batch_dims axes of data and indices must agree."""
    bd = int_param(node, "batch_dims", 0)
    bd = bd + indices.dim() if bd < 0 else bd
    if not 0 <= bd <= min(limit, indices.dim()) or tuple(data.shape[:bd]) != tuple(indices.shape[:bd]):
        raise IRError(f"layer '{node.name}' ({node.type}): batch_dims {node.get_param('batch_dims', 0)} does not "
                      f"fit data {list(data.shape)} and indices {list(indices.shape)}")
    return bd


def index_output_quantization(node, t, bits: int, signed: bool = False) -> None:
    """An output of indices or counts: integers as they are (scale 1, zp 0, qinvariant),
    unsigned unless `signed`."""
    from ..dtype import Dtype
    t.scale, t.zerop, t.qbits = 1.0, 0, bits
    t.dtype = Dtype.integer(bits, signed)
    t.qmin, t.qmax = t.dtype.qmin, t.dtype.qmax
    t.qinvariant = True
