"""Reshape to the IR's `shape` (the top shape); the batch actually run carries through.

Parser IRs hard-code batch 1 (e.g. `shape=[1,1280]`, or `[16,128]` with the batch
folded into the first axis). When the input arrives with one axis k times its IR size
(the batch), the IR's input and output shapes are split into the smallest groups of
axes with equal products, and the outermost output axis of the group holding that
axis is made k times larger: [1,16,128] -> [16,128] runs a batch of 4 as [64,128],
and [16,1,128] -> [16,128] (batch moved to axis 1) as [16,512].

Quantized: the same integers, the input's quantization passed through."""
from typing import List, Sequence, Tuple

from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


def axis_groups(in_shape: Sequence[int], out_shape: Sequence[int]) -> List[Tuple[List[int], List[int]]]:
    """The smallest runs of input and output axes with equal products, in order; axes
    of size 1 left at either end join the neighbouring group."""
    groups, i, j = [], 0, 0
    while i < len(in_shape) and j < len(out_shape):
        gi, gj, pi, pj = [i], [j], in_shape[i], out_shape[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj and i < len(in_shape):
                pi *= in_shape[i]
                gi.append(i)
                i += 1
            elif pj < pi and j < len(out_shape):
                pj *= out_shape[j]
                gj.append(j)
                j += 1
            else:
                break
        groups.append((gi, gj))
    if groups:
        groups[-1][0].extend(range(i, len(in_shape)))
        groups[-1][1].extend(range(j, len(out_shape)))
    return groups


def batched_shape(node, out_shape: Sequence[int]) -> List[int]:
    """The output shape for the input actually given (see the module docstring)."""
    x = node.inputs[0].betensor
    in_ir = [int(d) for d in node.inputs[0].ir_shape]
    out_shape = [int(d) for d in out_shape]
    actual = list(x.shape)
    if actual == in_ir or len(actual) != len(in_ir):
        return out_shape
    grown = [a for a in range(len(in_ir)) if actual[a] != in_ir[a]]
    if len(grown) != 1 or in_ir[grown[0]] == 0 or actual[grown[0]] % in_ir[grown[0]]:
        raise IRError(f"layer '{node.name}' (Reshape): input of shape {actual} for the IR's {in_ir}: only one "
                      f"axis (the batch) may differ, by a whole factor")
    k = actual[grown[0]] // in_ir[grown[0]]
    for gi, gj in axis_groups(in_ir, out_shape):
        if grown[0] in gi:
            out_shape[gj[0]] *= k
            break
    return out_shape


def target_shape(node) -> List[int]:
    """The top shape; a `shape` param, where given, must describe it (each axis its size,
    or one -1 for the inferred axis)."""
    top = [int(d) for d in node.outputs[0].ir_shape]
    shape = node.get_param("shape", top)
    fits = isinstance(shape, list) and len(shape) == len(top) and sum(d == -1 for d in shape) <= 1 and \
        all(d == t or d == -1 for d, t in zip(shape, top))
    if top and not fits:
        raise IRError(f"layer '{node.name}' (Reshape): shape {shape} does not describe its layer_top_shape {top}")
    return top or shape


@op_register(OpType.Reshape, "1.0")
def reshape_forward(self, *args):
    shape = target_shape(self)
    out = self.inputs[0].betensor.reshape(batched_shape(self, shape))
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Reshape, "1.0")
def reshape_quantize(self, *args):
    QT.pass_through(self)
