"""Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization", sec. 4.1):
where layer L1's output feeds only layer L2 through an activation f with
f(s x) = s f(x) for s > 0 (NONE, RELU, LEAKYRELU, PRELU), dividing L1's output
channel i (its weights and bias) by s_i and multiplying L2's input channel i by s_i
keeps the float function. s_i = sqrt(r1_i / r2_i), r the channel's largest |weight|,
gives both channels the range sqrt(r1_i r2_i): a per-tensor grid, whose step the
largest channel sets, then rounds the small channels less coarsely. Chains
(L1 -> L2 -> L3) are swept until the scales settle.

Data-free and exact (to float rounding). Pairs where neither layer is quantized per
tensor are left alone: per-channel grids do not depend on the channels' ranges.
Clipping activations (RELU6, CLIP) are left alone too: scaling a channel would move
its clip bound, and the IR has one bound for all channels. The paper replaced ReLU6
by ReLU; that changes the model (EfficientNet-Lite0's float top-1: 0.876 -> 0.624).
"""
import math
from typing import List, Tuple

import torch

from ...errors import ConfigError
from ...logger import OPT_INFO
from ..settings import settings_of
from . import global_calibration
from ._layers import has_tuned_weights

HOMOGENEOUS = ("NONE", "RELU", "LEAKYRELU", "PRELU")
SWEEPS = 100        # at most, over a graph's pairs
SETTLED = 1e-4      # a sweep whose scales all lie within 1 +- SETTLED ends the sweeps


def per_tensor(node) -> bool:
    """Whether the layer's weights are quantized on one grid for all output channels."""
    st = settings_of(node)
    return not st.trigger_float_op and node.get_param("group", 1) == 1 \
        and not st.quantize_method_for_weight.per_channel


def pairs(ctx) -> List[Tuple[object, object]]:
    """(L1, L2) in graph order: L1's only output feeds L2 alone, as its data input, through
    a positively homogeneous activation; the two in scope, one of them per tensor."""
    readers = {}
    for node in ctx.graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, []).append(node)
    outputs = {t.name for t in ctx.graph.output_tensors}
    found = []
    for l1 in ctx.graph.nodes:
        if not has_tuned_weights(l1) or len(l1.outputs) != 1 \
                or str(l1.params.get("with_activation", "NONE")).upper() not in HOMOGENEOUS:
            continue
        t = l1.outputs[0]
        users = readers.get(t.name, [])
        if t.name in outputs or len(users) != 1:
            continue
        l2 = users[0]
        if has_tuned_weights(l2) and len(l2.inputs) == 1 \
                and l2.get_constant("weights").betensor.dim() == l1.get_constant("weights").betensor.dim() \
                and channels_in(l2) == l1.get_constant("weights").betensor.shape[0] \
                and ctx.in_scope(l1) and ctx.in_scope(l2) and (per_tensor(l1) or per_tensor(l2)):
            found.append((l1, l2))
    return found


def channels_in(node) -> int:
    w = node.get_constant("weights").betensor
    return w.shape[-1] * node.get_param("group", 1)


def input_channel_map(node) -> torch.Tensor:
    """For weights [out, ..., in/group]: the input channel each (row, last index) reads, [out, in/group]."""
    w = node.get_constant("weights").betensor
    groups = node.get_param("group", 1)
    per_group_out, per_group_in = w.shape[0] // groups, w.shape[-1]
    group = torch.arange(w.shape[0]) // per_group_out
    return group.reshape(-1, 1) * per_group_in + torch.arange(per_group_in).reshape(1, -1)


def input_ranges(node, index: torch.Tensor) -> torch.Tensor:
    """Largest |weight| that reads each input channel."""
    w = node.get_constant("weights").betensor.detach().to(torch.float64).cpu()
    per_entry = w.abs().reshape(w.shape[0], -1, w.shape[-1]).amax(dim=1)      # [out, in/group]
    return torch.zeros(channels_in(node), dtype=torch.float64).scatter_reduce(
        0, index.reshape(-1), per_entry.reshape(-1), "amax")


def equalize(l1, l2) -> float:
    """Scale one pair; returns the largest |log s_i|."""
    w1 = l1.get_constant("weights")
    r1 = w1.betensor.detach().to(torch.float64).cpu().abs().reshape(w1.betensor.shape[0], -1).amax(dim=1)
    index = input_channel_map(l2)
    r2 = input_ranges(l2, index)
    s = torch.where((r1 > 0) & (r2 > 0), torch.sqrt(r1 / r2.clamp(min=1e-300)), torch.ones_like(r1))
    shape = [-1] + [1] * (w1.betensor.dim() - 1)
    w1.betensor = (w1.betensor.to(torch.float64) / s.reshape(shape).to(w1.betensor.device)).to(w1.betensor.dtype)
    if "biases" in l1.constants:
        b = l1.constants["biases"]
        b.betensor = (b.betensor.to(torch.float64) / s.reshape(b.betensor.shape).to(b.betensor.device)) \
            .to(b.betensor.dtype)
    w2 = l2.get_constant("weights")
    along = s[index].reshape([index.shape[0]] + [1] * (w2.betensor.dim() - 2) + [index.shape[1]])
    w2.betensor = (w2.betensor.to(torch.float64) * along.to(w2.betensor.device)).to(w2.betensor.dtype)
    return float(s.log().abs().max())


@global_calibration("equalization", "before_calibration")
def equalization(ctx, params) -> None:
    """Cross-layer equalization of the chains whose activations scale exactly."""
    if params:
        raise ConfigError("field 'global_calibration': equalization takes no params")
    found = pairs(ctx)
    sweeps = 0
    while found and sweeps < SWEEPS:
        sweeps += 1
        if max(equalize(l1, l2) for l1, l2 in found) < math.log1p(SETTLED):
            break
    OPT_INFO(f"equalization: {len(found)} layer pairs equalized in {sweeps} sweeps")
