"""Integer primitives against brute-force Python integers / int64 references."""
import math
import random

import pytest
import torch

from npuopt.errors import QuantizeError
from npuopt.quant import qmath

random.seed(0)
torch.manual_seed(0)


def py_rrs(a: int, s: int) -> int:
    if s > 0:
        return (a + (1 << (s - 1))) >> s      # Python >> is floor: arithmetic shift
    return a << -s if s < 0 else a


def test_round_half_up_ties_and_negatives():
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.49, 0.49, -3.51])
    assert qmath.round_half_up(x).tolist() == [-2, -1, 0, 1, 2, 3, 0, 0, -4]


def test_quantize_matches_python_and_saturates():
    f = torch.tensor([-10.0, -0.26, -0.25, 0.0, 0.25, 0.74, 0.75, 10.0, float("nan"), float("inf")])
    q = qmath.quantize(f, 2.0, -3, 0, 7)
    want = [min(7, max(0, math.floor(v * 2.0 + 3 + 0.5))) for v in [-10.0, -0.26, -0.25, 0.0, 0.25, 0.74, 0.75, 10.0]]
    assert q[:8].tolist() == want
    assert q[8].item() == 0 and q[9].item() == 7
    assert q.dtype == torch.int64


def test_dequantize_inverse():
    q = torch.tensor([0, 3, 255], dtype=torch.uint8)
    assert qmath.dequantize(q, 2.0, -3).tolist() == [-1.5, 0.0, 126.0]


@pytest.mark.parametrize("shift", [0, 1, 2, 7, 15, 31, 40, -1, -5])
def test_rounding_right_shift_scalar(shift):
    vals = [random.randint(-(1 << 40), 1 << 40) for _ in range(300)]
    vals += [-(1 << max(shift - 1, 0)) * k for k in range(-4, 5)] + [(1 << max(shift - 1, 0)) * k for k in range(-4, 5)]
    vals += [-1, 0, 1, 3, -3]
    got = qmath.rounding_right_shift(torch.tensor(vals, dtype=torch.int64), shift).tolist()
    assert got == [py_rrs(v, shift) for v in vals]


def test_rounding_right_shift_ties_go_up():
    x = torch.tensor([-3, -2, -1, 1, 2, 3])  # /2 -> -1.5 -1 -0.5 0.5 1 1.5
    assert qmath.rounding_right_shift(x, 1).tolist() == [-1, -1, 0, 1, 1, 2]


def test_rounding_right_shift_per_channel():
    acc = torch.randint(-(1 << 30), 1 << 30, (5, 4), dtype=torch.int64)
    shifts = torch.tensor([0, 3, 17, -2])
    got = qmath.rounding_right_shift(acc, shifts)
    want = [[py_rrs(int(acc[i, j]), int(shifts[j])) for j in range(4)] for i in range(5)]
    assert got.tolist() == want


@pytest.mark.parametrize("bits", [8, 15, 16])
def test_multiplier_and_shift_error_bound(bits):
    ratios = [10 ** random.uniform(-9, 4) * random.choice([1, -1]) for _ in range(2000)]
    ratios += [1.0, 0.5, 2.0, 1 - 1e-12, 2 ** -20, 3.0, (2 ** bits - 0.5) / 2 ** bits]
    for r in ratios:
        m, s = qmath.multiplier_and_shift(r, bits)
        assert (1 << (bits - 1)) <= abs(m) < (1 << bits), (r, m, s)
        assert (m < 0) == (r < 0)
        assert abs(m / 2.0 ** s - r) <= abs(r) * 2.0 ** -bits * (1 + 1e-12), (r, m, s)


def test_multiplier_and_shift_edges_and_tensors():
    assert qmath.multiplier_and_shift(0.0) == (0, 0)
    m, s = qmath.multiplier_and_shift(1e-30)          # shift capped: M shrinks
    assert s == qmath.MAX_SHIFT and m == math.floor(1e-30 * 2.0 ** s + 0.5)
    m, s = qmath.multiplier_and_shift(1e12)           # huge: saturated left shift
    assert s == qmath.MIN_SHIFT and m == (1 << 15) - 1
    mt, st = qmath.multiplier_and_shift(torch.tensor([0.25, 3e-3, 7.0]))
    assert mt.tolist() == [qmath.multiplier_and_shift(r)[0] for r in (0.25, 3e-3, 7.0)]
    assert st.dtype == torch.int64


def test_requantize_matches_python():
    acc = torch.randint(-(1 << 24), 1 << 24, (1000,), dtype=torch.int64)
    m, s = qmath.multiplier_and_shift(0.0123)
    got = qmath.requantize(acc, m, s, -7, 0, 255)
    want = [min(255, max(0, py_rrs(int(a) * m, s) + 7)) for a in acc]
    assert got.tolist() == want


def test_round_div_matches_python():
    num = torch.randint(-1000, 1000, (2000,))
    den = torch.randint(1, 50, (2000,))
    got = qmath.round_div(num, den).tolist()
    assert got == [math.floor(n / d + 0.5) if (2 * n + d) % (2 * d) else (2 * n + d) // (2 * d)
                   for n, d in zip(num.tolist(), den.tolist())]
    assert qmath.round_div(torch.tensor([-3, 3, -1, 1]), 2).tolist() == [-1, 2, 0, 1]


@pytest.mark.parametrize("lo,hi", [(-1.0, 3.0), (0.5, 2.0), (-4.0, -1.0), (0.0, 0.0)])
def test_scale_zp_asymmetric(lo, hi):
    scale, zp, qmin, qmax, signed = qmath.scale_zp_from_range(lo, hi, 8, symmetric=False)
    assert (qmin, qmax, signed) == (0, 255, False)
    lo_, hi_ = min(lo, 0.0), max(hi, 0.0)
    q = qmath.quantize(torch.tensor([lo_, 0.0, hi_]), scale, zp, qmin, qmax).tolist()
    assert q[0] == 0 and (q[2] in (254, 255) or hi_ == lo_)
    assert qmath.dequantize(torch.tensor([q[1]]), scale, zp).item() == 0.0   # 0 is exact


def test_scale_zp_symmetric():
    s, zp, qmin, qmax, signed = qmath.scale_zp_from_range(-2.0, 1.0, 8, True, restricted=True)
    assert (zp, qmin, qmax, signed) == (0, -127, 127, True) and s == pytest.approx(127 / 2)
    s, zp, qmin, qmax, signed = qmath.scale_zp_from_range(-2.0, 1.0, 8, True, restricted=False)
    assert (qmin, qmax) == (-128, 127) and s == pytest.approx(127.5 / 2)
    s, zp, qmin, qmax, signed = qmath.scale_zp_from_range(0.0, 6.0, 8, True)
    assert (zp, qmin, qmax, signed) == (0, 0, 255, False) and s == pytest.approx(255 / 6)
    s, zp, qmin, qmax, _ = qmath.scale_zp_from_range(torch.tensor([-1.0, -0.5]), torch.tensor([0.5, 2.0]), 4, True,
                                                     restricted=True, signed=True)
    assert s.tolist() == pytest.approx([7.0, 3.5]) and zp.tolist() == [0, 0] and (qmin, qmax) == (-7, 7)


def test_lut_exact_for_8_bit():
    lut = qmath.build_lut(torch.sigmoid, 16.0, 0, -128, 8, 8, 255.0, 0, 0, 255)
    assert lut.numel() == 256
    q = torch.arange(-128, 128)
    got = qmath.lut_lookup(q, lut, -128, 8)
    want = torch.floor(torch.sigmoid(q.double() / 16.0) * 255 + 0.5)
    assert got.tolist() == want.long().tolist()


def test_lut_interpolates_16_bit_in_integers():
    lut = qmath.build_lut(torch.tanh, 4096.0, 0, -32768, 16, 8, 32767.0, 0, -32768, 32767)
    q = torch.randint(-32768, 32768, (3000,))
    got = qmath.lut_lookup(q, lut, -32768, 16).tolist()
    L = lut.tolist()
    for v, g in zip(q.tolist(), got):
        d = v + 32768
        i, r = d >> 8, d & 255
        j = min(max(i + 1, 1), 255)
        assert g == L[i] + py_rrs((L[j] - L[j - 1]) * r, 8)
    err = (torch.tensor(got) - torch.tanh(q.double() / 4096) * 32767).abs().max()
    assert err < 40  # 256 segments of a smooth function


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
    got = qmath.exact_conv2d(x.float(), w.to(torch.int8 if w.abs().max() < 128 else torch.int16),
                             absmax, *args)
    want = int64_conv(x, w, *args)
    assert got.dtype in (torch.float32, torch.float64)
    assert torch.equal(got.to(torch.int64), want)
    assert float(got.abs().max()) <= qmath.conv_bound(w, absmax)


def test_exact_matmul_vs_int64():
    a = torch.full((3, 2000), 255, dtype=torch.int64)
    a[1] = -256
    b = torch.full((2000, 5), 127, dtype=torch.int64)
    b[:, 2] = -128
    got = qmath.exact_matmul(a.float(), b.to(torch.int16), 256)
    assert torch.equal(got, a @ b)
    a = torch.randint(-128, 128, (2, 3, 50))
    b = torch.randint(-128, 128, (50, 7))
    assert torch.equal(qmath.exact_matmul(a, b), a @ b)


@pytest.mark.parametrize("per_channel", [False, True])
def test_requantize_exact_fast_path_equals_int64_formula(per_channel):
    acc = torch.randint(-(1 << 23), 1 << 23, (64, 6), dtype=torch.int64)
    acc[0] = 1 << 23
    acc[1] = -(1 << 23)
    bias = torch.randint(-(1 << 20), 1 << 20, (6,))
    if per_channel:
        ratios = torch.tensor([1e-5, 3e-4, 0.02, 0.7, 3.0, 1e-9])
        M, s = qmath.multiplier_and_shift(ratios)
    else:
        M, s = qmath.multiplier_and_shift(0.00137)
    for zp in (0, -128, 37):
        fast = qmath.requantize_exact(acc.to(torch.float32), M, s, bias, zp, bound=float(1 << 23))
        slow = qmath.requantize_exact(acc, M, s, bias, zp)
        assert fast.dtype == torch.float64 and slow.dtype == torch.int64
        ref = [[py_rrs((int(acc[i, j]) + int(bias[j])) * int(M[j] if per_channel else M),
                       int(s[j] if per_channel else s)) - zp for j in range(6)] for i in range(64)]
        assert slow.tolist() == ref
        assert fast.to(torch.int64).tolist() == ref


def test_requantize_exact_ties():
    # (acc * M) / 2^s exactly at .5: rounds up, also for negatives
    acc = torch.tensor([-3.0, -1.0, 1.0, 3.0, 5.0])
    got = qmath.requantize_exact(acc, 1, 1, None, 0, bound=5.0)
    assert got.tolist() == [-1.0, 0.0, 1.0, 2.0, 3.0]


# ---- integer square root and even normalization (LayerNorm) -------------------------
def test_isqrt_is_the_exact_floor():
    edges = [0, 1, 2, 3, 4, 15, 16, 17, (1 << 31) - 1, 1 << 52, (1 << 53) + 1, (1 << 62) - 1]
    squares = [k * k + d for k in (3, 1 << 26, (1 << 31) - 1, 3037000499) for d in (-1, 0, 1) if k * k + d < 1 << 62]
    rand = [random.randrange(1 << random.randrange(1, 63)) for _ in range(2000)]
    values = edges + squares + rand
    got = qmath.isqrt(torch.tensor(values, dtype=torch.int64)).tolist()
    assert got == [math.isqrt(v) for v in values]


def test_isqrt_refuses_negative_and_too_large():
    with pytest.raises(QuantizeError):
        qmath.isqrt(torch.tensor([-1]))
    with pytest.raises(QuantizeError):
        qmath.isqrt(torch.tensor([1 << 62]))


@pytest.mark.parametrize("limit", [62, 40, 9])
def test_even_normalize_is_the_largest_even_left_shift(limit):
    values = [1, 2, 3, 4, 5, (1 << (limit - 2)) - 1, 1 << (limit - 2), (1 << (limit - 1)) + 3, (1 << limit) - 1,
              1 << limit] + [random.randrange(1, 1 << limit) for _ in range(500)]
    got, j = qmath.even_normalize(torch.tensor(values, dtype=torch.int64), limit)
    for v, g, k in zip(values, got.tolist(), j.tolist()):
        want = max(0, (limit - v.bit_length()) // 2)
        assert k == want and g == v << (2 * k), (v, k, want)
        assert k == 0 or g < 1 << limit <= g << 2


def test_even_normalize_needs_positive_values():
    with pytest.raises(QuantizeError):
        qmath.even_normalize(torch.tensor([0, 5]))
