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
from .activation import fused_forward, fused_method, quantize_fused


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


# float64 elements of one tile of the output stage: 4 MiB, within the CPU's L3 cache (on the
# 2-core machine 2^19 elements ran fastest: 2^17 took 1.5 times as long, the whole tensor 3 times)
TILE_ELEMENTS = 1 << 19


def linear_output(node, acc: torch.Tensor) -> torch.Tensor:
    """acc (exact integers, output channels last) + biases (+ their zero point), then
    the fused activation and the rescale; stores and returns the output."""
    return QT.store_output(node, output_stage(node)(acc), node.outputs[0])


def output_stage(node):
    """The output stage of `node` as a function from accumulators (exact integers,
    output channels last) to the output's integers in its dtype, for a layer that
    computes its accumulators in parts (ops/convolution.py: by samples).

    On CPU it runs over tiles of whole rows of channels that stay in cache through its
    half-dozen elementwise passes; each element gets the same operations as over the
    whole tensor. PRELU with slopes over more than the channels runs whole."""
    out = node.outputs[0]
    biases = QT.shifted(node.constants["biases"]).reshape(-1) if "biases" in node.constants else None
    rescale = Rescale.read(node)
    prelu_slopes = node.get_constant("negative_slope").betensor.numel() if fused_method(node) == "PRELU" else None

    def stage(y):  # y: float64 accumulators it may use in place
        if biases is not None:
            y.add_(biases)
        return fused_forward(node, y, rescale, out, owned=True)

    def run(acc: torch.Tensor) -> torch.Tensor:
        channels = acc.shape[-1] if acc.dim() else 1
        if acc.device.type != "cpu" or acc.numel() <= TILE_ELEMENTS or prelu_slopes not in (None, channels):
            return stage(acc.to(torch.float64, copy=True)).to(out.dtype.torch_dtype)
        rows = acc.reshape(-1, channels)
        result = torch.empty(rows.shape, dtype=out.dtype.torch_dtype)
        step = max(1, TILE_ELEMENTS // channels)
        tile = torch.empty((min(step, rows.shape[0]), channels), dtype=torch.float64)
        for start in range(0, rows.shape[0], step):
            part = tile[: min(step, rows.shape[0] - start)]
            part.copy_(rows[start: start + step])
            result[start: start + step].copy_(stage(part))
        return result.reshape(acc.shape)
    return run
