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
pre-norm blocks of ViT-style models and LLMs. So is, beyond OPT, an LLM's SiLU-gated
MLP: the up projection's output only multiplies the gate's (x * silu(g)) before the
down projection reads it, so the up projection's weight rows are divided by s and the
down projection's columns multiplied (_smoothing.smoothable); that product's range is
the widest of a decoder's FullyConnected inputs (SmolLM2-135M: about 3,000). In a post-norm block the norm's output
also feeds the residual Add; OPT's smooth_quant_zy scales such a norm anyway, which
changes the residual, and npuopt leaves it alone (the float function is kept).

OPT's params: smooth_quant_zy[default_alpha, auto_tune, alpha_min, alpha_max, nsteps,
insert_norm_if_none]. With auto_tune, each norm gets the alpha of nsteps in
[alpha_min, alpha_max] whose FullyConnected outputs are nearest the float ones on
SAMPLE_ROWS rows of the norm's output, with the layers' weight grids and an
activation grid over those rows' range (OPT measures the SQNR of a quantized copy of
the subgraph; the least squared error is the same choice). With insert_norm_if_none,
each FullyConnected layer in scope that no norm smooths first gets an identity
BatchNorm of its own before it (a layer more in the quantized IR: a rescale per
channel), which is then smoothed; unlike OPT, also those behind a norm left alone."""
import torch

from ...errors import ConfigError
from ...logger import OPT_INFO
from ...registry import OpType
from . import global_calibration
from ._params import read_params
from ._smoothing import NORMS, SAMPLE_ROWS, ChannelStatistics, check_params, pairs, quantized_error, smooth, usable

PARAMS = [  # name, default, minimum, integer
    ("default_alpha", 0.5, 0, False),  # share of the activation range moved into the weights
    ("auto_tune", 0, 0, True),
    ("alpha_min", 0.0, 0, False),
    ("alpha_max", 1.0, 0, False),
    ("nsteps", 10, 1, True),
    ("insert_norm_if_none", 0, 0, True),
]


def scales(fcs, x_max: torch.Tensor, alpha: float) -> torch.Tensor:
    """s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) over the FullyConnected layers' columns j
    (1 where that is not a positive number)."""
    w_max = torch.stack([column_absmax(fc.get_constant("weights").betensor.detach(), x_max.numel())
                         for fc in fcs]).amax(0)
    return usable(x_max.pow(alpha) / w_max.pow(1 - alpha))


def column_absmax(w: torch.Tensor, columns: int) -> torch.Tensor:
    """max |w_ij| over the rows i (float64), from the largest and the smallest values: no copy of w."""
    w = w.reshape(-1, columns)
    return torch.maximum(w.amax(0), -w.amin(0)).double().cpu()


@global_calibration("smooth_quant_zy", "before_calibration")
def smooth_quant_zy(ctx, params) -> None:
    """SmoothQuant: move input-channel outliers of FullyConnected layers into their weights, through the norm before them."""
    p = read_params("smooth_quant_zy", params, PARAMS)
    check_params("smooth_quant_zy", p, "default_alpha")
    if p["auto_tune"] and not p["alpha_min"] <= p["alpha_max"] <= 1:
        raise ConfigError(f"field 'global_calibration': smooth_quant_zy's alpha_min and alpha_max must satisfy "
                          f"0 <= alpha_min <= alpha_max <= 1, got {p['alpha_min']:g} and {p['alpha_max']:g}")
    found, left = pairs(ctx, NORMS, p["insert_norm_if_none"], gated=(OpType.FullyConnected,))
    alphas = torch.linspace(p["alpha_min"], p["alpha_max"], p["nsteps"]).tolist() if p["auto_tune"] \
        else [p["default_alpha"]]
    stats = ChannelStatistics(ctx, found, "smooth_quant_zy: channel ranges",
                              rows=SAMPLE_ROWS if len(alphas) > 1 else 0) if found else None
    chosen = []
    for name, fcs in found.items():
        norm = ctx.graph.node(name)
        candidates = [scales(fcs, stats.maxima[name], a) for a in alphas]
        best = min(range(len(alphas)), key=lambda i: quantized_error(norm, fcs, stats.rows[name], candidates[i])) \
            if len(alphas) > 1 else 0
        smooth(norm, fcs, candidates[best])
        chosen.append(f"{alphas[best]:.3g}")
    said = f"; {len(left)} left alone, their output read by other layers too (e.g. '{left[0]}')" if left else ""
    OPT_INFO(f"smooth_quant_zy: {len(found)} layers smoothed into {sum(len(f) for f in found.values())} "
             f"FullyConnected layers (alpha {', '.join(chosen) or p['default_alpha']}){said}")
