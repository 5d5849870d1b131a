"""QueryRebatch (BEVFormer's spatial cross-attention; the parser merges its pattern of
Gathers and ScatterNDs): input 0 the queries [N, Q, C...], inputs 1..K one list of query
indices per camera (1-D integers, no batch axis). Top [N, K, L, C...] with
L = the longest list: top[:, k, j] = queries[:, index_k[j]], 0 past the end of list k.
The lists' lengths follow the data (in a model they come from NonZero), so the top's third
axis does too (the IR's size is its bound; data-dependent shapes).

Quantized: the queries' integers move, the top takes input 0's quantization; the
positions past a list's end hold the integer 0, as the tool chain fills them."""
import torch

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import check_indices, set_output


def camera_lists(node, rows: int):
    """The K index lists (inputs 1..K, 1-D, each within [-rows, rows)) as non-negative int64;
    K must be the top's second axis in the IR."""
    lists = [t.betensor for t in node.inputs[1:]]
    if not lists:
        raise IRError(f"layer '{node.name}' ({node.type}): needs the queries and one index list per camera, "
                      f"the IR gives {len(node.inputs)} input(s)")
    for t in node.inputs[1:]:
        if t.betensor.dim() != 1:
            raise IRError(f"layer '{node.name}' ({node.type}): index list '{t.name}' must be 1-D, got shape "
                          f"{list(t.betensor.shape)}")
    return [check_indices(node, idx, rows, f"index list '{t.name}'") for idx, t in zip(lists, node.inputs[1:])]


@op_register(OpType.QueryRebatch, "1.0", data_dependent_shapes=True)
def queryrebatch_forward(self, *args):
    queries = self.inputs[0].betensor
    if queries.dim() < 2:
        raise IRError(f"layer '{self.name}' (QueryRebatch): the queries must have a batch and a query axis, got "
                      f"shape {list(queries.shape)}")
    lists = camera_lists(self, queries.shape[1])
    cameras = [int(d) for d in self.outputs[0].ir_shape][1:2]
    if cameras != [len(lists)]:
        raise IRError(f"layer '{self.name}' (QueryRebatch): {len(lists)} index lists for a top of "
                      f"{cameras[0] if cameras else 'no'} cameras (its second axis)")
    longest = max(int(idx.numel()) for idx in lists)
    out = torch.zeros((queries.shape[0], len(lists), longest) + tuple(queries.shape[2:]), dtype=queries.dtype,
                      device=queries.device)
    for k, idx in enumerate(lists):
        out[:, k, :idx.numel()] = queries[:, idx.to(queries.device)]
    return set_output(self, out)


@quant_register(OpType.QueryRebatch, "1.0")
def queryrebatch_quantize(self, *args):
    QT.pass_through(self)
