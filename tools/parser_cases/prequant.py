"""Pre-quantized sources as the parser writes them: ONNX MatMulInteger (integer graph
inputs and an integer constant), TensorFlow's fake_quant_with_min_max_vars
(FakeQuantWithMinMaxVars).

No ConvInteger case: this parser writes no IR of an ONNX ConvInteger (with constant zero
points it takes x_zero_point for the biases and stops in rename_conv or in its back
passes; without them it has no biases and stops in rename_conv), so the op tests
convinteger* hold the params as its ArmConvInteger writes them."""
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from op_cases.common import Case, integer_inputs

TF = {"model_type": "tf"}


def _matmulinteger(rng, path):
    """int8 A [1,3,5] times uint8 B [1,5,4] (zero points 3 and 200), and A times an int8
    constant [5,6] with a zero point of its own (-9) and A's omitted (0)."""
    inits = [nh.from_array(np.array(3, np.int8), "a_zp"), nh.from_array(np.array(200, np.uint8), "b_zp"),
             nh.from_array(rng.integers(-128, 128, (5, 6)).astype(np.int8), "w"),
             nh.from_array(np.array(0, np.int8), "zero"), nh.from_array(np.array(-9, np.int8), "w_zp")]
    nodes = [h.make_node("MatMulInteger", ["in0", "in1", "a_zp", "b_zp"], ["two_inputs"]),
             h.make_node("MatMulInteger", ["in0", "w", "zero", "w_zp"], ["constant_b"])]
    graph = h.make_graph(nodes, "model", [h.make_tensor_value_info("in0", T.INT8, [1, 3, 5]),
                                          h.make_tensor_value_info("in1", T.UINT8, [1, 5, 4])],
                         [h.make_tensor_value_info("two_inputs", T.INT32, [1, 3, 4]),
                          h.make_tensor_value_info("constant_b", T.INT32, [1, 3, 6])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


FAKE_QUANT = [(-1.3, 2.1, 8, False), (-0.7, 0.6, 4, True), (0.25, 1.5, 5, False), (-2.0, -0.5, 8, True),
              (-2.0, 0.1, 8, False), (-3.0, 3.0, 16, False)]


def _fake_quant(rng, path):
    """fake_quant_with_min_max_vars over FAKE_QUANT (min, max, num_bits, narrow_range)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    def fn(x):
        return tuple(tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits=bits, narrow_range=narrow)
                     for lo, hi, bits, narrow in FAKE_QUANT)
    concrete = tf.function(fn, input_signature=[tf.TensorSpec([1, 4, 6], tf.float32, name="in0")])
    graph = convert_variables_to_constants_v2(concrete.get_concrete_function()).graph.as_graph_def()
    tf.io.write_graph(graph, *path.rsplit("/", 1), as_text=False)


CASES = [
    Case("parser_matmulinteger", "ONNX MatMulInteger of int8 and uint8 graph inputs with zero points, and of an "
         "int8 input and an int8 constant", [(3, 5), (5, 4)], _matmulinteger,
         data=integer_inputs((-128, 127), (0, 255)), input_types=("int8", "uint8")),
    Case("parser_tf_fake_quant", "TensorFlow fake_quant_with_min_max_vars over ranges across, above and below zero, "
         "narrow ranges, 4 to 16 bits", [(4, 6)], _fake_quant, calib_range=(-3.0, 3.0), run_range=(-3.5, 3.5),
         parser={**TF, "output": ",".join(["Identity"] + [f"Identity_{i}" for i in range(1, len(FAKE_QUANT))])}),
]
