"""Control flow as the parser writes it from ONNX: If (its branches) and Loop (its body)
as subgraph sections, the values a subgraph reads from the model (ONNX's outer scope)
passed as inputs of the layer that runs it. The condition or the trip count comes from
the data (the parser runs constant ones itself: it unrolls such a Loop). An If nests in
an If's branch; the parser fails on a Loop in an If's branch and writes an If in a Loop's
body with no branch inputs (then_branch_inputs_num=0, the values it reads left out),
which neither the tool chain nor npuopt can run.

An If's condition of the whole batch (the model reduces over the batch axis) runs the
batch as one in the tool chain, sample by sample in npuopt (the IR fixes batch 1): the
If cases' run data are one sample (run_samples), in the branch run_range picks. A graph
with a Loop runs a batch as one in both (its shapes follow the data)."""
import numpy as np
import onnx
import torch
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from op_cases.common import Case, uniform_inputs

SHAPE = [1, 4, 6]


def _value(name, dtype=T.FLOAT, shape=SHAPE):
    return h.make_tensor_value_info(name, dtype, shape)


def _const(name, value, dtype=np.float32):
    return nh.from_array(np.asarray(value, dtype), name)


def _save(nodes, outputs, initializers, path) -> None:
    graph = h.make_graph(nodes, "model", [_value("in0")], outputs, initializer=initializers)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _branch(name, nodes, output, initializers):
    return h.make_graph(nodes, name, [], [_value(output)], initializer=initializers)


def _if_model(rng, path):
    """cond = sum(x) > 0; then: relu(x * w) with a per-channel w; else: sigmoid(x - c);
    the If's output feeds an integer layer (through a Quantize) and is an output too."""
    then_g = _branch("then", [h.make_node("Mul", ["in0", "w"], ["t0"]), h.make_node("Relu", ["t0"], ["then_out"])],
                     "then_out", [_const("w", rng.uniform(0.5, 2.0, 6))])
    else_g = _branch("else", [h.make_node("Sub", ["in0", "c"], ["e0"]), h.make_node("Sigmoid", ["e0"], ["else_out"])],
                     "else_out", [_const("c", rng.uniform(-0.5, 0.5, 6))])
    nodes = [h.make_node("ReduceSum", ["in0"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["cond"]),
             h.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
             h.make_node("Add", ["y", "in0"], ["out0"])]
    _save(nodes, [_value("out0"), _value("y")], [_const("zero", 0.0)], path)


def _trip_count(nodes, initializers):
    """M = argmax([-5, column sums of x]): a count of 1 to 6 iterations that the data decide."""
    nodes += [h.make_node("ReduceSum", ["in0", "axes01"], ["colsum"], keepdims=0),
              h.make_node("Concat", ["floor", "colsum"], ["scores"], axis=0),
              h.make_node("ArgMax", ["scores"], ["M"], axis=0, keepdims=0)]
    initializers += [_const("axes01", [0, 1], np.int64), _const("floor", [-5.0])]


def _loop_model(rng, path):
    """A Loop of a data-dependent trip count: v = tanh(v * a + x) carried, the scan output
    v * (i + 1) + b, the counter i cast to float, x read from the model."""
    body = h.make_graph(
        [h.make_node("Mul", ["v_in", "a"], ["v1"]), h.make_node("Add", ["v1", "in0"], ["v2"]),
         h.make_node("Tanh", ["v2"], ["v_out"]), h.make_node("Cast", ["iter"], ["iterf"], to=T.FLOAT),
         h.make_node("Add", ["iterf", "one"], ["step"]), h.make_node("Mul", ["v_out", "step"], ["s0"]),
         h.make_node("Add", ["s0", "b"], ["scan"]), h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_value("iter", T.INT64, []), _value("cond_in", T.BOOL, []), _value("v_in")],
        [_value("cond_out", T.BOOL, []), _value("v_out"), _value("scan")],
        initializer=[_const("a", 0.75), _const("one", 1.0), _const("b", rng.uniform(-0.5, 0.5, 6))])
    nodes, initializers = [], [_const("c0", True, np.bool_)]
    _trip_count(nodes, initializers)
    nodes += [h.make_node("Loop", ["M", "c0", "in0"], ["v_final", "scans"], body=body),
              h.make_node("Sigmoid", ["v_final"], ["out0"])]
    _save(nodes, [_value("out0"), _value("scans", shape=["M", 1, 4, 6])], initializers, path)


def _while_model(rng, path):
    """A Loop of at most 8 iterations that stops once max(v) reaches 1.5 (a condition the
    body computes): v (from x / 4) += x / 2 and a float counter carried, the scalar max(v)
    scanned; v * x after it."""
    body = h.make_graph(
        [h.make_node("Mul", ["in0", "half"], ["dx"]), h.make_node("Add", ["v_in", "dx"], ["v_out"]),
         h.make_node("Add", ["n_in", "one"], ["n_out"]), h.make_node("ReduceMax", ["v_out"], ["vmax"], keepdims=0),
         h.make_node("Less", ["vmax", "limit"], ["cond_out"])],
        "body", [_value("iter", T.INT64, []), _value("cond_in", T.BOOL, []), _value("v_in"),
                 _value("n_in", shape=[1])],
        [_value("cond_out", T.BOOL, []), _value("v_out"), _value("n_out", shape=[1]), _value("vmax", shape=[])],
        initializer=[_const("half", 0.5), _const("one", 1.0), _const("limit", 1.5)])
    nodes = [h.make_node("Mul", ["in0", "quarter"], ["v0"]),
             h.make_node("Loop", ["M", "c0", "v0", "n0"], ["v_final", "count", "maxes"], body=body),
             h.make_node("Mul", ["v_final", "in0"], ["out0"])]
    initializers = [_const("M", 8, np.int64), _const("c0", True, np.bool_), _const("quarter", 0.25),
                    _const("n0", [0.0])]
    _save(nodes, [_value("out0"), _value("count", shape=[1]), _value("maxes", shape=["M", 1])], initializers, path)


def _nested_model(rng, path):
    """An If in an If's then branch: cond = sum(x) > 0, then (max(x) > 0.5 ? x * w : tanh(x)),
    else sigmoid(x); x reaches the inner branches from the model through the outer one."""
    inner_then = _branch("inner_then", [h.make_node("Mul", ["in0", "w"], ["it"])], "it",
                         [_const("w", rng.uniform(0.5, 2.0, 6))])
    inner_else = _branch("inner_else", [h.make_node("Tanh", ["in0"], ["ie"])], "ie", [])
    then_g = h.make_graph([h.make_node("ReduceMax", ["in0"], ["mx"], keepdims=0),
                           h.make_node("Greater", ["mx", "half"], ["inner_cond"]),
                           h.make_node("If", ["inner_cond"], ["t_out"], then_branch=inner_then,
                                       else_branch=inner_else)],
                          "then", [], [_value("t_out")], initializer=[_const("half", 0.5)])
    else_g = _branch("else", [h.make_node("Sigmoid", ["in0"], ["else_out"])], "else_out", [])
    nodes = [h.make_node("ReduceSum", ["in0"], ["s"], keepdims=0), h.make_node("Greater", ["s", "zero"], ["cond"]),
             h.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
             h.make_node("Add", ["y", "in0"], ["out0"])]
    _save(nodes, [_value("out0")], [_const("zero", 0.0)], path)


class _ConvFirst(torch.nn.Module):
    """A convolution, then the control flow of a subclass."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)


class ScriptedIf(_ConvFirst):
    """What torch.jit.script makes of Python control flow: an If on the convolution's mean."""

    def forward(self, x):
        y = self.conv(x)
        if bool(y.mean() > 0):
            z = torch.relu(y) * 2.0
        else:
            z = torch.sigmoid(y) - 0.5
        return z + 1.0


class ScriptedLoop(_ConvFirst):
    """A Python for loop of a count the data decide, int(mean > 0) + 2 (an integer Add)."""

    def forward(self, x):
        y = self.conv(x)
        acc = y
        for _ in range(int(y.mean() > 0) + 2):
            acc = torch.tanh(acc * 0.5 + y)
        return acc * 2.0


def _scripted(module_cls):
    def build(rng, path):
        torch.onnx.export(torch.jit.script(module_cls()), (torch.zeros(1, 3, 8, 8),), path, input_names=["in0"],
                          output_names=["out0"], opset_version=13, dynamo=False)
    return build


def many_trips_runs(rng, shapes, n, value_range, run):
    """Run data whose later columns are larger: the trip count argmax([-5, column sums])
    is one of the last columns' (more iterations)."""
    data = uniform_inputs(rng, shapes, n, value_range, run)
    return [x + np.linspace(0.0, 0.6, x.shape[-1], dtype=np.float32) for x in data] if run else data


INPUTS = [tuple(SHAPE[1:])]
CASES = [
    Case("parser_if_then", "If on sum(x) > 0 (run data: the then branch), its output read by an integer Add",
         INPUTS, _if_model, run_range=(0.0, 1.0), run_samples=1),
    Case("parser_if_else", "If on sum(x) > 0 (run data: the else branch), its output read by an integer Add",
         INPUTS, _if_model, run_range=(-1.0, 0.0), run_samples=1),
    Case("parser_loop", "Loop of a data-dependent trip count: a carried tensor, a scan output, the counter, "
         "a value from the model", INPUTS, _loop_model, data=many_trips_runs),
    Case("parser_loop_while", "Loop that stops on a condition its body computes: two carried values, a "
         "scalar scan output", INPUTS, _while_model),
    Case("parser_if_script", "If of a torch.jit.script module (torch.onnx.export): the convolution's mean "
         "picks a branch", [(3, 8, 8)], _scripted(ScriptedIf), run_samples=1),
    Case("parser_loop_script", "Loop of a torch.jit.script module: a for loop of a count the data decide",
         [(3, 8, 8)], _scripted(ScriptedLoop)),
    Case("parser_if_nested", "If in an If's branch (run data: the outer then, the inner else branch), a "
         "value from the model through both", INPUTS, _nested_model, run_range=(0.0, 0.45), run_samples=1),
]
