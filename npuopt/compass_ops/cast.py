"""OPT's ops/cast.py helper: a tensor's value cast to a dtype (npuopt/ops/cast.py's arithmetic)."""
import torch

from ..ops.cast import to_integer


def forward_with_clip(inp, out_dtype, clip_mode, input_zerop=0, output_zerop=0) -> torch.Tensor:
    """inp.betensor cast to `out_dtype`: to a float type, as float32; to an integer type,
    with clip_mode TRUNCATION toward zero and wrapped modulo 2^bits (zero points not used),
    else with input_zerop - output_zerop added and saturated to the type's range."""
    x = inp.betensor
    if out_dtype.is_float:
        return x.float()
    if str(clip_mode).upper() == "TRUNCATION":
        return to_integer(x, out_dtype, "TRUNCATION")
    return to_integer(x.long() + input_zerop - output_zerop, out_dtype, "SATURATION")
