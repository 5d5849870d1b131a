"""What the layers with weights share (Convolution, DepthwiseConv, FullyConnected,
...): quantizing weights, biases, the rescale and the fused activation, and the
integer forward's end (accumulator + biases -> fused activation -> output).

Quantized form (the tool chain's): weights q_w (with `weights_zp` when
asymmetric), biases int32 with the input zero point folded in
(b_q + zp_x * sum(q_w + zp_w)), the rescale s_y / (s_x * s_w) as multiplier and
shift (per channel: `scale`/`shift` constants with one common shift), then the
fused activation of ops/activation.py.

The tool chain fuses only NONE, RELU, RELU6, CLIP, LEAKYRELU and PRELU into these
layers (any other `with_activation` stops its float forward and its quantize). npuopt's
float forward computes every method; the stage-1 pass split_activation moves the
others into an Activation layer of their own before quantization."""
import torch

from ..quant import tensors as QT
from ..quant.fields import Rescale
from ..quant.settings import settings_of
from .activation import fused_forward, quantize_fused


def quantize_linear(node, groups: int = 1, per_channel_constants: bool = False) -> None:
    """Quantize a layer y = act(x * W + b) with weights [out, ...] (output channel
    first). Grouped layers get one weight scale per group even when the weights are
    quantized per tensor (as the tool chain does); `per_channel_constants` stores a
    per-tensor rescale as per-channel constants too (DepthwiseConv's form)."""
    QT.check_quantized_inputs(node)
    x, out = node.inputs[0], node.outputs[0]
    st = settings_of(node)
    QT.quantize_activation(node, out)
    w_scale = QT.quantize_weights(node, "weights", axis=0, groups=groups)
    w = node.get_constant("weights")
    ratio = out.scale / (x.scale * w_scale) if not isinstance(w_scale, torch.Tensor) else \
        torch.tensor(out.scale, dtype=torch.float32) / (torch.tensor(x.scale, dtype=torch.float32) * w_scale)
    rescale = Rescale.from_ratio(ratio, st.multiplier_bits, unify_shifts=st.unify_shifts_for_aiff)
    if per_channel_constants and not rescale.per_channel:
        n = w.ir_shape[0]
        rescale = Rescale(torch.full((n,), rescale.multiplier), torch.full((n,), rescale.shift),
                          rescale.multiplier_type, rescale.shift_type)
    rescale.write(node)
    w_sums = QT.integer_weights(w).reshape(w.ir_shape[0], -1).sum(dim=1)
    b_scale = (torch.tensor(x.scale, dtype=torch.float32) * w_scale) if isinstance(w_scale, torch.Tensor) \
        else float(torch.tensor(x.scale, dtype=torch.float32) * torch.tensor(w_scale, dtype=torch.float32))
    QT.quantize_biases(node, b_scale, w_sums, int(x.zerop))
    quantize_fused(node, out)


def linear_output(node, acc: torch.Tensor) -> torch.Tensor:
    """acc (exact integers, output channels last) + biases (+ their zero point), then
    the fused activation and the rescale; stores and returns the output."""
    acc = acc.to(torch.float64, copy=True)
    if "biases" in node.constants:
        acc.add_(QT.shifted(node.constants["biases"]).reshape(-1))
    out = node.outputs[0]
    return QT.store_output(node, fused_forward(node, acc, Rescale.read(node), out, owned=True), out)
