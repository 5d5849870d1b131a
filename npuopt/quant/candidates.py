"""The formats a mixed-precision search may give a layer, by the names the cfg field
`mixed_precision_candidates` lists, as the per-layer settings (opt_config entries) each
one sets on top of the layer's own:

- `w4`, `w8`, `w16`: integer weights of those bits (16: with 48-bit biases, as the tool
  chain's 16-bit layers); for layers with weights that compute in integers;
- `a8`, `a16`: integer activations of those bits (16: with 10-bit lookup tables); for
  quantized layers that compute, not those that only move values;
- `w4a16`...: both;
- `float16`, `bfloat16`, `float32`: the layer kept in float (`<type>_preferred`);
- `float16_w4`, `float16_w4b32`...: weight-only, float activations with integer weights
  of those bits (b32: per block of 32 along the input axis, asymmetric; else the
  layer's own weight grid); for the weighted layer types weight-only applies to."""
import dataclasses
import re
from typing import Tuple

_TOKEN = re.compile(r"w(?P<w>\d+)(?:a(?P<wa>\d+))?|a(?P<a>\d+)|"
                    r"(?P<float>float16|bfloat16|float32)(?:_w(?P<fw>\d+)(?:b(?P<block>\d+))?)?")
WEIGHT_BITS, ACTIVATION_BITS = range(2, 17), range(8, 17)


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    values: Tuple[Tuple[str, object], ...]  # (setting, value) pairs, as an opt_config entry

    @property
    def settings(self) -> dict:
        return dict(self.values)

    @property
    def needs_weights(self) -> bool:
        """Applies to layers with weights only (it sets their bits, or weight-only)."""
        return "weight_bits" in self.settings

    @property
    def needs_computing(self) -> bool:
        """Applies to layers that compute (a layer that only moves values takes its input's)."""
        return "activation_bits" in self.settings


def parse_candidate(token: str) -> Candidate:
    """A candidate from its name; ValueError when the name is not one (the module's list)."""
    m = _TOKEN.fullmatch(token.strip().lower())
    if not m:
        raise ValueError(f"'{token}' is not a candidate (w<bits>, a<bits>, w<bits>a<bits>, float16, bfloat16, "
                         f"float32, float16_w<bits>[b<block>])")
    values = {}
    weights, activations = m.group("w") or m.group("fw"), m.group("wa") or m.group("a")
    if weights is not None:
        if int(weights) not in WEIGHT_BITS:
            raise ValueError(f"'{token}': weights of {weights} bits (from 2 to 16)")
        values["weight_bits"] = int(weights)
        if int(weights) > 8 and not m.group("float"):
            values["bias_bits"] = 48
    if activations is not None:
        if int(activations) not in ACTIVATION_BITS:
            raise ValueError(f"'{token}': activations of {activations} bits (from 8 to 16)")
        values["activation_bits"] = int(activations)
        if int(activations) > 8:
            values["lut_items_in_bits"] = 10
    if m.group("float"):
        values["trigger_float_op"] = f"{m.group('float')}_{'act_int_wht' if weights else 'preferred'}"
    if m.group("block"):
        if int(m.group("block")) < 1:
            raise ValueError(f"'{token}': blocks of at least 1 weight")
        values.update(quantize_method_for_weight="per_block_asymmetric", weight_block_size=int(m.group("block")))
    return Candidate(m.group(0), tuple(values.items()))


def parse_candidates(text: str) -> Tuple[Candidate, ...]:
    """A comma-separated list of candidate names (empty: no search)."""
    tokens = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    found = tuple(parse_candidate(t) for t in tokens)
    if len({c.name for c in found}) != len(found):
        raise ValueError("a candidate is named twice")
    return found
