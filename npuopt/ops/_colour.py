"""What the colour conversions RgbToYuv and YuvToRgb share (the parser writes them for its
`gamut_preprocess` option): their 15 coefficients, the I420 layout of the YUV side, and
the quantize function, which is the tool chain's for both.

`coefficient` = [3 input offsets, 3 output offsets, the 3x3 matrix row by row], applied
with `coefficient_shift` (the parser writes BT709's float coefficients with shift 0, or
the cfg's own, `conversion=SELF`). Quantized, as the tool chain: the matrix becomes
round(c * 2^bits) (bits 10 for RgbToYuv, 8 for YuvToRgb; whatever the float IR's shift),
`coefficient_shift` = bits, `coefficient_dtype` int16; the top holds the 0..255 results
themselves (scale 1, zero point 0, uint8; with force_dtype_int int8 with zero point 128,
the tool chain's choice, which saturates the results at 127)."""
from typing import Tuple

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..quant import tensors as QT
from ._movement import int_param

FORMATS = ("I420",)


def coefficients(node, device="cpu") -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(input offsets [3], output offsets [3], matrix [3, 3]) as float32 on `device`, and the shift."""
    values = node.get_param("coefficient")
    if not isinstance(values, list) or len(values) != 15 or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise IRError(f"layer '{node.name}' ({node.type}): coefficient must be 15 numbers (3 input offsets, 3 "
                      f"output offsets, a 3x3 matrix), got {values!r}")
    shift = int_param(node, "coefficient_shift", minimum=0)
    fmt = str(node.get_param("format", "I420")).upper()
    if fmt not in FORMATS:
        raise IRError(f"layer '{node.name}' ({node.type}): format '{fmt}' is not supported (I420 is the only "
                      f"layout the tool chain computes)")
    c = torch.tensor([float(v) for v in values], dtype=torch.float32, device=device)
    return c[0:3], c[3:6], c[6:].reshape(3, 3), shift


def i420_size(height: int, width: int) -> int:
    """Elements of one I420 image: the full Y plane, then U and V subsampled by 2 each way."""
    return height * width + 2 * (height // 2) * (width // 2)


def colour_quantize(node, bits: int) -> None:
    """The tool chain's quantize function of both conversions (see the module doc)."""
    inp, out = node.inputs[0], node.outputs[0]
    if not inp.qinvariant:
        raise QT.Unsupported(f"layer '{node.name}' ({node.type}): its integer form reads the input's stored "
                             f"integers as pixel values; a scaled input is kept in float")
    coefficients(node)
    values = list(node.get_param("coefficient"))
    node.params["coefficient"] = values[:6] + [round(float(c) * 2 ** bits) for c in values[6:]]
    node.params["coefficient_shift"] = bits
    node.params["coefficient_dtype"] = "int16"
    node.params["conversion"] = node.get_param("conversion", "BT709")
    node.params["format"] = node.get_param("format", "I420")
    signed = bool(node.force_dtype_int)
    dtype = Dtype.integer(8, signed)
    QT.set_quantization(out, 1.0, 128 if signed else 0, dtype.qmin, dtype.qmax, 8, signed)
    out.qinvariant = inp.qinvariant


def store_pixels(node, values: torch.Tensor) -> torch.Tensor:
    """Results clamped to 0..255 (in float too, as the tool chain); quantized, then held in the
    top's integer type (an int8 top saturates at 127)."""
    top = node.outputs[0]
    values = values.clamp(0, 255)
    if node.quantized:
        return QT.store_output(node, values.clamp(top.qmin, top.qmax), top)
    top.betensor = values
    return values
