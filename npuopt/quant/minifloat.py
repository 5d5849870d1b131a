"""Scaled minifloat formats, the tool chain's fp8 and fp4 quantization (quant_type
wfp8afp8, wfp8e4m3afp8e4m3, wfp8e5m2afp8e5m2; fp4 weights): a tensor holds real * scale
rounded to the nearest float8_e4m3fn, float8_e5m2 or float4_e2m1fn value (half to even),
saturated at the format's largest finite value; scale = largest / (absmax + 1e-5) in
float32, zero point 0.

A rescale (fp8 layers' `scale_value`/`scale`, float32) multiplies in float64 and rounds
through float32 to the format, as the tool chain's requantize does (its rounding
converts to float32 first). NaN becomes 0, as there. The tool chain's own fp4 rounding
sends the ties 0.75 and 5 up and down against half to even; npuopt rounds half to even
(the stored values are what every reader computes with)."""
from typing import NamedTuple

import torch


class Minifloat(NamedTuple):
    name: str
    mantissa_bits: int
    smallest_exponent: int   # of the normal values; subnormals below it share its step
    largest: float


FORMATS = {f.name: f for f in (Minifloat("float8_e4m3fn", 3, -6, 448.0), Minifloat("float8_e5m2", 2, -14, 57344.0),
                                Minifloat("float4_e2m1fn", 1, 0, 6.0))}
# the tool chain's epsilon added to a range before its scale is taken
RANGE_EPSILON = 1e-5


def round_to(x: torch.Tensor, name: str) -> torch.Tensor:
    """x rounded through float32 to the nearest value of format `name` (half to even,
    subnormals included), saturated at +-largest, NaN as 0; float32 holding those values:
    the format's step at a value's binade is 2^(exponent - mantissa bits)."""
    fmt = FORMATS[name]
    v = torch.nan_to_num(x.to(torch.float32), nan=0.0).clamp_(-fmt.largest, fmt.largest).to(torch.float64)
    _, e = torch.frexp(v)  # v = f * 2^e, 0.5 <= |f| < 1: the binade's exponent is e - 1
    step = torch.exp2((e - 1).clamp_(min=fmt.smallest_exponent).to(torch.float64) - fmt.mantissa_bits)
    return torch.round(v / step).mul_(step).clamp_(-fmt.largest, fmt.largest).to(torch.float32)


def scale_of(absmax, name: str):
    """The float32 scale that puts `absmax` (a number, or a tensor per channel) at the
    format's largest value."""
    r = torch.as_tensor(absmax, dtype=torch.float32) + RANGE_EPSILON
    scale = torch.tensor(FORMATS[name].largest, dtype=torch.float32) / r
    return scale if scale.dim() else float(scale)


def quantize(f: torch.Tensor, scale, name: str) -> torch.Tensor:
    """A float tensor into format `name`: round_to(fl32(scale * f))."""
    s = scale.to(f.device, torch.float32) if isinstance(scale, torch.Tensor) else \
        torch.tensor(scale, dtype=torch.float32, device=f.device)
    return round_to(f.to(torch.float32) * s, name)


def requantize(acc: torch.Tensor, scale, name: str) -> torch.Tensor:
    """round_to(acc * scale): acc float64 (exact sums), scale float32 (a number, or per
    channel along the last axis), the product in float64."""
    s = scale.to(acc.device, torch.float64) if isinstance(scale, torch.Tensor) else float(scale)
    return round_to(acc.to(torch.float64) * s, name)

