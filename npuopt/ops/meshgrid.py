"""Meshgrid: the coordinate grids of two 1-D inputs x (length X) and y (length Y),
`indexing` xy (tops [Y, X]: top 0 repeats x along the rows, top 1 y along the columns)
or ij (tops [X, Y]: top 0 repeats x down the columns, top 1 y along the rows);
`sparse` keeps only the first row or column of the repeated axis ([1, X] and [Y, 1]
for xy, [X, 1] and [1, Y] for ij), `copy` (the parser writes it) changes nothing.
Each top keeps its input's dtype.

Quantized: the values move unchanged; top i takes input i's quantization (the tool
chain quantizes integer inputs only; npuopt passes scaled ones through too)."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._layout import param_choice
from ._movement import bool_param

INDEXING = ["xy", "ij"]


def _check(node):
    """(indexing, sparse), the inputs and tops counted and the params checked."""
    if len(node.inputs) != 2 or len(node.outputs) != 2:
        raise IRError(f"layer '{node.name}' ({node.type}): takes 2 inputs and gives 2 tops, the IR has "
                      f"{len(node.inputs)} and {len(node.outputs)}")
    bool_param(node, "copy", True)
    return param_choice(node, "indexing", INDEXING), bool_param(node, "sparse", False)


@op_register(OpType.Meshgrid, "1.0")
def meshgrid_forward(self, *args):
    indexing, sparse = _check(self)
    x, y = (t.betensor for t in self.inputs)
    if x.dim() != 1 or y.dim() != 1:
        raise IRError(f"layer '{self.name}' ({self.type}): takes 1-D inputs, got {list(x.shape)} and "
                      f"{list(y.shape)}")
    ly, lx = (1, 1) if sparse else (len(y), len(x))   # how often each input repeats
    if indexing == "xy":
        grids = [x.reshape(1, -1).expand(ly, -1), y.reshape(-1, 1).expand(-1, lx)]
    else:
        grids = [x.reshape(-1, 1).expand(-1, ly), y.reshape(1, -1).expand(lx, -1)]
    for t, grid in zip(self.outputs, grids):
        if self.quantized:
            QT.store_output(self, grid.contiguous(), t)
        else:
            t.betensor = grid.contiguous()
    return [t.betensor for t in self.outputs]


@quant_register(OpType.Meshgrid, "1.0")
def meshgrid_quantize(self, *args):
    _check(self)
    QT.check_quantized_inputs(self)
    for x, out in zip(self.inputs, self.outputs):
        QT.copy_quantization(x, out)
