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
         data=integer_inputs((-128, 127), (0, 255)), dtypes=("int8", "uint8")),
    Case("parser_tf_fake_quant", "TensorFlow fake_quant_with_min_max_vars over ranges across, above and below zero, "
         "narrow ranges, 4 to 16 bits", [(4, 6)], _fake_quant, calib_range=(-3.0, 3.0), run_range=(-3.5, 3.5),
         parser={**TF, "output": ",".join(["Identity"] + [f"Identity_{i}" for i in range(1, len(FAKE_QUANT))])}),
]


# ---- pre-quantized models: compat_quantized_model=true IRs ---------------------------------
class _Net:
    """A small CNN (convolutions, a depthwise one, MAX and global AVG pooling, a residual
    Add, a fully connected layer, a sigmoid), exported to ONNX in float."""

    @staticmethod
    def export(path: str) -> None:
        import torch
        import torch.nn.functional as F

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.c2 = torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.Conv2d(6, 6, 1)
                self.dw, self.fc = torch.nn.Conv2d(6, 6, 3, padding=1, groups=6), torch.nn.Linear(6, 5)

            def forward(self, x):
                y = F.max_pool2d(torch.relu(self.c1(x)), 2)
                z = F.adaptive_avg_pool2d(self.c2(y) + self.dw(y), 1).flatten(1)
                return torch.sigmoid(self.fc(z))
        torch.onnx.export(Net().eval(), torch.randn(1, 3, 8, 8), path, input_names=["in0"], output_names=["out"],
                          dynamo=False, opset_version=13)


def _quantized(**options):
    """The CNN quantized by onnxruntime.quantization.quantize_static (calibrated on 8 normal
    samples) with `options`."""
    def build(rng, path):
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class Samples(CalibrationDataReader):
            def __init__(self):
                self.samples = iter([{"in0": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)])

            def get_next(self):
                return next(self.samples, None)
        float_path = path[:-len(".onnx")] + "_float.onnx"
        _Net.export(float_path)
        names = {"format": QuantFormat, "activation_type": QuantType, "weight_type": QuantType}
        kw = {("quant_format" if k == "format" else k): getattr(names[k], v) if k in names else v
              for k, v in options.items()}
        quantize_static(float_path, path, Samples(), **kw)
    return build


def _quantize_matmulinteger(rng, path):
    """x -> QuantizeLinear (uint8, zero point 100) -> MatMulInteger with an int8 constant
    (zero point 3) -> Cast to float -> Mul by the two scales' product: the integer product
    of ONNX Runtime's dynamic quantization, with a static input scale."""
    inits = [nh.from_array(np.array(0.02, np.float32), "x_scale"), nh.from_array(np.array(100, np.uint8), "x_zp"),
             nh.from_array(rng.integers(-100, 100, (6, 5)).astype(np.int8), "w"),
             nh.from_array(np.array(3, np.int8), "w_zp"), nh.from_array(np.array(0.02 * 0.01, np.float32), "scale")]
    nodes = [h.make_node("QuantizeLinear", ["in0", "x_scale", "x_zp"], ["xq"]),
             h.make_node("MatMulInteger", ["xq", "w", "x_zp", "w_zp"], ["acc"]),
             h.make_node("Cast", ["acc"], ["acc_float"], to=T.FLOAT),
             h.make_node("Mul", ["acc_float", "scale"], ["out"])]
    graph = h.make_graph(nodes, "model", [h.make_tensor_value_info("in0", T.FLOAT, [1, 4, 6])],
                         [h.make_tensor_value_info("out", T.FLOAT, [1, 4, 5])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _onnxruntime(model_path, inputs):
    """The ONNX model's outputs as onnxruntime computes them, sample by sample (batch 1)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model_path)
    names = [i.name for i in session.get_inputs()]
    runs = [session.run(None, {n: x[i:i + 1] for n, x in zip(names, inputs)}) for i in range(len(inputs[0]))]
    return [np.concatenate(parts) for parts in zip(*runs)]


CASES += [
    Case("parser_qdq", "a CNN quantized by onnxruntime's quantize_static (QDQ, uint8 activations, int8 weights): "
         "a compat_quantized_model IR", [(3, 8, 8)], _quantized(format="QDQ", activation_type="QUInt8"),
         reference=_onnxruntime),
    Case("parser_qdq_per_channel", "the CNN quantized per channel (QDQ, uint8 activations, uint8 weights with "
         "zero points)", [(3, 8, 8)], _quantized(format="QDQ", per_channel=True, activation_type="QUInt8",
                                            weight_type="QUInt8"), reference=_onnxruntime),
    Case("parser_qdq_int8", "the CNN quantized with int8 activations and per-channel int8 weights (QDQ)",
         [(3, 8, 8)], _quantized(format="QDQ", per_channel=True, activation_type="QInt8"), reference=_onnxruntime),
    Case("parser_qoperator", "the CNN quantized to QLinearConv, QLinearAdd, QGemm, ... (QOperator format)",
         [(3, 8, 8)], _quantized(format="QOperator", activation_type="QUInt8"), reference=_onnxruntime),
    Case("parser_quantize_matmulinteger", "QuantizeLinear, MatMulInteger with an int8 constant, Cast and Mul: a "
         "compat_quantized_model IR holding MatMulInteger", [(4, 6)], _quantize_matmulinteger,
         reference=_onnxruntime),
]
