"""The unary math layers: float forwards against PyTorch/NumPy, the tool chain's
NaN/inf handling, one-line errors, and quantized forms checked on every input code."""
import math

import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from test_ops_float import run
from test_quantize_ops import one_layer, quantize

X = torch.linspace(-4.0, 4.0, 97).reshape(1, 97)
UNIT = torch.linspace(-0.99, 0.99, 45).reshape(1, 45)

REFERENCES = {
    "Abs": torch.abs, "Negative": torch.neg, "Sign": torch.sign, "Square": torch.square,
    "Sqrt": torch.sqrt, "Rsqrt": torch.rsqrt, "Reciprocal": torch.reciprocal, "Exp": torch.exp,
    "Log": torch.log, "Erf": torch.erf, "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round,
    "Trunc": torch.trunc, "Sine": torch.sin, "Cosine": torch.cos, "Tan": torch.tan, "Sinh": torch.sinh,
    "Cosh": torch.cosh, "Atan": torch.atan, "Asinh": torch.asinh, "Acosh": torch.acosh,
    "BNLL": torch.nn.functional.softplus,
}


def same(got, want):
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("optype", sorted(REFERENCES))
def test_float_forward(optype):
    same(run(optype, [X]), REFERENCES[optype](X))


@pytest.mark.parametrize("optype,fn", [("Asin", torch.asin), ("Acos", torch.acos), ("Atanh", torch.atanh)])
def test_inverse_functions_inside_their_domain(optype, fn):
    same(run(optype, [UNIT]), fn(UNIT))


def test_round_is_half_to_even():
    x = torch.tensor([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]])
    assert run("Round", [x]).tolist() == [[-2.0, -2.0, -0.0, 0.0, 2.0, 2.0]]


def test_asin_outside_its_domain_gives_int32_max():
    """2^31 - 1 in float32 (that is 2^31)."""
    got = run("Asin", [torch.tensor([[-1.5, 0.5, 2.0]])])
    assert got[0, 0].item() == got[0, 2].item() == 2.0 ** 31
    assert got[0, 1].item() == pytest.approx(math.asin(0.5))


def test_atanh_saturates_to_the_largest_float32():
    big = torch.finfo(torch.float32).max
    got = run("Atanh", [torch.tensor([[-1.0, 1.0, 3.0, 0.5]])])
    assert got[0, :3].tolist() == [-big, big, big]
    assert got[0, 3].item() == pytest.approx(math.atanh(0.5))


def test_sqrt_and_log_keep_nan_and_inf():
    x = torch.tensor([[-1.0, 0.0, 4.0]])
    sqrt, log = run("Sqrt", [x]), run("Log", [x])
    assert math.isnan(sqrt[0, 0]) and sqrt[0, 2] == 2.0
    assert math.isnan(log[0, 0]) and log[0, 1] == -math.inf


def test_bnll_is_exact_for_large_inputs():
    x = torch.tensor([[-100.0, 100.0]])
    same(run("BNLL", [x]), torch.tensor([[float(np.log1p(np.exp(-100.0))), 100.0]]))


@pytest.mark.parametrize("optype", ["Abs", "Sqrt", "Sine", "Negative"])
def test_two_inputs_are_refused(optype):
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\): takes 1 input and 1 output, the IR gives 2"):
        run(optype, [X, X])


# ---- quantized -----------------------------------------------------------------------
def quantized_run(optype, lo, hi, bits=8, **settings):
    """Calibrated on [lo, hi] and run on 2^bits points of it (every input code once)."""
    test_in = [torch.linspace(lo, hi, 1 << bits).reshape(1, 1 << bits)]
    graph = one_layer(optype, [(1 << bits,)])
    qg = quantize(graph, [test_in], activation_bits=bits, **settings)
    got = qg.forward(test_in, keep_tensors=True)[0]
    inp, out = qg.input_tensors[0], qg.output_tensors[0]
    x = (inp.betensor.double() + inp.zerop) / inp.scale
    return x, got.double(), out


@pytest.mark.parametrize("method", ["per_tensor_symmetric_full_range", "per_tensor_asymmetric"])
@pytest.mark.parametrize("lo,hi", [(-2.0, 3.0), (0.0, 2.0)])
def test_negative_is_exact_on_every_code(method, lo, hi):
    x, q, out = quantized_run("Negative", lo, hi, quantize_method_for_activation=method)
    assert out.dtype.is_signed
    assert torch.equal((q + out.zerop) / out.scale, -x)


@pytest.mark.parametrize("optype,fn,lo,hi", [
    ("Sqrt", torch.sqrt, 0.0, 3.0), ("Exp", torch.exp, -2.0, 1.0),
    ("Log", torch.log, 0.2, 3.0), ("Floor", torch.floor, -2.0, 2.0), ("Sine", torch.sin, -3.0, 3.0)])
@pytest.mark.parametrize("method", ["per_tensor_symmetric_full_range", "per_tensor_symmetric_restricted_range"])
def test_quantized_within_one_step(optype, fn, lo, hi, method):
    """8-bit tables hold fn at every code (from the type's base), so every output is fn
    rounded into the output's quantization."""
    x, q, out = quantized_run(optype, lo, hi, quantize_method_for_activation=method)
    want = fn(x).clamp((out.qmin + out.zerop) / out.scale, (out.qmax + out.zerop) / out.scale)
    assert ((q + out.zerop) / out.scale - want).abs().max() <= 0.5 / out.scale + 1e-9


@pytest.mark.parametrize("method", ["per_tensor_symmetric_full_range", "per_tensor_asymmetric"])
def test_abs_is_a_rescale(method):
    """|q + zp| times an 8-bit multiplier: within 1.5 steps of |x| at 8 bits."""
    x, q, out = quantized_run("Abs", -2.0, 3.0, quantize_method_for_activation=method)
    assert not out.dtype.is_signed
    assert ((q + out.zerop) / out.scale - x.abs()).abs().max() <= 1.5 / out.scale


@pytest.mark.parametrize("optype", ["Sqrt", "Log"])
def test_outside_the_domain_is_code_zero(optype):
    x, q, out = quantized_run(optype, -1.0, 3.0, quantize_method_for_activation="per_tensor_asymmetric")
    assert out.zerop != 0 or optype == "Sqrt"
    assert torch.all(q[x < 0] == 0)


@pytest.mark.parametrize("optype,fn", [("Sine", torch.sin), ("Cosine", torch.cos)])
def test_wide_sine_and_cosine_take_one_period(optype, fn):
    """16 bits: a rescale to steps of a 256-entry period, nearest entry: within half a step."""
    x, q, out = quantized_run(optype, -9.0, 9.0, bits=16)
    assert out.scale == 32767 and out.zerop == 0
    assert ((q / 32767) - fn(x)).abs().max() <= math.pi / 256 + 1e-3


def test_sign_is_integer_valued():
    x, q, out = quantized_run("Sign", -2.0, 3.0)
    assert (out.scale, out.zerop, out.qinvariant) == (1.0, 0, True)
    assert torch.equal(q, torch.sign(x))
