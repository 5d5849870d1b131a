"""Tile: the input repeated `repeats[i]` times along axis i (extra leading repeats add
axes, as np.tile does).

Quantized: the same code moves the integers; the input's quantization is passed through."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import int_list, set_output


@op_register(OpType.Tile, "1.0")
def tile_forward(self, *args):
    x = self.inputs[0].betensor
    reps = int_list(self, "repeats")
    if len(reps) < x.dim() or min(reps, default=0) < 0:
        raise IRError(f"layer '{self.name}' (Tile): repeats {reps} must be {x.dim()} or more non-negative counts")
    return set_output(self, x.repeat(*reps))


@quant_register(OpType.Tile, "1.0")
def tile_quantize(self, *args):
    QT.pass_through(self)
