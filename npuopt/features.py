"""The Compass Optimizer's `features` entry points that its op files import."""
from .quant.statistics import Statistics
from .quant.strategies import calibrate_range

__all__ = ["apply_calibration_strategy"]


def apply_calibration_strategy(t, strategy, quantize_method) -> None:
    """Set t.min/t.max (and min_key_axis/max_key_axis when t has per-channel statistics)
    from t's statistics under `strategy` (None: leave them); npuopt's strategies
    (npuopt.quant.strategies), at the producing layer's activation bits."""
    if not strategy:
        return
    from .utils.quant_tool_utils import QuantMode
    stats = t.statistics
    if stats is None:
        stats = Statistics.of_constant(t.betensor.detach().float().cpu(), 2048)
    bits = int(t.pnode.attrs["q_bits_activation"]) if t.pnode is not None else 8
    lo, hi = calibrate_range(stats, strategy, bits, QuantMode.is_symmetric(quantize_method))
    if stats.axis is not None and stats.axis == t.key_axis:
        t.min_key_axis, t.max_key_axis = lo, hi
        t.min, t.max = float(lo.min()), float(hi.max())
    else:
        t.min, t.max = lo, hi
