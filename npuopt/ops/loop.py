"""Loop: runs its `body` subgraph while the iteration is below the trip count (input 0)
and the condition (input 1, then the body's output 0) is nonzero, as the tool chain's
Loop does. The body takes the layer's inputs: the iteration number in place of the trip
count, the condition, the dependency_inputs_num loop-carried values (then each
iteration's outputs 1..N), and the values it reads from the model (the parser passes
ONNX's outer scope as the last inputs, unchanged between iterations). The layer's
outputs: the N carried values after the last iteration, then scan_outputs_num scan
outputs, each body output 1+N+k of every iteration stacked along the first axis
(torch.vstack: a scalar becomes a row). Zero iterations (as in ONNX; the tool chain's
forward cannot run them) give the carried inputs and empty scan outputs.

A scan output's first axis counts the iterations run: the shapes follow the data (a
graph with a Loop runs a batch as one, as the tool chain does; registry
has_data_dependent_shapes), and the IR does not bound that axis (the parser writes it
for loop_default_count iterations, its own run's; graph.mark_iterations_axis).

No quantize function: the tool chain keeps Loop and its body in float (in a quantized
graph in the cfg's float mode, float16 by default), as npuopt does."""
import torch

from ..errors import IRError
from ..graph import mark_iterations_axis
from ..registry import OpType, op_register
from ._subgraph import count_param, one_value, subgraph


@op_register(OpType.Loop, "1.0", data_dependent_shapes=True)
def loop_forward(self, *args):
    carried, scans = count_param(self, "dependency_inputs_num"), count_param(self, "scan_outputs_num")
    if len(self.inputs) < 2 + carried or len(self.outputs) != carried + scans:
        raise IRError(f"layer '{self.name}' (Loop): dependency_inputs_num {carried} and scan_outputs_num {scans} "
                      f"take at least {2 + carried} inputs and give {carried + scans} outputs, the IR has "
                      f"{len(self.inputs)} and {len(self.outputs)}")
    body = subgraph(self, "body", len(self.inputs), 1 + carried + scans,
                    "its inputs and 1 + dependency_inputs_num + scan_outputs_num")
    trips = float(one_value(self, self.inputs[0], "the trip count"))
    feed = [t.betensor for t in self.inputs]
    cond = one_value(self, self.inputs[1], "the condition")
    iteration = body.input_tensors[0].dtype.torch_dtype
    stacked = [[] for _ in range(scans)]
    i = 0
    while i < trips and bool(cond != 0):
        feed[0] = torch.full(feed[0].shape, i, dtype=iteration, device=feed[0].device)
        outs = body.run_subgraph(feed)
        cond = one_value(self, body.output_tensors[0], "the body's condition")
        feed = feed[:1] + outs[:1 + carried] + feed[2 + carried:]
        for k in range(scans):
            stacked[k].append(outs[1 + carried + k])
        i += 1
    for t, v in zip(self.outputs, feed[2:2 + carried]):
        t.betensor = v
    for t, parts in zip(self.outputs[carried:], stacked):
        t.betensor = torch.vstack(parts) if parts else torch.zeros((0,) + tuple(t.ir_shape[1:]))
        mark_iterations_axis(t)
    return [t.betensor for t in self.outputs]
