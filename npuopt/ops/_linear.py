"""What the layers with weights share (Convolution, DepthwiseConv, FullyConnected,
...): quantizing weights, biases, the rescale and the fused activation, and the
integer forward's end (accumulator + biases -> fused activation -> output).

Quantized form (the tool chain's): weights q_w (with `weights_zp` when
asymmetric), biases of bias_bits with the input zero point folded in
(b_q + zp_x * sum(q_w + zp_w)), the rescale s_y / (s_x * s_w) as multiplier and
shift (per channel: `scale`/`shift` constants with one common shift), then the
fused activation of ops/activation.py.

With `remain_shift` (cfg field, written where the layer's input or weights are wider
than 8 bits) the accumulator is first brought to 32 bits as the chip's AIFF does: with
d = shift - remain_shift > 0, acc -> clamp(round(acc * 2^-d)) and biases -> clamp(floor(
biases * 2^-d)) (int32), added, then rescaled with the multiplier and the shift
remain_shift; with d <= 0 acc is clamped to int32 and the shift kept. The tool chain
takes the first channel's shift for every channel, and a convolution's biases
through float32 first (FullyConnected's in float64).

The tool chain fuses only NONE, RELU, RELU6, CLIP, LEAKYRELU and PRELU into these
layers (any other `with_activation` stops its float forward and its quantize). npuopt's
float forward computes every method; the stage-1 pass split_activation moves the
others into an Activation layer of their own before quantization."""
import torch

from ..config import FP8_FUSED
from ..dtype import Dtype
from ..quant import minifloat, qmath
from ..quant import tensors as QT
from ..quant.fields import FloatScale, Rescale, remain_shift, write_remain_shift
from ..quant.settings import settings_of
from ..registry import OpType
from ..tensor import PyTensor
from .activation import fused_forward, fused_method, quantize_fused


def quantize_linear(node, groups: int = 1, per_channel_constants: bool = False) -> None:
    """Quantize a layer y = act(x * W + b) with weights [out, ...] (output channel
    first). Grouped layers get one weight scale per group even when the weights are
    quantized per tensor (as the tool chain does); `per_channel_constants` stores a
    per-tensor rescale as per-channel constants too (DepthwiseConv's form, and every layer
    shifted ahead)."""
    QT.check_quantized_inputs(node)
    x, out = node.inputs[0], node.outputs[0]
    st = settings_of(node)
    if st.fp8_activations:
        return quantize_fp8_linear(node, groups)
    QT.quantize_activation(node, out)
    w_scale = QT.quantize_weights(node, "weights", axis=0, groups=groups)
    w = node.get_constant("weights")
    ratio = out.scale / (x.scale * w_scale) if not isinstance(w_scale, torch.Tensor) else \
        torch.tensor(out.scale, dtype=torch.float32) / (torch.tensor(x.scale, dtype=torch.float32) * w_scale)
    rescale = Rescale.from_ratio(ratio, st.multiplier_bits, unify_shifts=st.unify_shifts_for_aiff)
    remain = st.cfg_attrs.get("remain_shift", "")
    ahead = remain != "" and shifts_ahead(node)
    # an ahead-shifted layer's rescale as constants: the tool chain's forward replaces the
    # `shift` constant by remain_shift, and its fused RELU/CLIP/... read `shift_value` first
    if (per_channel_constants or ahead) and not rescale.per_channel:
        n = w.ir_shape[0]
        rescale = Rescale(torch.full((n,), rescale.multiplier), torch.full((n,), rescale.shift),
                          rescale.multiplier_type, rescale.shift_type)
    rescale.write(node)
    w_sums = QT.integer_weight_sums(w)
    b_scale = (torch.tensor(x.scale, dtype=torch.float32) * w_scale) if isinstance(w_scale, torch.Tensor) \
        else float(torch.tensor(x.scale, dtype=torch.float32) * torch.tensor(w_scale, dtype=torch.float32))
    if int(x.zerop) and "biases" not in node.constants:  # the input zero point's fold is carried by biases
        node.constants["biases"] = PyTensor("biases", torch.zeros(w.ir_shape[0]), Dtype.FP32, (w.ir_shape[0],))
    QT.quantize_biases(node, b_scale, w_sums, int(x.zerop))
    quantize_fused(node, out)
    write_remain_shift(node, remain if ahead else None)


def quantize_fp8_linear(node, groups: int = 1) -> None:
    """The tool chain's fp8 layer: output in the layer's fp8 activation_type, weights in its
    weight_type (fp8, or integers of weight_bits), float32 biases b * fl32(s_x * s_w), and
    one float32 rescale s_y / (s_x * s_w) per tensor or channel (FloatScale)."""
    x, out = node.inputs[0], node.outputs[0]
    if fused_method(node) not in FP8_FUSED or not x.dtype.is_minifloat:
        what = f"fused {fused_method(node)}" if x.dtype.is_minifloat else f"a {x.dtype.value} input"
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): an fp8 layer with {what} is not supported "
                             f"(fp8 inputs, fused {' or '.join(FP8_FUSED)})")
    QT.quantize_activation(node, out)
    w_scale = QT.quantize_weights(node, "weights", axis=0, groups=groups)
    f32 = torch.float32
    b_scale = torch.tensor(x.scale, dtype=f32) * torch.as_tensor(w_scale, dtype=f32)
    FloatScale(torch.tensor(out.scale, dtype=f32) / b_scale).write(node)
    if "biases" in node.constants:
        c = node.constants["biases"]
        b = c.betensor.detach().to(f32).cpu()
        c.betensor = (b * b_scale).to(c.betensor.device)
        c.dtype, c.scale, c.zerop = Dtype.FP32, (b_scale if b_scale.dim() else float(b_scale)), 0
    write_remain_shift(node, None)


# the layers the tool chain shifts ahead (Convolution3D's, too, sums in float32), and the
# float type their biases pass through on the way
AHEAD_SHIFT_BIASES = {OpType.Convolution: torch.float32, OpType.DepthwiseConv: torch.float32,
                      OpType.Convolution3D: torch.float32, OpType.FullyConnected: torch.float64}


def shifts_ahead(node) -> bool:
    """Whether the ahead shift applies: one of those layers, its input or weights wider than 8 bits."""
    return node.type in AHEAD_SHIFT_BIASES and (node.inputs[0].dtype.bits > 8 or
                                                node.get_constant("weights").dtype.bits > 8)


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
    if out.dtype.is_minifloat:
        return fp8_output_stage(node, biases)
    rescale = Rescale.read(node)
    prelu_slopes = node.get_constant("negative_slope").betensor.numel() if fused_method(node) == "PRELU" else None
    remain = remain_shift(node) if shifts_ahead(node) else None
    ahead = 0
    if remain is not None:
        origin = int(torch.as_tensor(rescale.shift).reshape(-1)[0])
        ahead = origin - remain
        if biases is not None:
            biases = biases.to(AHEAD_SHIFT_BIASES[node.type]).to(torch.float64)
            if ahead > 0:
                biases = torch.floor(biases * 2.0 ** -ahead).clamp_(QT.INT32_MIN, QT.INT32_MAX)
        rescale = Rescale(rescale.multiplier, min(origin, remain), rescale.multiplier_type, rescale.shift_type)

    def stage(y):  # y: float64 accumulators it may use in place
        if remain is not None:  # to 32 bits ahead of the rescale
            y = qmath.requantize(y, 1, ahead, 0, QT.INT32_MIN, QT.INT32_MAX, out=y) if ahead > 0 else \
                y.clamp_(QT.INT32_MIN, QT.INT32_MAX)
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


def fp8_output_stage(node, biases):
    """An fp8 layer's output stage: acc (exact float64 sums) + float32 biases, the fused
    RELU, times the float32 rescale, rounded to the output's format (quant/minifloat.py)."""
    scale, fmt = FloatScale.read(node).scale, node.outputs[0].dtype.value
    relu = fused_method(node) == "RELU"

    def run(acc: torch.Tensor) -> torch.Tensor:
        y = acc.to(torch.float64) + (biases.to(acc.device) if biases is not None else 0.0)
        return minifloat.requantize(y.clamp_(min=0.0) if relu else y, scale, fmt)
    return run
