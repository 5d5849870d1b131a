"""SmoothQuant (Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training
Quantization for Large Language Models", 2022): in transformers a few input channels
of a FullyConnected layer are far larger than the rest, and a per-tensor activation
grid sized for them rounds the others to a few steps. Dividing input channel j by

    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)

and multiplying the weights' column j by s_j keeps the float function and moves part
of the range into the weights, which have a grid per output channel (or at least one
of their own). The division is folded into the norm layer that computes X (LayerNorm,
RMSNorm, BatchNorm, GroupNorm, InstanceNorm: per-channel `weights` and `biases` on
the last axis), so the graph keeps its layers; max|X_j| comes from one float pass
over the calibration data (on one thread, as every method's decisions).

A norm is smoothed when everything that reads its output (through Reshape, and
Transpose that keeps the last axis last) is a FullyConnected layer in scope: the
pre-norm blocks of ViT-style models and LLMs. In a post-norm block the norm's output
also feeds the residual Add; OPT's smooth_quant_zy scales such a norm anyway, which
changes the residual, and npuopt leaves it alone (the float function is kept).

OPT's params: smooth_quant_zy[default_alpha, auto_tune, alpha_min, alpha_max, nsteps,
insert_norm_if_none]; npuopt runs default_alpha; auto_tune (OPT: search alpha in
[alpha_min, alpha_max] for the best quantized SQNR) and insert_norm_if_none (OPT:
insert a BatchNorm before a FullyConnected without a norm) are not implemented and
stop with one line."""
from typing import Dict, List, Tuple

import torch

from ...errors import ConfigError
from ...logger import OPT_INFO
from ...registry import OpType
from . import global_calibration, one_thread
from ._layers import read_params

PARAMS = [  # name, default, minimum, integer
    ("default_alpha", 0.5, 0, False),  # share of the activation range moved into the weights
    ("auto_tune", 0, 0, True),
    ("alpha_min", 0.0, 0, False),
    ("alpha_max", 1.0, 0, False),
    ("nsteps", 10, 1, True),
    ("insert_norm_if_none", 0, 0, True),
]
NORMS = (OpType.LayerNorm, OpType.RMSNorm, OpType.BatchNorm, OpType.GroupNorm, OpType.InstanceNorm)


def smoothable(ctx) -> Tuple[Dict[str, List[object]], List[str]]:
    """(norm layer name -> the FullyConnected layers that read its output, for the norms
    in scope whose output only such layers read (through last-axis-keeping reshapes);
    the norms in scope that feed FullyConnected layers and something else too)."""
    readers = {}
    for node in ctx.graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, []).append(node)
    outputs = {t.name for t in ctx.graph.output_tensors}
    found, left = {}, []
    for norm in ctx.graph.nodes:
        if norm.type not in NORMS or "weights" not in norm.constants or not ctx.in_scope(norm):
            continue
        channels = norm.outputs[0].ir_shape[-1]
        fcs, tensors, ok = [], [norm.outputs[0]], True
        while tensors:
            t = tensors.pop()
            ok = ok and t.name not in outputs and bool(readers.get(t.name))
            for reader in readers.get(t.name, []):
                if reader.type == OpType.FullyConnected and reader.inputs[0] is t and ctx.in_scope(reader) \
                        and reader.get_constant("weights").betensor.shape[-1] == channels:
                    fcs.append(reader)
                elif _keeps_last_axis(reader, channels):
                    tensors.append(reader.outputs[0])
                else:
                    ok = False
        if ok and fcs and _per_last_axis(norm, channels):
            found[norm.name] = fcs
        elif fcs:
            left.append(norm.name)
    return found, left


def _per_last_axis(norm, channels: int) -> bool:
    """Whether the norm's weights and biases hold one value per channel of the last axis."""
    axis = norm.get_param("axis", -1) if norm.type == OpType.BatchNorm else -1
    rank = len(norm.outputs[0].ir_shape)
    return int(axis) % rank == rank - 1 and all(
        norm.constants[k].betensor.numel() == channels for k in ("weights", "biases") if k in norm.constants)


def _keeps_last_axis(node, channels: int) -> bool:
    if node.type == OpType.Reshape:
        return node.outputs[0].ir_shape[-1] == channels
    if node.type == OpType.Transpose:
        perm = list(node.get_param("perm"))
        return perm[-1] == len(perm) - 1
    return False


def channel_maxima(ctx, names) -> Dict[str, torch.Tensor]:
    """max |X_j| of each named norm's output over the calibration set, float64 [channels]."""
    nodes = {ctx.graph.node(n).outputs[0].name: n for n in names}
    maxima = {}

    def gather(node):
        for t in node.outputs:
            if t.name in nodes:
                m = t.betensor.detach().abs().reshape(-1, t.betensor.shape[-1]).amax(0).double().cpu()
                maxima[nodes[t.name]] = torch.maximum(maxima.get(nodes[t.name], m), m)

    with torch.no_grad(), one_thread():
        for batch in ctx.progress(ctx.batches(), "smooth_quant_zy: channel ranges", unit="batch"):
            ctx.graph.forward([x.to(ctx.device) for x in batch], after_node=gather)
    return maxima


def smooth(norm, fcs, x_max: torch.Tensor, alpha: float) -> None:
    """Divide the norm's channel j by s_j and multiply the FullyConnected columns j by it."""
    w_max = torch.stack([fc.get_constant("weights").betensor.detach().abs().double().cpu()
                         .reshape(-1, x_max.numel()).amax(0) for fc in fcs]).amax(0)
    s = x_max.pow(alpha) / w_max.pow(1 - alpha)
    s = torch.where(torch.isfinite(s) & (s > 0), s, torch.ones_like(s))
    for key in ("weights", "biases"):
        if key in norm.constants:
            c = norm.constants[key]
            c.betensor = (c.betensor.double() / s.reshape(c.betensor.shape).to(c.betensor.device)).to(c.betensor.dtype)
    for fc in fcs:
        c = fc.get_constant("weights")
        c.betensor = (c.betensor.double() * s.to(c.betensor.device)).to(c.betensor.dtype)


@global_calibration("smooth_quant_zy", "before_calibration")
def smooth_quant_zy(ctx, params) -> None:
    """SmoothQuant: move input-channel outliers of FullyConnected layers into their weights, through the norm before them."""
    p = read_params("smooth_quant_zy", params, PARAMS)
    if p["default_alpha"] > 1:
        raise ConfigError(f"field 'global_calibration': smooth_quant_zy's default_alpha must lie in [0, 1], "
                          f"got {p['default_alpha']:g}")
    for name in ("auto_tune", "insert_norm_if_none"):
        if p[name]:
            raise ConfigError(f"field 'global_calibration': smooth_quant_zy's {name} is not implemented in npuopt "
                              f"(leave it 0; npuopt runs default_alpha)")
    found, left = smoothable(ctx)
    if found and not ctx.has_data:
        raise ConfigError("field 'global_calibration': smooth_quant_zy needs calibration_data (it measures the "
                          "norms' output channels)")
    maxima = channel_maxima(ctx, list(found)) if found else {}
    for name, fcs in found.items():
        smooth(ctx.graph.node(name), fcs, maxima[name], p["default_alpha"])
    said = f"; {len(left)} left alone, their output read by other layers too (e.g. '{left[0]}')" if left else ""
    OPT_INFO(f"smooth_quant_zy: {len(found)} norm layers smoothed into {sum(len(f) for f in found.values())} "
             f"FullyConnected layers (alpha {p['default_alpha']:g}){said}")
