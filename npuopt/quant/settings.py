"""A layer's effective quantization settings: the cfg's fields, overridden per
layer by the JSON opt_config."""
from collections import OrderedDict
from dataclasses import dataclass, fields


@dataclass
class QuantSettings:
    quantize_method_for_weight: str = "per_tensor_symmetric_restricted_range"
    quantize_method_for_activation: str = "per_tensor_symmetric_full_range"
    weight_bits: int = 8
    activation_bits: int = 8
    bias_bits: int = 32
    lut_items_in_bits: int = 8
    calibration_strategy_for_weight: str = "extrema"
    calibration_strategy_for_activation: str = "mean"
    histc_bins: int = 2048
    multiplier_bits: int = 0          # 0: the activation bits, at most 15 (resolved at construction)
    unify_shifts_for_aiff: bool = True
    trigger_float_op: bool = False

    def __post_init__(self):
        if not self.multiplier_bits:
            self.multiplier_bits = min(int(self.activation_bits), 15)

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    def as_dict(self):
        return OrderedDict((n, getattr(self, n)) for n in self.names())


@dataclass(frozen=True)
class QuantMethod:
    """A quantize_method_* value taken apart."""
    per_channel: bool
    symmetric: bool
    full_range: bool

    @classmethod
    def parse(cls, method: str) -> "QuantMethod":
        m = method.lower()
        return cls(m.startswith("per_channel"), "_symmetric" in m, "restricted" not in m)


def settings_of(node) -> QuantSettings:
    return node.attrs.get("qsettings") or QuantSettings()
