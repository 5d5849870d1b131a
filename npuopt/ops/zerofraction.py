"""ZeroFraction (TensorFlow's zero_fraction): the share of zeros among each sample's
elements, float32, one value per sample of the batch run, as the tool chain computes it.
The parser writes a 0-d top (TensorFlow's one fraction of its batch of 1): a batch of
one gives that shape, a batch of N gives [N], which the IR's 0-d shape bounds (the layer
is declared with shapes that follow the data, so a graph holding one runs a batch as one).

Quantized, as the tool chain: Z the zeros among the stored integers plus the input's zero
point (the real zeros), n the sample's elements, `output_scale` E = 2^bits - 1: out =
floor((Z * E + floor(n / 2)) / n) - zp_out, on an unsigned top of scale E and zero point 0
(with force_dtype_int a signed top of zero point -qmin)."""
import torch

from ..dtype import Dtype
from ..quant import tensors as QT
from ..quant.settings import settings_of
from ..registry import OpType, op_register, quant_register
from ._broadcast import check_inputs


@op_register(OpType.ZeroFraction, "1.0", data_dependent_shapes=True)
def zerofraction_forward(self, *args):
    check_inputs(self, (1,))
    x_t, out = self.inputs[0], self.outputs[0]
    x = x_t.betensor
    n = x[0].numel() if x.dim() else 1
    values = x.reshape(x.shape[0] if x.dim() else 1, -1)
    if self.quantized:
        values = values.to(torch.int64) + int(x_t.zerop)
    zeros = (values == 0).sum(dim=1)
    if len(out.ir_shape) == 0 and zeros.numel() == 1:
        zeros = zeros.reshape(())
    if self.quantized:
        scale = int(self.get_param("output_scale"))
        return QT.store_output(self, torch.div(zeros * scale + n // 2, n, rounding_mode="floor") - int(out.zerop),
                               out)
    out.betensor = zeros.to(torch.float32) / n
    return out.betensor


@quant_register(OpType.ZeroFraction, "1.0")
def zerofraction_quantize(self, *args):
    QT.check_quantized_inputs(self)
    bits = settings_of(self).activation_bits
    scale = (1 << bits) - 1
    self.params["output_scale"] = scale
    dtype = Dtype.integer(bits, bool(self.force_dtype_int))
    zp = -dtype.qmin if self.force_dtype_int else 0
    QT.set_quantization(self.outputs[0], float(scale), zp, dtype.qmin, dtype.qmax, bits, dtype.is_signed)
