"""If: input 0, a condition of one value, picks the subgraph to run: `then_branch`
(nonzero) on inputs 1 .. then_branch_inputs_num, else `else_branch` on the
else_branch_inputs_num inputs after those; the layer's outputs are the branch's.
The parser writes the branches as subgraph sections and passes the values a branch
reads from the model (ONNX's outer scope) as those inputs.

No quantize function: the tool chain keeps If and its branches in float (in a
quantized graph in the cfg's float mode, float16 by default), as npuopt does."""
from ..errors import IRError
from ..registry import OpType, op_register
from ._subgraph import count_param, one_value, subgraph


@op_register(OpType.If, "1.0")
def if_forward(self, *args):
    n_then, n_else = count_param(self, "then_branch_inputs_num"), count_param(self, "else_branch_inputs_num")
    if len(self.inputs) != 1 + n_then + n_else:
        raise IRError(f"layer '{self.name}' (If): then_branch_inputs_num {n_then} and else_branch_inputs_num "
                      f"{n_else} take {1 + n_then + n_else} inputs (the condition first), the IR gives "
                      f"{len(self.inputs)}")
    then_g = subgraph(self, "then_branch", n_then, len(self.outputs), "then_branch_inputs_num and its tops")
    else_g = subgraph(self, "else_branch", n_else, len(self.outputs), "else_branch_inputs_num and its tops")
    values = [t.betensor for t in self.inputs]
    if bool(one_value(self, self.inputs[0], "the condition") != 0):
        outs = then_g.run_subgraph(values[1:1 + n_then])
    else:
        outs = else_g.run_subgraph(values[1 + n_then:])
    for t, v in zip(self.outputs, outs):
        t.betensor = v
    return [t.betensor for t in self.outputs]
