"""FractionalPool: MAX or AVG pooling of an NHWC input over windows of fractional
average size (TensorFlow's fractional_max_pool / fractional_avg_pool), the output's
height and width those of `layer_top_shape`; tops 1 and 2 are the row and column
boundaries (int32, O + 1 each). Params: `method` MAX/AVG, `pseudo` (pseudo-random
instead of random steps), `overlap` (each window takes the next window's first row and
column too), `seed`. The boundaries are drawn as the tool chain draws them
(_pooling_sequences.py); seed 0, which asks TensorFlow and the tool chain for fresh
random regions on every run, takes std::mt19937's default seed 5489 so that
calibration, the quantized forward and npuopt-run pool the same windows. Window i of
an axis covers [b_i, min(b_(i+1) + overlap, L)).

Quantized (the tool chain's form): MAX the max of q; AVG sums q (no zero point: in and
out share it) and rescales by the 8-bit approximation of fl32(1 / area)
(adaptivepool.window_average); the values keep the input's quantization, the boundaries
are unscaled integers (scale 1, zp 0), int16 (int32 past 32767)."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import bool_param, index_output_quantization, int_param, set_values_and_indices
from ._pooling_sequences import RANGE, boundaries
from .adaptivepool import window_average

METHODS = ["MAX", "AVG"]
DEFAULT_SEED = 5489   # std::mt19937's default seed
INT16_MAX = (1 << 15) - 1


def _sequences(node):
    """(method, [row boundaries, column boundaries]), every param checked."""
    method = param_choice(node, "method", METHODS)
    shape = [int(d) for d in node.inputs[0].ir_shape]
    if len(node.outputs) != 3:
        raise IRError(f"layer '{node.name}' ({node.type}): needs three tops (values, row and column boundaries), "
                      f"has {len(node.outputs)}")
    if len(shape) != 4 or len(node.outputs[0].ir_shape) != 4:
        raise IRError(f"layer '{node.name}' ({node.type}): takes an NHWC input and gives an NHWC top")
    pseudo = bool_param(node, "pseudo", False)
    seed = int_param(node, "seed", 0) % RANGE or DEFAULT_SEED
    sequences = []
    for axis, name in ((1, "height"), (2, "width")):
        length, outputs = shape[axis], int(node.outputs[0].ir_shape[axis])
        if not 1 <= outputs <= length:
            raise IRError(f"layer '{node.name}' ({node.type}): the top's {name} {outputs} must lie in [1, {length}] "
                          f"(the input's)")
        if [int(d) for d in node.outputs[axis].ir_shape] != [outputs + 1]:
            raise IRError(f"layer '{node.name}' ({node.type}): top {axis} holds the {outputs + 1} {name} boundaries, "
                          f"the IR says {list(node.outputs[axis].ir_shape)}")
        sequences.append(boundaries(length, outputs, pseudo, seed))
    return method, sequences


def _reduce(x: torch.Tensor, windows, reduce) -> torch.Tensor:
    """reduce(block, dim) of NHWC x over every window: the rows, then the columns."""
    rows = torch.stack([reduce(x[:, a:b], 1) for a, b in windows[0]], 1)
    return torch.stack([reduce(rows[:, :, a:b], 2) for a, b in windows[1]], 2)


def _amax(v, dim):
    return v.amax(dim)


def _sum(v, dim):
    return v.sum(dim)


@op_register(OpType.FractionalPool, "1.0")
def fractionalpool_forward(self, *args):
    method, sequences = _sequences(self)
    x = self.inputs[0].betensor
    if x.dim() != 4 or x.shape[1:3] != tuple(int(d) for d in self.inputs[0].ir_shape[1:3]):
        raise IRError(f"layer '{self.name}' ({self.type}): input of shape {list(x.shape)}, the IR says "
                      f"{list(self.inputs[0].ir_shape)}")
    overlap = int(bool_param(self, "overlap", False))
    windows = [[(b[i], min(b[i + 1] + overlap, b[-1])) for i in range(len(b) - 1)] for b in sequences]
    out = self.outputs[0]
    bounds = [torch.tensor(b, dtype=torch.int64, device=x.device) for b in sequences]
    if method == "MAX":
        y = _reduce(x, windows, _amax)
    elif self.quantized:
        lengths = [torch.tensor([e - s for s, e in w], dtype=torch.float64, device=x.device) for w in windows]
        areas = lengths[0].reshape(1, -1, 1, 1) * lengths[1].reshape(1, 1, -1, 1)
        y = window_average(_reduce(x.to(torch.float64), windows, _sum), areas, out)
    else:  # each window summed as the tool chain sums it (float32 sums in its order)
        v = computing_float(x)
        y = torch.stack([torch.stack([v[:, a:b, c:d].sum(dim=[1, 2]) / ((b - a) * (d - c)) for c, d in windows[1]], 1)
                         for a, b in windows[0]], 1)
    return set_values_and_indices(self, y, *bounds)


@quant_register(OpType.FractionalPool, "1.0")
def fractionalpool_quantize(self, *args):
    _sequences(self)
    QT.check_quantized_inputs(self)
    x = self.inputs[0]
    QT.copy_quantization(x, self.outputs[0])
    for axis in (1, 2):
        largest = max(int(self.outputs[axis].ir_shape[0]), int(x.ir_shape[axis]))
        index_output_quantization(self, self.outputs[axis], 16 if largest <= INT16_MAX else 32, signed=True)
