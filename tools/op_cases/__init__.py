"""Op test cases by family (see common.py); tools/gen_op_tests.py writes them."""
