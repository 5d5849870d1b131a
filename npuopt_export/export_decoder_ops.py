"""The aten-op handlers a decoder brings (npuopt_export/llama.py, a Hugging Face Llama):
embeddings as a Gather of a Constant, RMSNorm, Negative for the rotate-half, expand and
repeat as Tile (repeat_kv), and the sizes a traced model computes (`pk.shape[2] + 1`) with
the slices they bound. `HANDLERS` here extends export_ops.HANDLERS (npuopt-export uses both).
"""
import torch

from .export_graph import Act, LazyPad, Size
from .export_ops import _const, _fail, _slice

aten = torch.ops.aten


def sym_size(ex, node, x, dim):
    """A traced tensor size: the example's, marked as a Size (export_graph.Size)."""
    return Size(ex.act(x).shape[dim])


def embedding(ex, node, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """Rows of the embedding table picked by the token ids: Gather(axis 0) of a Constant."""
    table = ex.constant(_const(ex, weight, "embedding table"), (0, 1))
    act = ex.act(ids)
    return ex.emit("Gather", [table, act], {"axis": 0, "batch_dims": 0}, perm=act.perm + (act.rank,))


def rms_norm(ex, node, x, normalized_shape, weight=None, eps=None):
    act = ex.act(x)
    k, rank = len(normalized_shape), act.rank
    if act.perm[rank - k:] != tuple(range(rank - k, rank)):
        act = ex.need(act, range(rank))
    weights = _const(ex, weight, "weight") if weight is not None else torch.ones(tuple(normalized_shape))
    eps = float(torch.finfo(torch.float32).eps) if eps is None else float(eps)
    return ex.emit("RMSNorm", [act], {"axis": list(range(rank - k, rank)), "epsilon": eps},
                   {"weights": weights.reshape(-1)})


def neg(ex, node, x):
    return ex.emit("Negative", [ex.act(x)])


def expand(ex, node, x, size, implicit=False):
    """Axes of size 1 repeated to the output's size: a Tile (its repeats in IR order)."""
    act = ex.act(x)
    out = ex.out_shape
    if len(out) != act.rank or any(a != o and a != 1 for a, o in zip(act.shape, out)):
        _fail(ex, f"expanding {list(act.shape)} to {list(out)} has no IR form (only axes of size 1 repeat)")
    if act.shape == out:
        return act
    return ex.emit("Tile", [act], {"repeats": [out[p] // act.shape[p] for p in act.perm]}, shape=out)


def repeat(ex, node, x, repeats):
    act = ex.act(x)
    if len(repeats) != act.rank:
        _fail(ex, f"repeats {list(repeats)} for a {act.rank}-D tensor has no IR form (one count per axis)")
    return ex.emit("Tile", [act], {"repeats": [int(repeats[p]) for p in act.perm]})


def slice_sized(ex, node, x, dim=0, start=None, end=None, step=1):
    """A slice; of a constant too where a bound is a traced size (a rotary table or the
    causal mask up to the length): a Slice layer at every length, the whole axis too."""
    sized = any(isinstance(v, Size) for v in (start, end))
    if isinstance(x, torch.Tensor):
        if not sized:
            _fail(ex, "a slice of a constant reached a handler")
        x = ex.constant(x.to(torch.float32), range(x.dim()))
    act = ex.act(x) if isinstance(x, (Act, LazyPad)) else x
    return _slice(ex, act, dim, start, end, step, keep=sized)


HANDLERS = {
    aten.sym_size.int: sym_size,
    aten.embedding.default: embedding,
    aten.rms_norm.default: rms_norm,
    aten.neg.default: neg,
    aten.expand.default: expand,
    aten.repeat.default: repeat,
    aten.slice.Tensor: slice_sized,
}
