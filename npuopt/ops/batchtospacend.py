"""BatchToSpaceND (TensorFlow's batch_to_space_nd; the parser writes it for 5-D NDHWC
inputs): `block_size` [b_1, ..., b_M] over the M spatial axes after the batch, `crops`
[[begin, end], ...] one pair per spatial axis. Batch entry (i_1 * b_2 * ... + i_M) * N' + n
holds the elements at offset (i_1, ..., i_M) of every block of output sample n; then the
crops are cut off each spatial axis. The batch must be a multiple of b_1 * ... * b_M.

Quantized: the same code moves the integers; the input's quantization is passed through."""
import math

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs
from ._movement import divides, int_list, set_output


def _blocks_and_crops(node, rank: int):
    """block_size (positive, one per spatial axis) and crops as (begin, end) pairs (nested,
    or flat in pairs), checked against an input of `rank` axes."""
    blocks = int_list(node, "block_size")
    if not blocks or any(b < 1 for b in blocks) or len(blocks) > rank - 1:
        raise IRError(f"layer '{node.name}' (BatchToSpaceND): block_size {blocks} must be positive sizes of at most "
                      f"{rank - 1} spatial axes of a {rank}-D input")
    crops = node.get_param("crops", [[0, 0]] * len(blocks))
    flat = [v for pair in crops for v in (pair if isinstance(pair, list) else [pair])] \
        if isinstance(crops, list) else None
    if flat is None or len(flat) != 2 * len(blocks) or \
            any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in flat):
        raise IRError(f"layer '{node.name}' (BatchToSpaceND): crops {crops!r} must be {len(blocks)} pairs of "
                      f"non-negative integers (one per block_size entry)")
    return blocks, list(zip(flat[0::2], flat[1::2]))


@op_register(OpType.BatchToSpaceND, "1.0")
def batchtospacend_forward(self, *args):
    check_inputs(self, (1,))
    x = self.inputs[0].betensor
    blocks, crops = _blocks_and_crops(self, x.dim())
    m, n = len(blocks), x.shape[0]
    divides(self, "the batch", n, math.prod(blocks))
    spatial, rest = list(x.shape[1:1 + m]), list(x.shape[1 + m:])
    for axis, (size, block, (begin, end)) in enumerate(zip(spatial, blocks, crops)):
        if begin + end >= size * block:
            raise IRError(f"layer '{self.name}' (BatchToSpaceND): crops ({begin}, {end}) leave nothing of spatial "
                          f"axis {axis + 1} ({size * block} after the blocks)")
    y = x.reshape(blocks + [n // math.prod(blocks)] + spatial + rest)
    # [N', s_1, b_1, ..., s_M, b_M, rest...]
    order = [m] + [i for a in range(m) for i in (m + 1 + a, a)] + list(range(2 * m + 1, y.dim()))
    y = y.permute(order).reshape([n // math.prod(blocks)] + [s * b for s, b in zip(spatial, blocks)] + rest)
    index = [slice(None)] + [slice(begin, s * b - end) for s, b, (begin, end) in zip(spatial, blocks, crops)]
    return set_output(self, y[tuple(index)])


@quant_register(OpType.BatchToSpaceND, "1.0")
def batchtospacend_quantize(self, *args):
    QT.pass_through(self)
