"""A weight-only MatMul's constant operand, rounded by the methods as the FullyConnected
layer it is. The Constant's weights [rows, K] (quantizer.weight_operands: the A operand
[M, K], or the B operand [N, K] with trans_b) meet the other operand along K: each row
of A' = A (transposed with trans_a) where the weights are B, each column of B' = B
(transposed with trans_b) where they are A. So a FullyConnected stand-in with the
Constant's weights and the MatMul's settings, fed those rows, has the MatMul's output
(up to its layout and fused_multiplier, which scales the float and the quantized output
alike); what a method plans for the stand-in becomes the Constant's plan. `Direct` is
the same view of a layer that holds its own weights, so that the methods walk both alike."""
from dataclasses import dataclass
from typing import Dict, List

import torch

from ...node import PyNode
from ...registry import OpType
from ...tensor import PyTensor
from ..quantizer import weight_operands
from ..settings import settings_of
from ..weight_plans import PLANNED_ATTRS


@dataclass
class Direct:
    """A layer that holds its weights and reads them against its input 0 (the usual case)."""
    holder: object

    port = 0

    @property
    def reader(self):
        return self.holder

    def stand_in(self):
        return self.holder

    def rows(self, values: List[torch.Tensor]) -> List[torch.Tensor]:
        return values

    def adopt(self, node) -> None:
        """Its plan is its own already."""


@dataclass
class Operand:
    """A weight-only MatMul's constant operand, seen as a FullyConnected layer."""
    holder: object     # the float graph's Constant layer, which holds the weights
    reader: object     # the weight-only MatMul that reads it alone
    port: int          # the reader's input that holds the other operand

    def stand_in(self) -> PyNode:
        """A FullyConnected layer with the Constant's weights (the same tensor) and its plan so
        far, the MatMul's settings, and an output of the MatMul's positions per sample."""
        node = PyNode(self.holder.name, OpType.FullyConnected)
        node.constants["weights"] = self.holder.get_constant("weights")
        node.attrs["qsettings"] = settings_of(self.reader)
        for key in PLANNED_ATTRS:
            if key in self.holder.attrs:
                node.attrs[key] = self.holder.attrs[key]
        out = self.reader.outputs[0].ir_shape
        rows = int(node.constants["weights"].betensor.shape[0])
        positions = (int(torch.Size(out[1:]).numel()) // rows) if len(out) > 1 else 1
        node.outputs.append(PyTensor(f"{self.holder.name}:rows", torch.zeros(()), ir_shape=[1, positions, rows]))
        return node

    def rows(self, values: List[torch.Tensor]) -> List[torch.Tensor]:
        """The other operand's values per batch, as the rows the weights meet: [..., positions, K]."""
        if self.port == 0:  # the weights are B [N, K]: A's rows
            return [v.transpose(-1, -2) if self.reader.get_param("trans_a", False) else v for v in values]
        return [v if self.reader.get_param("trans_b", False) else v.transpose(-1, -2) for v in values]

    def adopt(self, node: PyNode) -> None:
        """The stand-in's plan becomes the Constant's."""
        for key in PLANNED_ATTRS:
            if key in node.attrs:
                self.holder.attrs[key] = node.attrs[key]


def operands(graph) -> Dict[str, Operand]:
    """{Constant: Operand} of the weight-only MatMuls' constant operands laid out [rows, K]
    (a per-tensor grid takes any layout; these are the ones a row-wise rounding reads)."""
    found = {}
    for name, reader_name in weight_operands(graph, {n.name: settings_of(n) for n in graph.nodes}).items():
        constant, reader = graph.node(name), graph.node(reader_name)
        port = [t.name for t in reader.inputs[:2]].index(constant.outputs[0].name)
        trans = bool(reader.get_param("trans_b" if port else "trans_a", False))
        if constant.get_constant("weights").betensor.dim() == 2 and trans == bool(port):
            found[name] = Operand(constant, reader, 1 - port)
    return found
