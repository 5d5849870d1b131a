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
    trigger_float_op: bool = False

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    def as_dict(self):
        return OrderedDict((n, getattr(self, n)) for n in self.names())

    @property
    def multiplier_bits(self) -> int:
        """Width of a rescale multiplier: the activations' bits (at most 15), as the tool chain has it."""
        return min(self.activation_bits, 15)


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
