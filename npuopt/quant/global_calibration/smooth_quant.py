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
insert_norm_if_none]. With auto_tune, each norm gets the alpha of nsteps in
[alpha_min, alpha_max] whose FullyConnected outputs are nearest the float ones on
SAMPLE_ROWS rows of the norm's output, with the layers' weight grids and an
activation grid over those rows' range (OPT measures the SQNR of a quantized copy of
the subgraph; the least squared error is the same choice). insert_norm_if_none (OPT:
insert a BatchNorm before a FullyConnected without a norm) is not implemented and
stops with one line."""
from typing import Dict, List, Tuple

import torch

from ...errors import ConfigError
from ...logger import OPT_INFO
from ...registry import OpType
from .. import qmath
from .. import tensors as QT
from ..settings import QuantMethod, settings_of
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
SAMPLE_ROWS = 4096  # rows of a norm's output auto_tune measures each alpha on (the first ones)
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


def channel_statistics(ctx, names) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
    """(max |X_j| of each named norm's output over the calibration set, float64
    [channels]; its first SAMPLE_ROWS rows, float32 [rows, channels])."""
    nodes = {ctx.graph.node(n).outputs[0].name: n for n in names}
    maxima, rows = {}, {}

    def gather(node):
        for t in node.outputs:
            if t.name in nodes:
                name, x = nodes[t.name], t.betensor.detach().reshape(-1, t.betensor.shape[-1]).float().cpu()
                m = x.abs().amax(0).double()
                maxima[name] = torch.maximum(maxima.get(name, m), m)
                kept = rows.get(name, x[:0])
                rows[name] = torch.cat([kept, x[:SAMPLE_ROWS - len(kept)]])

    with torch.no_grad(), one_thread():
        for batch in ctx.progress(ctx.batches(), "smooth_quant_zy: channel ranges", unit="batch"):
            ctx.graph.forward([x.to(ctx.device) for x in batch], after_node=gather)
    return maxima, rows


def scales(fcs, x_max: torch.Tensor, alpha: float) -> torch.Tensor:
    """s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) over the FullyConnected layers' columns j
    (1 where that is not a positive number)."""
    w_max = torch.stack([fc.get_constant("weights").betensor.detach().abs().double().cpu()
                         .reshape(-1, x_max.numel()).amax(0) for fc in fcs]).amax(0)
    s = x_max.pow(alpha) / w_max.pow(1 - alpha)
    return torch.where(torch.isfinite(s) & (s > 0), s, torch.ones_like(s))


def quantized_error(norm, fcs, x: torch.Tensor, s: torch.Tensor) -> float:
    """Squared error of the FullyConnected outputs on rows x when X / s and W s are
    rounded to their grids (the norm's activation settings over the rows' range; each
    layer's weight settings), against the float outputs."""
    st = settings_of(norm)
    method = QuantMethod.parse(st.quantize_method_for_activation)
    xs = x.double() / s
    lo, hi = min(float(xs.min()), 0.0), max(float(xs.max()), 0.0)
    scale, zp, qmin, qmax = qmath.linear_quant_params(lo, hi, st.activation_bits, method.symmetric,
                                                      method.full_range, lo < 0)
    xq = qmath.dequantize(qmath.quantize(xs.float(), scale, zp, qmin, qmax), scale, zp).double()
    error = 0.0
    for fc in fcs:
        c = fc.get_constant("weights")
        w = c.betensor.detach().double().cpu()
        kept, c.betensor = c.betensor, (w * s).to(c.betensor.dtype)
        try:
            grid = QT.weight_grid(fc, "weights")
            wq = grid.dequantize(grid.quantize(c.betensor.detach().float().cpu())).double()
        finally:
            c.betensor = kept
        error += float(((xq @ wq.T - x.double() @ w.T) ** 2).sum())
    return error


def smooth(norm, fcs, s: torch.Tensor) -> None:
    """Divide the norm's channel j by s_j and multiply the FullyConnected columns j by it."""
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
    if p["insert_norm_if_none"]:
        raise ConfigError("field 'global_calibration': smooth_quant_zy's insert_norm_if_none is not implemented in "
                          "npuopt (leave it 0)")
    if p["auto_tune"] and not p["alpha_min"] <= p["alpha_max"] <= 1:
        raise ConfigError(f"field 'global_calibration': smooth_quant_zy's alpha_min and alpha_max must satisfy "
                          f"0 <= alpha_min <= alpha_max <= 1, got {p['alpha_min']:g} and {p['alpha_max']:g}")
    found, left = smoothable(ctx)
    maxima, rows = channel_statistics(ctx, list(found)) if found else ({}, {})
    alphas = torch.linspace(p["alpha_min"], p["alpha_max"], p["nsteps"]).tolist() if p["auto_tune"] \
        else [p["default_alpha"]]
    chosen = []
    for name, fcs in found.items():
        norm = ctx.graph.node(name)
        candidates = [scales(fcs, maxima[name], a) for a in alphas]
        with one_thread():  # the choice must not follow the last bits of a threaded sum
            best = min(range(len(alphas)), key=lambda i: quantized_error(norm, fcs, rows[name], candidates[i])) \
                if len(alphas) > 1 else 0
        smooth(norm, fcs, candidates[best])
        chosen.append(f"{alphas[best]:.3g}")
    said = f"; {len(left)} left alone, their output read by other layers too (e.g. '{left[0]}')" if left else ""
    OPT_INFO(f"smooth_quant_zy: {len(found)} norm layers smoothed into {sum(len(f) for f in found.values())} "
             f"FullyConnected layers (alpha {', '.join(chosen) or p['default_alpha']}){said}")
