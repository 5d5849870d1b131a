"""Integer primitives against brute-force Python integers, and against the tool
chain's definitions written out here in plain Python."""
import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from npuopt.errors import QuantizeError
from npuopt.quant import qmath

random.seed(0)
torch.manual_seed(0)


def py_round_half_even(fr: Fraction) -> int:
    return round(fr)          # Python rounds a Fraction half to even, exactly


def py_requantize(x: int, m: int, s: int, zp: int, lo: int, hi: int) -> int:
    return min(hi, max(lo, py_round_half_even(Fraction(x * m) / Fraction(2) ** s) - zp))


@pytest.mark.parametrize("shift", [0, 1, 2, 7, 15, 31, 40, -1, -5])
def test_requantize_is_exact_round_half_even(shift):
    vals = [random.randint(-(1 << 36), 1 << 36) for _ in range(300)]
    half = 1 << max(shift - 1, 0)
    vals += [half * k for k in range(-9, 10)] + [-1, 0, 1, 3, -3]
    for m in (1, 3, 255, 32767):
        got = qmath.requantize(torch.tensor(vals, dtype=torch.int64), m, shift, 0, -(1 << 62), 1 << 62)
        assert got.to(torch.int64).tolist() == [py_requantize(v, m, shift, 0, -(1 << 62), 1 << 62) for v in vals]


def test_requantize_ties_go_to_even_and_saturate():
    x = torch.tensor([-5, -3, -1, 1, 3, 5, 1000, -1000])       # /2: -2.5 -1.5 -0.5 0.5 1.5 2.5
    assert qmath.requantize(x, 1, 1, 0, -128, 127).tolist() == [-2, -2, 0, 0, 2, 2, 127, -128]
    assert qmath.requantize(x, 1, 1, -3, 0, 255).tolist() == [1, 1, 3, 3, 5, 5, 255, 0]


def test_requantize_per_channel_along_the_last_axis():
    acc = torch.randint(-(1 << 30), 1 << 30, (5, 4), dtype=torch.int64)
    m, s = torch.tensor([1, 200, 32767, 7]), torch.tensor([0, 3, 17, -2])
    got = qmath.requantize(acc, m, s, 0, -(1 << 40), 1 << 40)
    want = [[py_requantize(int(acc[i, j]), int(m[j]), int(s[j]), 0, -(1 << 40), 1 << 40) for j in range(4)]
            for i in range(5)]
    assert got.to(torch.int64).tolist() == want


def test_quantize_in_float32_ties_to_even():
    f = torch.tensor([-10.0, -0.25, 0.25, 0.75, 1.25, 10.0, float("nan"), float("inf"), float("-inf")])
    q = qmath.quantize(f, 2.0, -3, 0, 7)
    want = [min(7, max(0, py_round_half_even(Fraction(float(np.float32(v) * np.float32(2.0) + np.float32(3))))))
            for v in f[:6].tolist()]
    assert q[:6].tolist() == want and q[6:].tolist() == [0, 7, 0]


def test_dequantize_inverse():
    q = torch.tensor([0, 3, 255], dtype=torch.uint8)
    assert qmath.dequantize(q, 2.0, -3).tolist() == [-1.5, 0.0, 126.0]


@pytest.mark.parametrize("bits", [8, 13, 15])
def test_scale_approximation_bounds(bits):
    ratios = [10 ** random.uniform(-7, 3) for _ in range(1000)] + [1.0, 0.5, 2.0, 3.0, 1 / 3]
    for r in ratios:
        m, s = qmath.scale_approximation(r, bits)
        assert 0 < m < (1 << bits) and s <= 31, (r, m, s)
        if s < 31:      # the shift is capped at 31: tiny ratios lose bits
            assert abs(m / 2.0 ** s - r) <= r * 2.0 ** -(bits - 2), (r, m, s)
    assert qmath.scale_approximation(1.0, 8) == (1, 0)
    m, s = qmath.scale_approximation(torch.tensor([0.25, 3e-3, 7.0]), bits)
    assert m.tolist() == [qmath.scale_approximation(r, bits)[0] for r in (0.25, 3e-3, 7.0)]


def test_scale_approximation_force_shift_positive():
    m, s = qmath.scale_approximation(1000.0, 8, force_shift_positive=True)
    assert (m, s) == (255, 0)


def test_unify_shifts_shares_one_shift_within_32767():
    m, s = qmath.scale_approximation(torch.tensor([1e-3, 0.02, 0.7, 3.0]), 15)
    um, us = qmath.unify_shifts(m, s)
    assert len(set(us.tolist())) == 1 and int(um.max()) <= 32767
    ratio = torch.tensor([1e-3, 0.02, 0.7, 3.0], dtype=torch.float64)
    # one common shift: each channel is off by at most one step of it (small channels lose bits)
    err = (um.double() / 2.0 ** us.double() - ratio).abs()
    assert bool((err <= 2.0 ** -us.double() + ratio * 2.0 ** -14).all())


@pytest.mark.parametrize("lo,hi", [(-1.0, 3.0), (-0.3, 2.0), (-4.0, 0.0)])
def test_linear_quant_params_asymmetric(lo, hi):
    scale, zp, qmin, qmax = qmath.linear_quant_params(lo, hi, 8, symmetric=False, full_range=True, signed=True)
    assert (qmin, qmax) == (-128, 127) and -127 <= zp <= 127
    q = qmath.quantize(torch.tensor([lo, 0.0, hi]), scale, zp, qmin, qmax).tolist()
    assert q[0] == -128 and q[2] in (126, 127)
    assert qmath.dequantize(torch.tensor([q[1]]), scale, zp).item() == pytest.approx(0.0, abs=0.5 / scale)


def test_linear_quant_params_zero_point_is_kept_within_the_tool_chains_limits():
    # unsigned, mostly negative: round(lo * scale) = -204 is clamped to -127
    scale, zp, qmin, qmax = qmath.linear_quant_params(-4.0, 1.0, 8, symmetric=False, full_range=True, signed=False)
    assert (qmin, qmax, zp) == (0, 255, -127)


def test_linear_quant_params_symmetric():
    s, zp, qmin, qmax = qmath.linear_quant_params(-2.0, 1.0, 8, True, full_range=False, signed=True)
    assert (zp, qmin, qmax) == (0, -127, 127) and s == pytest.approx(127 / 2)
    s, zp, qmin, qmax = qmath.linear_quant_params(-2.0, 1.0, 8, True, full_range=True, signed=True)
    assert (qmin, qmax) == (-128, 127) and s == pytest.approx(255 / 4)
    s, zp, qmin, qmax = qmath.linear_quant_params(0.0, 6.0, 8, True, True, signed=False)
    assert (zp, qmin, qmax) == (0, 0, 255) and s == pytest.approx(255 / 6)
    s, zp, qmin, qmax = qmath.linear_quant_params(torch.tensor([-1.0, -0.5]), torch.tensor([0.5, 2.0]), 4, True,
                                                  full_range=False, signed=True)
    assert s.tolist() == pytest.approx([7.0, 3.5]) and zp.tolist() == [0, 0] and (qmin, qmax) == (-7, 7)
    assert qmath.linear_quant_params(0.0, 0.0, 8, True, True, True)[0] == 1.0


def py_lut(index: int, table, index_bits: int, lo: int, hi: int) -> int:
    k = len(table).bit_length() - 1
    b = index_bits - k
    padded = list(table) + [table[-1]]
    if b <= 0:
        return min(hi, max(lo, padded[index]))
    i, r = index >> b, index & ((1 << b) - 1)
    return min(hi, max(lo, padded[i] + (((padded[i + 1] - padded[i]) * r) >> b)))


@pytest.mark.parametrize("index_bits,k", [(8, 8), (16, 8), (8, 6), (16, 10)])
def test_lut_lookup_matches_python(index_bits, k):
    table = torch.randint(-30000, 30000, (1 << k,))
    index = torch.randint(0, 1 << index_bits, (3000,))
    index[:2] = torch.tensor([0, (1 << index_bits) - 1])
    got = qmath.lut_lookup(index, table, index_bits, 16, True).tolist()
    assert got == [py_lut(v, table.tolist(), index_bits, -32768, 32767) for v in index.tolist()]


def test_lut_lookup_refuses_a_table_not_a_power_of_two():
    with pytest.raises(QuantizeError):
        qmath.lut_lookup(torch.tensor([1]), torch.zeros(100), 8, 8, True)


def int64_conv(x, w, stride, pad, dil, groups):
    """Brute force: sum over kernel taps of int64 products (NCHW/OIHW)."""
    x = torch.nn.functional.pad(x, (pad[1], pad[1], pad[0], pad[0]))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = torch.zeros(n, o, oh, ow, dtype=torch.int64)
    og = o // groups
    for g in range(groups):
        xg = x[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dil[0]: i * dil[0] + stride[0] * (oh - 1) + 1: stride[0],
                           j * dil[1]: j * dil[1] + stride[1] * (ow - 1) + 1: stride[1]]
                out[:, g * og:(g + 1) * og] += torch.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    return out


@pytest.mark.parametrize("case", ["extreme", "random", "grouped", "depthwise", "strided"])
def test_exact_conv2d_vs_int64(case):
    if case == "extreme":      # every partial sum large: forces chunking (K = 9*300 taps of 255*127)
        x = torch.full((1, 300, 5, 5), 255, dtype=torch.int64)
        x[:, ::7] = -256
        w = torch.full((4, 300, 3, 3), 127, dtype=torch.int64)
        w[1] = -128
        args = ((1, 1), (1, 1), (1, 1), 1)
    elif case == "random":
        x = torch.randint(-256, 256, (2, 64, 7, 6))
        w = torch.randint(-128, 128, (8, 64, 3, 3))
        args = ((1, 1), (0, 0), (1, 1), 1)
    elif case == "grouped":
        x = torch.full((1, 400, 4, 4), -255, dtype=torch.int64)
        w = torch.full((8, 200, 3, 3), -127, dtype=torch.int64)
        args = ((1, 1), (1, 1), (1, 1), 2)
    elif case == "depthwise":
        x = torch.randint(-256, 256, (1, 16, 9, 9))
        w = torch.randint(-128, 128, (16, 1, 5, 5))
        args = ((2, 2), (2, 2), (1, 1), 16)
    else:
        x = torch.randint(0, 65536, (1, 32, 9, 9))
        w = torch.randint(-128, 128, (6, 32, 3, 3))
        args = ((2, 1), (1, 0), (2, 1), 1)
    absmax = int(x.abs().max())
    stride, pad, dil, groups = args
    plan = qmath.ConvPlan(w.to(torch.int8 if w.abs().max() < 128 else torch.int16), absmax, "cpu")
    xp = torch.nn.functional.pad(x.float(), (pad[1], pad[1], pad[0], pad[0]))
    got = qmath.exact_conv2d(xp, absmax, stride, dil, groups, plan)
    want = int64_conv(x, w, *args)
    assert got.dtype in (torch.float32, torch.float64)
    assert torch.equal(got.to(torch.int64), want)
    assert float(got.abs().max()) <= qmath.l1_bound(w, absmax)


def test_exact_matmul_vs_int64():
    a = torch.full((3, 2000), 255, dtype=torch.int64)
    a[1] = -256
    b = torch.full((2000, 5), 127, dtype=torch.int64)
    b[:, 2] = -128
    got = qmath.exact_matmul(a.float(), b.to(torch.int16), 256)
    assert torch.equal(got.to(torch.int64), a @ b)
    a = torch.randint(-128, 128, (2, 3, 50))
    b = torch.randint(-128, 128, (50, 7))
    assert torch.equal(qmath.exact_matmul(a, b).to(torch.int64), a @ b)


