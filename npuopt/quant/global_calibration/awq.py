"""AWQ (Lin et al., "AWQ: Activation-aware Weight Quantization for LLM Compression and
Acceleration", 2023), as the Compass Optimizer's awq_zy: the weight columns that meet
large inputs matter most, so FullyConnected column j is multiplied by

    sigma_j = mean|X_j|^alpha / sqrt(max_j mean|X_j|^alpha * min_j mean|X_j|^alpha)

and the layer before divides its channel j by sigma_j (_smoothing: a norm layer, or a
FullyConnected layer through NONE/RELU/LEAKYRELU/PRELU), which keeps the float
function. alpha is searched over 0, 1/n_grid, ..., 1 (0: no change) for the least
error of the FullyConnected outputs with their weights and input on their grids, on
the first rows of the producer's output. Then, where max_shrink > 0, the weight
grids' ranges are shrunk by the ratio 1, 1 - 1/n_grid, ... (above 1 - max_shrink)
with the least error, as a planned weight range (tensors.plan_weight_range).

OPT's params: awq_zy[n_grid, max_shrink, insert_norm_if_none]. With
insert_norm_if_none, each FullyConnected layer in scope without a producer to balance
first gets an identity BatchNorm of its own before it (as for smooth_quant_zy). Where
npuopt departs from OPT: mean|X_j| is over the whole calibration set (OPT: its first
batch); a producer whose output other layers also read is left alone (OPT scales it
anyway, which changes what those layers compute); with insert_norm_if_none its
FullyConnected readers get their own BatchNorm instead."""
import torch

from ...logger import OPT_INFO
from ...registry import OpType
from .. import tensors as QT
from . import global_calibration
from ._params import read_params
from ._smoothing import NORMS, ChannelStatistics, check_params, pairs, quantized_error, smooth, usable

PARAMS = [  # name, default, minimum, integer
    ("n_grid", 20, 1, True),            # alphas tried: 0, 1/n_grid, ..., 1
    ("max_shrink", 0.0, 0.0, False),    # weight ranges tried down to (1 - max_shrink) times the calibrated
    ("insert_norm_if_none", 0, 0, True),
]
PRODUCERS = NORMS + (OpType.FullyConnected,)


def sigma(x_mean: torch.Tensor, alpha: float) -> torch.Tensor:
    s = x_mean.pow(alpha).clamp(min=1e-4)
    return usable(s / (s.max() * s.min()).sqrt())


def shrink_weight_ranges(producer, fcs, rows: torch.Tensor, n_grid: int, max_shrink: float) -> float:
    """Plan each FullyConnected layer's weight range times the ratio of least error
    (1: the calibrated range, no plan); the ratio."""
    ranges = [QT.weight_range(fc, "weights") for fc in fcs]
    ones = torch.ones(rows.shape[-1], dtype=torch.float64)

    def plan(ratio):
        for fc, (lo, hi) in zip(fcs, ranges):
            QT.plan_weight_range(fc, "weights", *((lo * ratio, hi * ratio) if ratio != 1 else (None, None)))

    def error(ratio):
        plan(ratio)
        return quantized_error(producer, fcs, rows, ones)

    best = min([1 - r / n_grid for r in range(int(max_shrink * n_grid))], key=error)
    plan(best)
    return best


@global_calibration("awq_zy", "before_calibration")
def awq_zy(ctx, params) -> None:
    """AWQ: scale FullyConnected weight columns by their inputs' mean magnitude, searched per layer."""
    p = read_params("awq_zy", params, PARAMS)
    check_params("awq_zy", p, "max_shrink")
    found, left = pairs(ctx, PRODUCERS, p["insert_norm_if_none"])
    stats = ChannelStatistics(ctx, found, "awq_zy: channel magnitudes") if found else None
    alphas = [r / p["n_grid"] for r in range(p["n_grid"] + 1)]
    chosen = []
    for name, fcs in ctx.progress(list(reversed(list(found.items()))), "awq_zy"):
        producer, rows = ctx.graph.node(name), stats.rows[name]
        candidates = [sigma(stats.means[name], a) for a in alphas]
        best = min(range(len(alphas)), key=lambda i: quantized_error(producer, fcs, rows, candidates[i]))
        smooth(producer, fcs, candidates[best])
        said = f"alpha {alphas[best]:.3g}"
        if int(p["max_shrink"] * p["n_grid"]) > 0:
            ratio = shrink_weight_ranges(producer, fcs, rows / candidates[best], p["n_grid"], p["max_shrink"])
            said += f" shrink {ratio:.3g}"
        chosen.append(f"'{name}' {said}")
    skipped = f"; {len(left)} left alone, their output read by other layers too (e.g. '{left[0]}')" if left else ""
    OPT_INFO(f"awq_zy: {len(found)} layers balanced into {sum(len(f) for f in found.values())} FullyConnected "
             f"layers ({', '.join(chosen) or 'none'}){skipped}")
