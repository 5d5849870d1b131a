"""Quantize functions and integer forwards of FullyConnected, BatchNorm, MatMul, Reduce,
Split, Slice, Pad, Resize and Constant: integer outputs in range, dequantized outputs
close to float, bit-exact save/reload, the stored numbers in use, and (for the layers
with an output stage) the integers of docs/integer-semantics.md recomputed here in
plain int64 from the stored numbers only."""
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from npuopt.ir import read_graph
from npuopt.ir.builder import GraphBuilder
from tests.test_quantize_ops import METHODS, batches, check, one_layer, perturbed_output, quantize


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")


# ---- the doc's formulas, independently --------------------------------------------
def rhe(v, m, s):
    """round_half_even(v * m / 2^s) in exact int64 (s an int or a per-channel tensor; s < 0 shifts left)."""
    s = torch.as_tensor(s, dtype=torch.int64)
    prod = v.long() * torch.as_tensor(m, dtype=torch.int64)
    right, left = s.clamp(min=0), (-s).clamp(min=0)
    prod = prod * (2 ** left)
    q = torch.div(prod, 2 ** right, rounding_mode="floor")
    rem = prod - q * (2 ** right)
    half = torch.where(right > 0, 2 ** (right - 1).clamp(min=0), torch.zeros_like(right))
    up = (right > 0) & ((rem > half) | ((rem == half) & (q % 2 == 1)))
    return q + up.long()


def stored_rescale(node):
    if "scale" in node.constants:
        return node.constants["scale"].betensor.long(), node.constants["shift"].betensor.long()
    return int(node.params["scale_value"]), int(node.params["shift_value"])


def output_stage(node, z, out_t):
    """The fused activation and the rescale of docs/integer-semantics.md on accumulator z
    (per-channel numbers on its last axis), minus zp_out, clamped to the output's range."""
    M, s = stored_rescale(node)
    act = str(node.params.get("with_activation", "NONE")).upper()
    if act == "RELU":        # through float32, as the tool chain
        y = rhe(z.float().clamp(min=0).long(), M, s)
    elif act == "RELU6":
        y = rhe(z.clamp(min=0), M, s)
    elif act == "CLIP":
        relay = 8 if out_t.qbits <= 8 else 0
        y = rhe(rhe(z, M, s - relay).clamp(int(node.params["clip_min"]), int(node.params["clip_max"])), 1, relay)
    elif act == "LEAKYRELU":
        t = rhe(z.clamp(max=0), int(node.params["negative_slope_value"]), int(node.params["negative_slope_shift"]))
        y = rhe(t + z.clamp(min=0), M, s)
    else:
        y = rhe(z, M, s)
    return (y - int(out_t.zerop)).clamp(out_t.qmin, out_t.qmax)


def shifted(t):
    return t.betensor.long() + int(t.zerop)


def weights_of(node):
    """q_w + zp_w (zp per channel along axis 0)."""
    c = node.constants["weights"]
    w = c.betensor.long()
    zp = torch.as_tensor(c.zerop, dtype=torch.int64)
    return w + (zp.reshape(()) if zp.numel() == 1 else zp.reshape((-1,) + (1,) * (w.dim() - 1)))


def bias_of(node):
    """The stored biases: the input zero point is folded in (the input enters as q, not q + zp)."""
    return node.constants["biases"].betensor.long() if "biases" in node.constants else 0


def run_keep(qg, test_in):
    return qg.forward(test_in, keep_tensors=True)[0].clone()


def assert_multiplier_matters(back, path, test_in):
    """Changing the stored multiplier (per-channel constant in the .bin, or the param) changes the output."""
    base = back.forward(test_in)[0].clone()
    text = path.read_text()
    found = re.search(r"^scale_offset=(\d+)", text, re.M)
    if found:
        raw = bytearray(path.with_suffix(".bin").read_bytes())
        raw[int(found.group(1)) + 1] ^= 0x20          # high byte of channel 0's uint16 multiplier
        path.with_suffix(".bin").write_bytes(bytes(raw))
        changed = read_graph(str(path)).forward(test_in)[0]
    else:
        m = int(re.search(r"^scale_value=(-?\d+)", text, re.M).group(1))
        changed = perturbed_output(path, test_in, r"^scale_value=-?\d+", f"scale_value={m // 2}")
    assert not torch.equal(changed, base)


# ---- FullyConnected ------------------------------------------------------------------
@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("act", ["NONE", "RELU6", "LEAKYRELU"])
def test_fully_connected(tmp_path, mode, act):
    params = dict(num_output=6, with_activation=act, negative_slope_value=0.1)
    g = one_layer("FullyConnected", [(3, 10)], params, {"weights": torch.randn(6, 10) * 0.3,
                                                        "biases": torch.randn(6) * 0.2})
    qg, got, back, path = check(g, batches((3, 10)), tmp_path, tol_abs=0.05, **METHODS[mode])
    node = qg.node("op")
    assert node.constants["weights"].betensor.dtype in (torch.int8, torch.uint8)
    assert node.constants["biases"].betensor.dtype == torch.int32
    assert ("scale" in node.constants) == METHODS[mode]["quantize_method_for_weight"].startswith("per_channel")
    test_in = list(batches((3, 10), n=1)[0])
    got = run_keep(qg, test_in)
    z = node.inputs[0].betensor.long() @ weights_of(node).t() + bias_of(node)
    assert torch.equal(got.long(), output_stage(node, z, node.outputs[0]))
    assert_multiplier_matters(back, path, test_in)


def test_fully_connected_16bit_is_exact_beyond_float32():
    """16-bit inputs and many features: sums far beyond 2^24, still the exact integers."""
    g = one_layer("FullyConnected", [(300,)], dict(num_output=5), {"weights": torch.randn(5, 300),
                                                                   "biases": torch.randn(5)})
    data = batches((300,), n=2, lo=-3, hi=5)
    qg = quantize(g, data, activation_bits=16, **ASYM)
    test_in = list(data[0])
    got = run_keep(qg, test_in)
    node = qg.node("op")
    z = node.inputs[0].betensor.long() @ weights_of(node).t() + bias_of(node)
    assert int(z.abs().max()) > 1 << 24
    assert node.outputs[0].dtype.value == "int16" and torch.equal(got.long(), output_stage(node, z, node.outputs[0]))


# ---- BatchNorm -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("axis", [-1, 2])
def test_batchnorm(tmp_path, mode, axis):
    channels = 3 if axis == -1 else 5
    w = torch.rand(channels) * 2 - 0.5          # mixed signs, one scale per channel
    g = one_layer("BatchNorm", [(4, 5, 3)], dict(axis=axis), {"weights": w, "biases": torch.randn(channels)})
    qg, got, back, path = check(g, batches((4, 5, 3)), tmp_path, tol_abs=0.05, **METHODS[mode])
    node = qg.node("op")
    test_in = list(batches((4, 5, 3), n=1)[0])
    got = run_keep(qg, test_in)
    a = node.inputs[0].betensor.long().movedim(axis, -1)
    z = a * weights_of(node) + bias_of(node)
    assert torch.equal(got.long(), output_stage(node, z, node.outputs[0]).movedim(-1, axis))
    assert_multiplier_matters(back, path, test_in)


# ---- MatMul --------------------------------------------------------------------------
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("bits", [8, 16])
def test_matmul(tmp_path, trans_a, trans_b, bits):
    a_shape = (2, 8, 4) if trans_a else (2, 4, 8)
    b_shape = (1, 5, 8) if trans_b else (1, 8, 5)           # broadcast over a's axis 1
    g = one_layer("MatMul", [a_shape, b_shape], dict(trans_a=trans_a, trans_b=trans_b), n_inputs=2)
    data = [(torch.randn(3, *a_shape), torch.rand(3, *b_shape) * 2 - 0.5) for _ in range(3)]
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=3 if bits == 8 else 300, tol_abs=0.02,
                                activation_bits=bits, **ASYM)
    node = qg.node("op")
    assert "scale_value" in node.params and "activation_qmin" not in node.params
    test_in = list(data[0])
    got = run_keep(qg, test_in)
    a, b = shifted(node.inputs[0]), shifted(node.inputs[1])
    a = a.transpose(-1, -2) if trans_a else a
    b = b.transpose(-1, -2) if trans_b else b
    z = (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(dim=-2)      # int64, no float on the way
    assert torch.equal(got.long(), output_stage(node, z, node.outputs[0]))
    assert_multiplier_matters(back, path, test_in)


# ---- Reduce --------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["MEAN", "SUM", "MAX", "MIN"])
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce(tmp_path, method, keepdims):
    params = dict(method=method, axis=[1, 2], keepdims=keepdims)
    g = one_layer("Reduce", [(5, 6, 3)], params)
    data = batches((5, 6, 3), lo=-1, hi=3)
    qg, got, back, path = check(g, data, tmp_path, **ASYM)
    node, x_t, out_t = qg.node("op"), qg.node("op").inputs[0], qg.output_tensors[0]
    test_in = list(data[0])
    got = run_keep(qg, test_in)
    if method in ("MAX", "MIN"):
        assert (out_t.scale, out_t.zerop) == (x_t.scale, x_t.zerop) and "scale_value" not in node.params
        fn = torch.amax if method == "MAX" else torch.amin
        assert torch.equal(got, fn(x_t.betensor, dim=[1, 2], keepdim=keepdims))
        return
    M, s = stored_rescale(node)
    S = shifted(x_t).sum(dim=[1, 2], keepdim=keepdims)
    num, den = S * M * 2 ** max(0, -s), 2 ** max(0, s)      # MEAN's 1/30 is part of M/s
    want = (torch.div(2 * num + den, 2 * den, rounding_mode="floor") - int(out_t.zerop)).clamp(
        out_t.dtype.qmin, out_t.dtype.qmax)
    assert torch.equal(got.long(), want)
    assert_multiplier_matters(back, path, test_in)


# ---- layers that move integers ---------------------------------------------------------
def test_split_passes_quantization_through(tmp_path):
    b = GraphBuilder("t")
    b.input("x", [1, 4, 7])
    b.layer("Split", "sp", ["x"], dict(axis=2, splits=[2, 5]), n_tops=2)
    g = b.build(["sp_1", "sp_0"])
    data = batches((4, 7))
    qg, *_ = check(g, data, tmp_path, **ASYM)
    test_in = list(data[0])
    outs = qg.forward(test_in, keep_tensors=True)
    q_in = qg.node("x").outputs[0].betensor
    assert torch.equal(outs[0], q_in[..., 2:]) and torch.equal(outs[1], q_in[..., :2])
    for t in qg.node("sp").outputs:
        assert (t.scale, t.zerop, t.dtype) == (qg.node("x").outputs[0].scale, qg.node("x").outputs[0].zerop,
                                               qg.node("x").outputs[0].dtype)


def test_slice_passes_quantization_through(tmp_path):
    params = dict(begin=[0, 3, 0, 1], end=[1, -6, 5, 3], strides=[1, -1, 2, 1])
    g = one_layer("Slice", [(4, 5, 3)], params)
    qg, *_ = check(g, batches((4, 5, 3)), tmp_path, **ASYM)
    test_in = list(batches((4, 5, 3), n=1)[0])
    got = run_keep(qg, test_in)
    q_in = qg.node("in0").outputs[0].betensor
    assert torch.equal(got, q_in[:, 0:4, 0:5:2, 1:3].flip(1))


@pytest.mark.parametrize("mode,value", [("CONSTANT", 0.0), ("CONSTANT", 0.75), ("REFLECT", 0.0),
                                        ("SYMMETRIC", 0.0)])
def test_pad(tmp_path, mode, value):
    pads = [[0, 0], [2, 1], [1, -1], [0, 1]]
    g = one_layer("Pad", [(4, 5, 3)], dict(pads=pads, mode=mode, constant_value=value))
    data = batches((4, 5, 3), lo=-1, hi=3)
    qg, got, back, path = check(g, data, tmp_path, **ASYM)
    node, x_t = qg.node("op"), qg.node("op").inputs[0]
    test_in = list(data[0])
    got = run_keep(qg, test_in)
    if mode != "CONSTANT":
        np_mode = "reflect" if mode == "REFLECT" else "symmetric"
        want = np.pad(x_t.betensor.numpy(), [[0, 0], [2, 1], [1, 0], [0, 1]], mode=np_mode)[:, :, :-1]
        assert torch.equal(got, torch.from_numpy(np.ascontiguousarray(want)))
        return
    fill = node.params["constant_value"]
    assert isinstance(fill, int) and fill == math.floor(value * x_t.scale - x_t.zerop + 0.5)
    assert bool((got[:, :2] == fill).all())
    changed = perturbed_output(path, test_in, r"^constant_value=-?\d+", f"constant_value={fill + 3}")
    assert not torch.equal(changed, got) and bool((changed[:, :2] == fill + 3).all())


def resize_graph(method, mode, shape, top):
    b = GraphBuilder("t")
    b.input("in0", [1] + list(shape))
    b.layer("Resize", "op", ["in0"], dict(method=method, mode=mode), top_shapes=[[1] + list(top)])
    return b.build(["op"])


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("top", [(9, 12, 3), (3, 4, 3)])
def test_resize_nearest(tmp_path, mode, top):
    g = resize_graph("NEAREST", mode, (5, 7, 3), top)
    qg, *_ = check(g, batches((5, 7, 3)), tmp_path, **ASYM)
    node = qg.node("op")
    assert node.outputs[0].scale == node.inputs[0].scale and node.params["interp_shift_value"] == 0   # as the tool chain writes it


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("top,bits", [((9, 12, 3), 8), ((4, 5, 3), 8), ((11, 6, 3), 16)])
def test_resize_bilinear(tmp_path, mode, top, bits):
    g = resize_graph("BILINEAR", mode, (5, 7, 3), top)
    data = batches((5, 7, 3))
    # the four weights are rounded to 2^-13 (the tool chain's default): up to 4 * 2^-14 of
    # the largest input integer, 8 LSB at 16 bits
    weight_error = 4 * 2 ** (bits - 1) / 2 ** 14
    qg, got, back, path = check(g, data, tmp_path, tol_lsb=2 + weight_error, activation_bits=bits, **ASYM)
    node, x_t = qg.node("op"), qg.node("op").inputs[0]
    assert node.params["interp_shift_value"] == 13 and node.outputs[0].scale == x_t.scale
    test_in = list(data[0])
    got = run_keep(qg, test_in)
    # against float64 bilinear of the shifted integers (coordinates within 2^-16 of exact)
    a = shifted(x_t).double().permute(0, 3, 1, 2)
    if mode == "asymmetric":
        sy, sx = 5 / top[0], 7 / top[1]
        ys, xs = torch.arange(top[0]) * sy, torch.arange(top[1]) * sx
        y0, x0 = ys.floor().long(), xs.floor().long()
        y1, x1 = (y0 + 1).clamp(max=4), (x0 + 1).clamp(max=6)
        fy, fx = (ys - y0).reshape(-1, 1), (xs - x0)
        t = a[:, :, y0] * (1 - fy) + a[:, :, y1] * fy
        want = t[..., x0] * (1 - fx) + t[..., x1] * fx
    else:
        want = F.interpolate(a, size=top[:2], mode="bilinear", align_corners=mode == "align_corners")
    want = (want.permute(0, 2, 3, 1) - int(x_t.zerop)).round().long()
    assert int((got.long() - want).abs().max()) <= 1 + weight_error
    changed = perturbed_output(path, test_in, r"^interp_shift_value=\d+", "interp_shift_value=2")
    assert not torch.equal(changed, got)


# ---- Constant --------------------------------------------------------------------------
def test_constant_stores_integers(tmp_path):
    b = GraphBuilder("t")
    b.input("in0", [1, 4, 3])
    b.layer("Constant", "c", [], {}, {"weights": torch.randn(1, 4, 3)})
    b.layer("Eltwise", "op", ["in0", "c"], dict(method="ADD"))
    g = b.build(["op"])
    data = batches((4, 3))
    qg, got, back, path = check(g, data, tmp_path, **ASYM)
    for graph in (qg, back):
        c = graph.node("c")
        assert c.quantized and c.constants["weights"].betensor.dtype == torch.int8   # signed: negative values
        assert c.constants["weights"].dtype == c.outputs[0].dtype
    c, float_c = qg.node("c"), g.node("c").constants["weights"].betensor
    out_t = c.outputs[0]
    deq = (c.constants["weights"].betensor.float() + out_t.zerop) / out_t.scale
    assert float((deq - float_c).abs().max()) <= 0.5 / out_t.scale + 1e-6
    assert (out_t.qmin, out_t.qmax) == (-128, 127)


def test_integer_constant_is_left_alone(tmp_path):
    b = GraphBuilder("t")
    b.input("in0", [1, 4])
    b.layer("Constant", "idx", [], {}, {"weights": torch.tensor([[3, 1, 2]], dtype=torch.int32)})
    b.layer("Activation", "op", ["in0"], dict(method="RELU"))
    g = b.build(["op", "idx"])
    qg = quantize(g, batches((4,)), **ASYM)
    out = qg.forward(list(batches((4,), n=1)[0]))
    assert torch.equal(out[1], torch.tensor([[3, 1, 2]], dtype=torch.int32))
    idx = qg.node("idx").outputs[0]
    assert idx.qinvariant and (idx.scale, idx.zerop) == (1.0, 0)


# ---- a graph of them, LayerNorm included (tests/test_layernorm_int.py: LayerNorm itself) ----
def test_graph_with_layernorm(tmp_path):
    b = GraphBuilder("t")
    b.input("x", [1, 6, 8])
    b.layer("FullyConnected", "fc", ["x"], dict(num_output=8, with_activation="RELU"),
            {"weights": torch.randn(8, 8) * 0.4, "biases": torch.randn(8) * 0.1})
    b.layer("LayerNorm", "ln", ["fc"], dict(axis=[2], epsilon=1e-5), {"weights": torch.rand(8) + 0.5,
                                                                       "biases": torch.randn(8) * 0.1})
    b.layer("MatMul", "mm", ["ln", "x"], dict(trans_b=True))
    b.layer("Reduce", "mean", ["mm"], dict(method="MEAN", axis=[2], keepdims=False))
    g = b.build(["mean"])
    data = batches((6, 8), n=3)
    qg, *_ = check(g, data, tmp_path, tol_lsb=6, min_cos=0.99, **ASYM)
    types = {n.name: n.type for n in qg.nodes}
    assert "DeQuantize" not in types.values() and "Quantize" not in types.values()
    assert all(n.quantized for n in qg.nodes if n.name in ("fc", "ln", "mm", "mean"))


@pytest.mark.parametrize("a_max,b_max,k", [(255, 127, 50), (65535, 127, 300), (65535, 65535, 40),
                                           (1 << 30, 1 << 20, 64)])
def test_exact_matmul_in_every_regime(a_max, b_max, k):
    """float32 (< 2^24), float64 (< 2^53) and int64 (beyond) products all give a @ b exactly."""
    from npuopt.quant import qmath
    a = torch.randint(-a_max, a_max + 1, (2, 3, k))
    b = torch.randint(-b_max, b_max + 1, (k, 4))
    a[0, 0], b[:, 0] = a_max, b_max                  # the worst case is reached
    assert torch.equal(qmath.exact_matmul(a, b), a @ b)
    assert torch.equal(qmath.exact_matmul(a.double(), b.double(), bound=float(a_max * b_max * k)), a @ b)


def test_quantized_pad_needs_an_integer_fill(tmp_path):
    from npuopt.errors import IRError
    g = one_layer("Pad", [(4, 3)], dict(pads=[[0, 0], [1, 1], [0, 0]], mode="CONSTANT", constant_value=0.5))
    qg, got, back, path = check(g, batches((4, 3)), tmp_path, **ASYM)
    text = re.sub(r"^constant_value=-?\d+", "constant_value=0.5", path.read_text(), flags=re.M)
    path.write_text(text)
    with pytest.raises(IRError, match="layer 'op'.*constant_value"):
        read_graph(str(path)).forward(list(batches((4, 3), n=1)[0]))


@pytest.mark.parametrize("force, dtype", [(False, torch.uint8), (True, torch.int8)])
def test_force_dtype_int_makes_an_unsigned_output_signed(tmp_path, force, dtype):
    """A FullyConnected with RELU and asymmetric activations writes uint8; with the cfg's
    force_dtype_int, int8 (the tool chain's `out_signed = ... or force_dtype_int`)."""
    g = one_layer("FullyConnected", [(8,)], dict(num_output=4, with_activation="RELU"),
                  {"weights": torch.randn(4, 8), "biases": torch.randn(4)})
    qg, got, *_ = check(g, batches((8,)), tmp_path, quantize_method_for_activation="per_tensor_asymmetric",
                        cfg_attrs={"force_dtype_int": force})
    assert got.dtype == dtype and qg.node("op").outputs[0].dtype.torch_dtype == dtype
