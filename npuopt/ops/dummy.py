"""Dummy: each input handed on unchanged as the top of the same position (the tool chain's
parser joins the separate parts of a graph through one, so that it has one last layer).

Quantized: the same integers; each top takes the quantization of its input."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


def _pairs(node):
    if len(node.inputs) != len(node.outputs):
        raise IRError(f"layer '{node.name}' ({node.type}): {len(node.inputs)} inputs for {len(node.outputs)} tops "
                      f"(one top per input)")
    return zip(node.inputs, node.outputs)


@op_register(OpType.Dummy, "1.0")
def dummy_forward(self, *args):
    for t, out in _pairs(self):
        out.betensor = t.betensor
    return [out.betensor for out in self.outputs]


@quant_register(OpType.Dummy, "1.0")
def dummy_quantize(self, *args):
    QT.check_quantized_inputs(self)
    for t, out in _pairs(self):
        QT.copy_quantization(t, out)
