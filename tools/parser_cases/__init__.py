"""Op test cases whose IR the tool chain's parser writes from an ONNX model: one module
per op family, each a list CASES of op_cases.common.Case whose `build(rng, onnx_path)`
writes the ONNX model (inputs in0, in1, ... of shapes (1,) + inputs[i]) and whose
`parser` adds fields to parser.cfg. tools/parser_op_tests.py writes them."""
