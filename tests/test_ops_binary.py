"""Float forwards of the broadcasting arithmetic layers (Add, Sub, Mul, Div,
SquaredDifference, Gemm) against NumPy, and their one-line IR errors."""
import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from npuopt.ops.div import reciprocal_table
from npuopt.ops.squareddifference import signed_bits
from test_ops_float import close, run

torch.manual_seed(0)

SHAPE_PAIRS = [((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (2, 1, 4, 1)), ((2, 1, 5), (3, 1)), ((2, 4), (1,)),
               ((1,), (2, 3, 1, 6))]
NUMPY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


@pytest.mark.parametrize("optype", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("shape_a,shape_b", SHAPE_PAIRS)
def test_arithmetic_broadcasting(optype, shape_a, shape_b):
    a, b = torch.randn(shape_a), torch.randn(shape_b)
    got = run(optype, [a, b], dict(with_activation="NONE"))
    close(got, torch.from_numpy(NUMPY[optype](a.numpy(), b.numpy())))


@pytest.mark.parametrize("act,fn", [("RELU", torch.relu), ("RELU6", lambda x: torch.clamp(x, 0, 6)),
                                    ("LEAKYRELU", lambda x: torch.where(x >= 0, x, 0.1 * x))])
def test_arithmetic_fused_activation(act, fn):
    a, b = torch.randn(2, 3, 4) * 4, torch.randn(3, 1)
    params = dict(with_activation=act, negative_slope_type="float32", negative_slope_value=0.1)
    close(run("Sub", [a, b], params), fn(a - b))


@pytest.mark.parametrize("optype", ["Add", "Mul", "Div", "SquaredDifference"])
def test_integer_inputs_compute_in_float32(optype):
    """As the tool chain: the float forward of integer tensors is float32 (Div a true division)."""
    a, b = torch.tensor([[7, -7, 9]], dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    got = run(optype, [a, b])
    want = {"Add": a + b, "Mul": a * b, "Div": a / b, "SquaredDifference": (a - b) ** 2}[optype]
    assert got.dtype == torch.float32
    close(got, want.to(torch.float32))


@pytest.mark.parametrize("shape_a,shape_b", SHAPE_PAIRS)
def test_div_and_squared_difference(shape_a, shape_b):
    a, b = torch.randn(shape_a), torch.randn(shape_b) + 3.0
    close(run("Div", [a, b]), torch.from_numpy(a.numpy() / b.numpy()))
    close(run("SquaredDifference", [a, b]), torch.from_numpy((a.numpy() - b.numpy()) ** 2))


def test_div_by_zero_is_ieee():
    got = run("Div", [torch.tensor([1.0, -1.0, 0.0]), torch.tensor([0.0])])
    assert got[0] == float("inf") and got[1] == float("-inf") and torch.isnan(got[2])


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("alpha,beta,c_shape", [(1.0, 1.0, (3, 5)), (0.5, -2.0, (5,)), (-1.5, 0.25, (3, 1)),
                                                (2.0, 1.0, None)])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    inputs = [a.t().contiguous() if trans_a else a, b.t().contiguous() if trans_b else b]
    if c_shape is not None:
        inputs.append(torch.randn(c_shape))
    got = run("Gemm", inputs, dict(trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta))
    want = alpha * a.numpy() @ b.numpy() + (beta * inputs[2].numpy() if c_shape is not None else 0.0)
    close(got, torch.from_numpy(want.astype(np.float32)), 1e-4)


def test_gemm_defaults_alpha_beta_to_one():
    a, b, c = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4)
    close(run("Gemm", [a, b, c]), a @ b + c)


# ---- quantization helpers --------------------------------------------------------------
def test_reciprocal_table():
    table = reciprocal_table(8, 8)
    assert table.numel() == 256 and table[0] == 0 and table[1] == 65535 and table[2] == 32768
    assert table[255] == 257
    short = reciprocal_table(16, 8)   # 256 points spread over the 16-bit divisors
    assert short.numel() == 256 and short[1] == round(65535 / (65535 / 255))


def test_signed_bits():
    assert [signed_bits(-128, 127), signed_bits(-129, 127), signed_bits(0, 255), signed_bits(0, 0)] == [8, 9, 9, 1]


# ---- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("optype", ["Add", "Sub", "Mul", "Div", "SquaredDifference"])
def test_shapes_that_do_not_broadcast(optype):
    with pytest.raises(IRError, match=rf"^layer 'op' \({optype}\): input shapes \[2, 3\] and \[4\] do not broadcast$"):
        run(optype, [torch.randn(2, 3), torch.randn(4)])


@pytest.mark.parametrize("optype", ["Add", "Div", "SquaredDifference"])
def test_wrong_number_of_inputs(optype):
    with pytest.raises(IRError, match=rf"layer 'op' \({optype}\): takes 2 inputs, the IR gives 3"):
        run(optype, [torch.randn(2), torch.randn(2), torch.randn(2)])


def test_gemm_errors():
    a, b = torch.randn(3, 4), torch.randn(5, 6)
    with pytest.raises(IRError, match=r"layer 'op' \(Gemm\): A' \[3, 4\] and B' \[5, 6\] do not multiply"):
        run("Gemm", [a, b])
    with pytest.raises(IRError, match=r"layer 'op' \(Gemm\): C of shape \[2, 6\] does not broadcast"):
        run("Gemm", [a, torch.randn(4, 6), torch.randn(2, 6)])
    with pytest.raises(IRError, match=r"layer 'op' \(Gemm\): alpha must be a number, got 'x'"):
        run("Gemm", [a, torch.randn(4, 6)], dict(alpha="x"))
    with pytest.raises(IRError, match=r"layer 'op' \(Gemm\): A of shape \[4\] cannot be multiplied transposed"):
        run("Gemm", [torch.randn(4), torch.randn(4, 6)], dict(trans_a=True))
    with pytest.raises(IRError, match=r"layer 'op' \(Gemm\): takes 2 or 3 inputs, the IR gives 1"):
        run("Gemm", [a])
