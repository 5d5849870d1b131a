"""The range a layer's float weights are quantized over (tensors.weight_grid): a global
calibration method's planned range, else the calibrated one per tensor, per group of
channels, per channel or per block, with 0 always inside."""
import torch

from ..errors import QuantizeError
from . import formats
from .settings import settings_of
from .statistics import Statistics
from .strategies import calibrate_range
from .weight_plans import planned


def weight_range(node, key: str = "weights", axis: int = 0, groups: int = 1) -> tuple:
    """(lo, hi) of float constant `key` that its grid covers: a global calibration
    method's planned range, or the calibrated one: per channel along `axis`, per group
    of channels (per-tensor settings on a grouped layer, as the tool chain does), per
    block (per_block_* methods: _block_range), or per tensor (numbers); 0 always inside."""
    planned_range = planned(node, "planned_ranges", key)
    if planned_range is not None:
        return planned_range
    st = settings_of(node)
    w = node.get_constant(key).betensor.detach().to(torch.float32).cpu()
    method = st.quantize_method_for_weight
    if method.per_block:
        return _block_range(node, w)
    per_group = not method.per_channel and groups > 1 and not st.weight_only  # (groups share a rescale)
    stats = Statistics.of_constant(w, st.histc_bins, axis if method.per_channel or per_group else None)
    lo, hi = calibrate_range(stats, st.calibration_strategy_for_weight, st.weight_bits, method.symmetric)
    if per_group:
        size = w.shape[axis] // groups
        lo = lo.reshape(groups, size).min(dim=1).values.repeat_interleave(size)
        hi = hi.reshape(groups, size).max(dim=1).values.repeat_interleave(size)
    if isinstance(lo, torch.Tensor):
        return _zero_channels_typical(lo.clamp(max=0.0), hi.clamp(min=0.0))
    return min(lo, 0.0), max(hi, 0.0)


def _block_range(node, w: torch.Tensor) -> tuple:
    """Per-block (lo, hi) [channels * blocks], each block's statistics under the weight
    strategy, as the tool chain calibrates a row of its blocks; only a layer kept in
    float takes them (integer layers rescale one accumulator per channel)."""
    st = settings_of(node)
    if not st.weight_only:
        raise QuantizeError(f"layer '{node.name}' ({node.type}): {st.quantize_method_for_weight} weights need "
                            f"weight-only quantization (trigger_float_op = float16_act_int_wht, or bfloat16_/"
                            f"float32_); a layer computed in integers takes one scale per channel")
    full, tail = formats.blocks(w, st.weight_block_size)
    parts = []
    for part in (full, tail):
        if part is not None and part.numel():
            stats = Statistics.of_constant(part, st.histc_bins, 0)
            lo, hi = calibrate_range(stats, st.calibration_strategy_for_weight, st.weight_bits,
                                     st.quantize_method_for_weight.symmetric)
            parts.append((lo.reshape(w.shape[0], -1), hi.reshape(w.shape[0], -1)))
    lo, hi = (torch.cat(side, dim=1).reshape(-1) for side in zip(*parts))
    return lo.clamp(max=0.0), hi.clamp(min=0.0)


def _zero_channels_typical(lo: torch.Tensor, hi: torch.Tensor) -> tuple:
    """Channels whose weights are all zero take the median range of the others. Any
    grid holds their zeros; the tool chain's scale 1 for an empty range gives such a
    channel a rescale ratio far above the others', and under the one shift of
    unify_shifts_for_aiff the others' multipliers then round to 0 (16-bit EfficientNet-Lite0:
    19 of a depthwise layer's 32 channels constant, top-1 0.000)."""
    empty = (lo == 0) & (hi == 0)
    if bool(empty.any()) and not bool(empty.all()):
        lo, hi = lo.clone(), hi.clone()
        lo[empty], hi[empty] = lo[~empty].median(), hi[~empty].median()
    return lo, hi
