"""Parser-written IRs of the integer and check layers: ONNX BitShift, BitwiseAnd/Or/Xor/Not,
Mod (fmod 0 on integers, fmod 1 on floats and integers), IsInf (each detect flag), IsNaN
and integer Div (DivMod, trunc); through the parser's TensorFlow front end floordiv and
floormod of integers (DivMod floor, Mod fmod 0) and ctc_greedy_decoder (CTCGreedyDecoder)."""
import numpy as np

from op_cases.common import Case, uniform
from op_cases.intops import integers

TF = {"model_type": "tf"}


def _save_onnx(nodes, inputs, outputs, path, opset=18):
    """An ONNX model of `nodes`; inputs and outputs are (name, element type, shape)."""
    import onnx
    from onnx import helper

    def infos(items):
        return [helper.make_tensor_value_info(n, t, s) for n, t, s in items]

    model = helper.make_model(helper.make_graph(nodes, "g", infos(inputs), infos(outputs)),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _bitshift(rng, path):
    """uint8 values shifted LEFT and RIGHT by uint8 amounts [1,4,1] in [0, 9]."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("BitShift", ["in0", "in1"], [name], direction=d) for name, d in
             (("left", "LEFT"), ("right", "RIGHT"))]
    u8 = TensorProto.UINT8
    _save_onnx(nodes, [("in0", u8, [1, 4, 6]), ("in1", u8, [1, 4, 1])],
               [("left", u8, [1, 4, 6]), ("right", u8, [1, 4, 6])], path)


def _bitwise(rng, path):
    """BitwiseAnd, Or, Xor of int8 values (one broadcast [1,4,1]) and BitwiseNot."""
    from onnx import TensorProto, helper

    i8 = TensorProto.INT8
    nodes = [helper.make_node(op, ["in0", "in1"], [op.lower()]) for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    nodes.append(helper.make_node("BitwiseNot", ["in0"], ["bitwisenot"]))
    outputs = [(n, i8, [1, 4, 6]) for n in ("bitwiseand", "bitwiseor", "bitwisexor", "bitwisenot")]
    _save_onnx(nodes, [("in0", i8, [1, 4, 6]), ("in1", i8, [1, 4, 1])], outputs, path)


def _mod(rng, path):
    """Mod fmod 0 and fmod 1 of int32 values by int32 divisors [1,4,1] (zeros among them)."""
    from onnx import TensorProto, helper

    i32 = TensorProto.INT32
    nodes = [helper.make_node("Mod", ["in0", "in1"], [name], fmod=f) for name, f in (("mod", 0), ("fmod", 1))]
    _save_onnx(nodes, [("in0", i32, [1, 4, 6]), ("in1", i32, [1, 4, 1])],
               [("mod", i32, [1, 4, 6]), ("fmod", i32, [1, 4, 6])], path)


def _fmod(rng, path):
    """Mod fmod 1 of floats by float divisors [1,4,1] of either sign (a graph of its own: beside
    integer Mods the parser adds a Dummy layer)."""
    from onnx import TensorProto, helper

    f32 = TensorProto.FLOAT
    _save_onnx([helper.make_node("Mod", ["in0", "in1"], ["fmod"], fmod=1)],
               [("in0", f32, [1, 4, 6]), ("in1", f32, [1, 4, 1])], [("fmod", f32, [1, 4, 6])], path)


def _fmod_data(rng, shapes, n, value_range, run):
    """Dividends in [-6, 6], divisors in +-[0.5, 2]."""
    return [uniform(rng, (-6.0, 6.0), (n,) + shapes[0]),
            uniform(rng, (0.5, 2.0), (n,) + shapes[1]) * rng.choice([-1, 1], (n,) + shapes[1])]


def _checks(rng, path):
    """IsInf with each pair of detect flags and IsNaN of one float input."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("IsInf", ["in0"], [f"isinf_{p}{n}"], detect_positive=p, detect_negative=n)
             for p, n in ((1, 1), (1, 0), (0, 1), (0, 0))]
    nodes.append(helper.make_node("IsNaN", ["in0"], ["isnan"]))
    outputs = [(node.output[0], TensorProto.BOOL, [1, 4, 6]) for node in nodes]
    _save_onnx(nodes, [("in0", TensorProto.FLOAT, [1, 4, 6])], outputs, path)


def _checks_data(rng, shapes, n, value_range, run):
    """Finite calibration data; the run data holds +inf, -inf and NaN."""
    x = uniform(rng, value_range, (n,) + shapes[0])
    if run:
        x.reshape(n, -1)[:, :3] = [np.inf, -np.inf, np.nan]
    return [x]


def _int_div(rng, path):
    """Div of int32 values by int32 divisors [1,4,1] (no zero: the parser evaluates it), which
    the parser writes as DivMod (trunc), its remainder a graph output of its own."""
    from onnx import TensorProto, helper

    i32 = TensorProto.INT32
    _save_onnx([helper.make_node("Div", ["in0", "in1"], ["quotient"])],
               [("in0", i32, [1, 4, 6]), ("in1", i32, [1, 4, 1])], [("quotient", i32, [1, 4, 6])], path, 13)


def _frozen(fn, specs, path):
    """fn of placeholders in0, in1, ... (TensorSpecs) frozen into a GraphDef at `path`."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    concrete = tf.function(fn, input_signature=specs).get_concrete_function()
    graph = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    tf.io.write_graph(graph, *path.rsplit("/", 1), as_text=False)


def _tf_floor(rng, path):
    """TensorFlow floordiv and floormod of int32 values by int32 divisors [1,4,1]."""
    import tensorflow as tf

    _frozen(lambda a, b: (tf.math.floordiv(a, b), tf.math.floormod(a, b)),
            [tf.TensorSpec([1, 4, 6], tf.int32, name="in0"), tf.TensorSpec([1, 4, 1], tf.int32, name="in1")], path)


def _tf_ctc(rng, path):
    """TensorFlow's ctc_greedy_decoder (merge_repeated true and false) of batch-major scores
    [1, 8, 5] made time-major, with one sequence length a sample."""
    import tensorflow as tf

    def fn(scores, lengths):
        steps = tf.transpose(scores, [1, 0, 2])
        return tuple(tf.nn.ctc_greedy_decoder(steps, lengths, merge_repeated=m)[0][0].values for m in (True, False))
    _frozen(fn, [tf.TensorSpec([1, 8, 5], tf.float32, name="in0"), tf.TensorSpec([1], tf.int32, name="in1")], path)


def _ctc_data(rng, shapes, n, value_range, run):
    """Coarse scores (ties and repeats), blanks favoured; lengths in [0, 8]."""
    scores = np.round(uniform(rng, value_range, (n,) + shapes[0]) * 2) / 2
    scores[..., -1] += 0.5
    return [scores, rng.integers(0, 9, (n,) + shapes[1])]


def _outputs(*names):
    return {**TF, "output": ",".join(names)}


NONZERO = (1, 9)
CASES = [
    Case("parser_bitshift", "ONNX BitShift LEFT and RIGHT of uint8 values by uint8 amounts", [(4, 6), (4, 1)],
         _bitshift, data=integers((0, 255), (0, 9)), dtypes=("uint8", "uint8")),
    Case("parser_bitwise", "ONNX BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot of int8 values", [(4, 6), (4, 1)],
         _bitwise, data=integers((-128, 127), (-128, 127)), dtypes=("int8", "int8")),
    Case("parser_mod", "ONNX Mod fmod 0 and 1 of int32 values by int32 divisors (zeros among them)",
         [(4, 6), (4, 1)], _mod, data=integers((-1000, 1000), (-9, 9)), dtypes=("int32", "int32")),
    Case("parser_fmod", "ONNX Mod fmod 1 of floats by float divisors of either sign", [(4, 6), (4, 1)], _fmod,
         data=_fmod_data),
    Case("parser_isinf_isnan", "ONNX IsInf (each detect flag pair) and IsNaN; inf and NaN in the run data", [(4, 6)],
         _checks, data=_checks_data),
    Case("parser_divmod", "ONNX Div of int32 values (DivMod trunc, the remainder an output)", [(4, 6), (4, 1)],
         _int_div, data=integers((-1000, 1000), NONZERO), dtypes=("int32", "int32")),
    Case("parser_tf_floor", "TensorFlow floordiv and floormod of int32 values (DivMod floor, Mod fmod 0)",
         [(4, 6), (4, 1)], _tf_floor, data=integers((-1000, 1000), NONZERO), dtypes=("int32", "int32"),
         parser=_outputs("Identity", "Identity_1")),
    Case("parser_tf_ctc_greedy", "TensorFlow ctc_greedy_decoder, merge_repeated true and false", [(8, 5), ()],
         _tf_ctc, data=_ctc_data, dtypes=("float32", "int32"), parser=_outputs("Identity", "Identity_1")),
]
