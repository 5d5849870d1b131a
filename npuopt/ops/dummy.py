"""Dummy: hands input i on as output i unchanged (the parser puts Dummy layers at a Loop
body's outputs); quantized, output i takes input i's quantization."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


def _check(node) -> None:
    if len(node.outputs) > len(node.inputs):
        raise IRError(f"layer '{node.name}' (Dummy): hands input i on as output i, but has {len(node.inputs)} "
                      f"inputs for {len(node.outputs)} outputs")


@op_register(OpType.Dummy, "1.0")
def dummy_forward(self, *args):
    _check(self)
    for out, inp in zip(self.outputs, self.inputs):
        out.betensor = inp.betensor
    return [t.betensor for t in self.outputs]


@quant_register(OpType.Dummy, "1.0")
def dummy_quantize(self, *args):
    _check(self)
    QT.check_quantized_inputs(self)
    for out, inp in zip(self.outputs, self.inputs):
        QT.copy_quantization(inp, out)
