"""Reshape to the IR's `shape`; its first axis follows the batch actually run.

Quantized: the same integers, the input's quantization passed through."""
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register


def batched_shape(node, shape):
    """`shape` with its leading (batch) axis scaled to the batch being run."""
    x = node.inputs[0].betensor
    ir_batch = node.inputs[0].ir_shape[0] if node.inputs[0].ir_shape else 1
    shape = list(shape)
    if shape and ir_batch and x.shape[0] != ir_batch and shape[0] % ir_batch == 0:
        shape[0] = shape[0] // ir_batch * x.shape[0]
    return shape


@op_register(OpType.Reshape, "1.0")
def reshape_forward(self, *args):
    shape = self.get_param("shape", list(self.outputs[0].ir_shape))
    out = self.inputs[0].betensor.reshape(batched_shape(self, shape))
    self.outputs[0].betensor = out
    return out


@quant_register(OpType.Reshape, "1.0")
def reshape_quantize(self, *args):
    QT.pass_through(self)
