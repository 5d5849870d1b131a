"""What the segment layers (SegmentReduce, EmbeddingLookupSparse) share: segment ids as
the tool chain reads them and reductions over segments along the first axis.

The tool chain's segments: ids sorted ascending (the last one names the last segment),
segment j gathers the rows whose id is j, a segment no row names is all zeros, and ids
below 0 or above the last name no segment."""
import torch

from ..errors import IRError


def segment_count(node, ids: torch.Tensor) -> int:
    """The number of segments: the last id + 1 (ids flattened)."""
    ids = ids.reshape(-1)
    if not ids.numel() or int(ids[-1]) < 0:
        raise IRError(f"layer '{node.name}' ({node.type}): the segment ids must end with a non-negative id "
                      f"(the last one names the last segment), got {ids.tolist()[-4:]}")
    return int(ids[-1]) + 1


def kept_rows(ids: torch.Tensor, count: int) -> torch.Tensor:
    """Whether each row belongs to one of the segments 0..count-1."""
    return (ids >= 0) & (ids < count)


def segment_sums(values: torch.Tensor, ids: torch.Tensor, count: int) -> torch.Tensor:
    """Sums of the rows of `values` (axis 0) per segment: exact for integers (int64), one
    rounding for floats (summed in float64, returned in the values' dtype)."""
    ids = ids.reshape(-1).to(torch.int64)
    keep = kept_rows(ids, count)
    wide = torch.int64 if not values.is_floating_point() else torch.float64
    out = torch.zeros((count,) + tuple(values.shape[1:]), dtype=wide, device=values.device)
    out.index_add_(0, ids[keep], values[keep].to(wide))
    return out if not values.is_floating_point() else out.to(values.dtype)


def segment_reduce(values: torch.Tensor, ids: torch.Tensor, count: int, how: str) -> torch.Tensor:
    """`how` ('amax', 'amin', 'prod', 'mean') over each segment's rows (TensorFlow's
    segment reductions): an empty segment is 0 (prod: 1)."""
    ids = ids.reshape(-1).to(torch.int64)
    keep = kept_rows(ids, count)
    start = torch.ones if how == "prod" else torch.zeros
    out = start((count,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
    index = ids[keep].reshape((-1,) + (1,) * (values.dim() - 1)).expand_as(values[keep])
    return out.scatter_reduce(0, index, values[keep], reduce=how, include_self=False)
