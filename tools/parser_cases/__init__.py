"""Op test cases whose IR the tool chain's parser writes from an ONNX model (or a
TensorFlow frozen graph): one module per op family, each a list CASES of
op_cases.common.Case whose `build(rng, model_path)` writes the model (inputs in0, in1,
... of shapes (1,) + inputs[i]) and whose `parser` adds fields to parser.cfg
(`model_type = tf`: the model is a frozen GraphDef, model.pb; `output`: the TensorFlow
graph's output nodes; `input_shape`: the inputs' shapes as the parser reads them, where
they are not (1,) + inputs[i]). tools/parser_op_tests.py writes them."""
