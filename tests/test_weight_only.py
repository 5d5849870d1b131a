"""Issue 24, weight-only quantization: layers kept in float (trigger_float_op =
float16_act_int_wht, bfloat16_/float32_) whose weights are stored as integers with
weights_scale/weights_zp, per tensor, per channel or per block (per_block_* methods,
weight_block_size; a last, shorter block where the block does not divide a channel's
weights). Every linear layer type; npuopt's forward of the IR read back, npuopt-run and
the in-memory graph agree; GPTQ and AdaRound round per-block grids. OPT's forward reads
weight-only FullyConnected layers as npuopt does: tests/test_conformance.py's
`weight_only_fc` setting."""
import logging

import numpy as np
import pytest
import torch

from conftest import npuopt_run_outputs, transformer_encoder_cosine
from npuopt.dtype import Dtype, fit_float
from npuopt.errors import ConfigError, QuantizeError
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.optmaster import OptMaster
from npuopt.quant import formats
from npuopt.quant.global_calibration.gptq import round_columns
from npuopt.quant.settings import QuantSettings, read_opt_config
from test_ops_conv import params_of, to_ir
from test_opt_cfg import ir_layers, tiny
from test_quantize_ops import batches, one_layer, quantize

WEIGHT_ONLY = dict(trigger_float_op="float16_act_int_wht", weight_bits=4)
CONV = params_of((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 6, "RELU")


def layers():
    """(name, graph, input shape) of every layer type weight-only applies to."""
    torch.manual_seed(0)
    dw = params_of((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4, 8, "NONE")
    tr = params_of((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 2, 6, "NONE")
    c3 = params_of((2, 3, 3), (1, 1, 1), (0, 0, 1, 1, 1, 1), (1, 1, 1), 1, 4, "NONE")
    t3 = params_of((2, 2, 2), (2, 1, 2), (0, 0, 0, 1, 1, 0), (1, 1, 1), 2, 4, "NONE")
    return [
        ("Convolution", one_layer("Convolution", [(5, 5, 7)], CONV,
                                  {"weights": torch.randn(6, 3, 3, 7), "biases": torch.randn(6)}), (5, 5, 7)),
        ("DepthwiseConv", one_layer("DepthwiseConv", [(5, 5, 4)], dw,
                                    {"weights": torch.randn(8, 3, 3, 1), "biases": torch.randn(8)}), (5, 5, 4)),
        ("FullyConnected", one_layer("FullyConnected", [(20,)], dict(num_output=5, with_activation="NONE"),
                                     {"weights": torch.randn(5, 20), "biases": torch.randn(5)}), (20,)),
        ("ConvTranspose", one_layer("ConvTranspose", [(3, 3, 4)], tr,
                                    {"weights": to_ir(torch.randn(4, 3, 2, 2), True), "biases": torch.randn(6)}),
         (3, 3, 4)),
        ("Convolution3D", one_layer("Convolution3D", [(3, 4, 4, 2)], c3,
                                    {"weights": to_ir(torch.randn(4, 2, 2, 3, 3), False), "biases": torch.randn(4)}),
         (3, 4, 4, 2)),
        ("ConvTranspose3D", one_layer("ConvTranspose3D", [(2, 3, 3, 4)], t3,
                                      {"weights": to_ir(torch.randn(4, 2, 2, 2, 2), True), "biases": torch.randn(4)}),
         (2, 3, 3, 4)),
    ]


def float16_forward(graph, name: str, weights: torch.Tensor, x):
    """The float graph's output with layer `name`'s weights replaced by `weights` and every
    tensor float16 (float16_act_int_wht's activations): what the quantized graph computes
    (its float layers in float64, each top rounded to float16)."""
    fl = graph.node(name).constants["weights"]
    kept, dtypes = fl.betensor, [(t, t.dtype) for n in graph.nodes for t in n.outputs]
    fl.betensor = weights
    for t, _ in dtypes:
        t.dtype = Dtype.FP16
    try:
        return graph.forward([fit_float(x[0], Dtype.FP16)])[0].clone()
    finally:
        fl.betensor = kept
        for t, dtype in dtypes:
            t.dtype = dtype


# ---- per-block grids ------------------------------------------------------------------
def test_blocks_cover_each_channel_with_a_shorter_last_block():
    w = torch.arange(2 * 3 * 7, dtype=torch.float32).reshape(2, 3, 7)   # 21 values per channel
    full, tail = formats.blocks(w, 8)
    assert full.shape == (4, 8) and tail.shape == (2, 5)
    assert formats.blocks_per_channel(w.shape, 8) == 3 and formats.blocks_per_channel(w.shape, 32) == 1
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])                    # [channels * blocks]
    spread = formats.block_values(v, w.shape, 8).reshape(2, -1)
    assert spread[0, :8].eq(1).all() and spread[0, 8:16].eq(2).all() and spread[0, 16:].eq(3).all()
    assert spread[1, :8].eq(4).all() and spread[1, 16:].eq(6).all()


@pytest.mark.parametrize("method", ["per_block_asymmetric", "per_block_symmetric_restricted_range",
                                    "per_block_symmetric_full_range"])
def test_each_block_takes_its_own_range(method):
    """A channel whose blocks differ 100-fold in size: each block's integers use the whole
    grid, which one scale per channel would not give the small block."""
    w = torch.cat([torch.randn(3, 16) * 0.01, torch.randn(3, 16) * 1.0, torch.randn(3, 5) * 0.1], dim=1)
    w[:, 32], w[:, 33] = -w[:, 32].abs() - 0.05, w[:, 33].abs() + 0.05  # both signs, each well away from 0, in the
    # short block: one sign (or a negative end within a step of 0) would need zero point 8, beyond the clamp
    # to +-7 (the tool chain's), and lose the grid's top step (it did on some random draws)
    graph = one_layer("FullyConnected", [(37,)], dict(num_output=3, with_activation="NONE"),
                      {"weights": w, "biases": torch.zeros(3)})
    qg = quantize(graph, batches((37,)), quantize_method_for_weight=method, weight_block_size=16, **WEIGHT_ONLY)
    c = qg.node("op").constants["weights"]
    assert c.block_size == 16 and c.scale.numel() == 3 * 3 and c.betensor.dtype == torch.int8
    q = c.betensor.float().reshape(3, -1)
    for lo, hi in ((0, 16), (16, 32), (32, 37)):
        assert int(q[:, lo:hi].abs().max(dim=1).values.min()) >= 6   # every block reaches the grid's ends
    error = (qg.node("op").constants["weights"].betensor.float() + c.broadcast_zerop) / c.broadcast_scale - w
    steps = 1 / c.broadcast_scale
    assert bool((error.abs() <= steps / 2 + 1e-6).all())


# ---- every layer type: in memory, read back, npuopt-run -----------------------------------
@pytest.mark.parametrize("method, block", [("per_block_asymmetric", 8), ("per_block_symmetric_restricted_range", 5),
                                           ("per_channel_asymmetric", 256),
                                           ("per_tensor_symmetric_restricted_range", 256)])
@pytest.mark.parametrize("index", range(6), ids=[name for name, *_ in layers()])
def test_weight_only_layers_compute_with_their_dequantized_weights(tmp_path, index, method, block):
    name, graph, shape = layers()[index]
    data = batches(shape)
    qg = quantize(graph, data, quantize_method_for_weight=method, weight_block_size=block, **WEIGHT_ONLY)
    node = qg.node("op")
    c = node.constants["weights"]
    assert not node.quantized and c.is_quantized and c.betensor.dtype == torch.int8 and qg.quantized
    # the float layer with the weights dequantized by hand, its input and output rounded to
    # float16 (float16_act_int_wht), is what the quantized graph computes
    x = list(data[-1])
    got = qg.forward(x)[0].clone()
    want = float16_forward(graph, "op", (c.betensor.float() + c.broadcast_zerop) * (1.0 / c.broadcast_scale), x)
    assert torch.equal(got, want) and qg.output_tensors[0].dtype is Dtype.FP16
    # written and read back: the same weights, the same outputs
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    text = path.read_text()
    assert "weights_type=int4" in text or "weights_type=aligned_int4" in text
    assert ("weight_block_size=%d" % block in text) == method.startswith("per_block")
    back = read_graph(str(path))
    assert torch.equal(back.forward(x)[0], got)
    # npuopt-run, on its own: the same float16 values (both compute float layers in float64)
    ran = npuopt_run_outputs(path, x[0].numpy(), tmp_path)[qg.output_tensors[0].name]
    assert np.array_equal(ran, got.numpy())


def matmul_with_constant(port: int, trans: bool, shape=(6, 8)):
    """MatMul reading a Constant as operand A (port 0) or B (port 1, trans_b = `trans`), the
    other operand an input [1, 8, 20] (A) or [1, 20, 8] (B)."""
    torch.manual_seed(1)
    b = GraphBuilder("t")
    x = b.input("in0", [1, 8, 20] if port == 0 else [1, 20, 8])
    w = b.layer("Constant", "w", [], {}, {"weights": torch.randn(*shape)})
    bottoms = [w[0], x] if port == 0 else [x, w[0]]
    top = b.layer("MatMul", "op", bottoms, {"trans_a": trans and port == 0, "trans_b": trans and port == 1})
    return b.build(top), (8, 20) if port == 0 else (20, 8)


@pytest.mark.parametrize("method, block", [("per_block_asymmetric", 3), ("per_channel_symmetric_restricted_range", 256),
                                           ("per_tensor_asymmetric", 256)])
@pytest.mark.parametrize("port", [0, 1], ids=["A", "B_trans_b"])
def test_a_matmuls_constant_operand_holds_its_weights_on_its_grid(tmp_path, port, method, block):
    """A weight-only MatMul's Constant operand stores integers on the MatMul's grid (blocks
    along the reduction axis), in its float mode; the MatMul computes with them dequantized;
    read back and npuopt-run agree."""
    graph, shape = matmul_with_constant(port, port == 1)
    data = batches(shape)
    qg = quantize(graph, data, quantize_method_for_weight=method, weight_block_size=block, **WEIGHT_ONLY)
    const = qg.node("w")
    c = const.constants["weights"]
    assert c.is_quantized and c.betensor.dtype == torch.int8 and int(c.betensor.abs().max()) <= 8
    assert const.outputs[0].dtype is Dtype.FP16 and not qg.node("op").quantized
    assert (c.block_size == block) == method.startswith("per_block")
    if method.startswith("per_block"):
        assert c.scale.numel() == 6 * 3   # 8 values per output channel in blocks of 3: 3, 3, 2
    x = list(data[-1])
    got = qg.forward(x)[0].clone()
    want = float16_forward(graph, "w", (c.betensor.float() + c.broadcast_zerop) * (1.0 / c.broadcast_scale), x)
    assert torch.equal(got, want)
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    back = read_graph(str(path))
    assert torch.equal(back.forward(x)[0], got)
    ran = npuopt_run_outputs(path, x[0].numpy(), tmp_path)[qg.output_tensors[0].name]
    assert np.array_equal(ran, got.numpy())


def test_a_constant_operand_laid_out_against_the_grid_stays_float(caplog):
    """B [K, N] without trans_b: per-channel grids need the output channels first, so the
    constant stays float and one line says why; a per-tensor grid takes it."""
    graph, shape = matmul_with_constant(1, False, shape=(8, 6))
    with caplog.at_level(logging.INFO):
        qg = quantize(graph, batches(shape), quantize_method_for_weight="per_channel_asymmetric", **WEIGHT_ONLY)
    assert not qg.node("w").constants["weights"].is_quantized
    assert "layer 'w': the constant operand of weight-only MatMul 'op' stays float: per_channel_asymmetric " \
           "weights need it 2-D with the output channels first" in caplog.text
    qg = quantize(graph, batches(shape), quantize_method_for_weight="per_tensor_asymmetric", **WEIGHT_ONLY)
    assert qg.node("w").constants["weights"].is_quantized


def test_per_block_weights_on_an_integer_layer_stop_with_one_line():
    graph = one_layer("FullyConnected", [(20,)], dict(num_output=5, with_activation="NONE"),
                      {"weights": torch.randn(5, 20), "biases": torch.randn(5)})
    with pytest.raises(QuantizeError, match=r"layer 'op' \(FullyConnected\): per_block_asymmetric weights need "
                                            r"weight-only quantization") as info:
        quantize(graph, batches((20,)), quantize_method_for_weight="per_block_asymmetric")
    assert "\n" not in str(info.value)


def test_a_broken_block_size_in_an_ir_is_one_line(tmp_path):
    _, graph, shape = layers()[2]
    qg = quantize(graph, batches(shape), quantize_method_for_weight="per_block_asymmetric", weight_block_size=8,
                  **WEIGHT_ONLY)
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    path.write_text(path.read_text().replace("weight_block_size=8", "weight_block_size=6"))
    with pytest.raises(Exception, match=r"layer 'op': weights_scale/weights_zp hold 15 values; weights of shape "
                                        r"\[5, 20\] in blocks of 6 need 20"):
        read_graph(str(path))


# ---- settings -------------------------------------------------------------------------------
def test_weight_only_modes_are_settings_of_their_own():
    assert QuantSettings(trigger_float_op="float16_act_int_wht").weight_only
    assert not QuantSettings(trigger_float_op="float16_preferred").weight_only
    assert not QuantSettings(trigger_float_op=True).weight_only


def test_opt_config_takes_a_float_mode_or_a_flag(tmp_path):
    graph = layers()[2][1]
    good = tmp_path / "good.json"
    good.write_text('{"op": {"trigger_float_op": "float16_act_int_wht", "weight_block_size": 16}}')
    assert read_opt_config(str(good), graph)["op"] == {"trigger_float_op": "float16_act_int_wht",
                                                       "weight_block_size": 16}
    bad = tmp_path / "bad.json"
    bad.write_text('{"op": {"trigger_float_op": "float8_act_int_wht"}}')
    with pytest.raises(ConfigError, match="trigger_float_op must be true, false or a float mode"):
        read_opt_config(str(bad), graph)


# ---- GPTQ on per-block grids ------------------------------------------------------------------
class _Problem:
    """A layer's quadratic problem as round_columns reads it (dense H)."""

    def __init__(self, w, h, scale, zp, qmin, qmax):
        self.weights, self.H, self.low_rank = w, h, None
        self.C = w @ h
        self.damp = torch.full((w.shape[0], 1, 1), 1e-3)
        self.scale, self.zp, self.qmin, self.qmax = scale, zp, qmin, qmax

    def input_power(self):
        return self.H.diagonal(dim1=1, dim2=2)

    def cross(self, r0, r1):
        return self.C[:, r0:r1]

    def grid_values(self, r0, r1):
        return self.scale[:, r0:r1], self.zp[:, r0:r1]

    def parts(self):
        from npuopt.quant.global_calibration._layers import Rows
        yield Rows(self, 0, self.weights.shape[1])

    def integers_by_parts(self, choose):
        from npuopt.quant.global_calibration._layers import Problem
        return Problem.integers_by_parts(self, choose)

    def to_grid(self, v):
        return v.round().clamp(self.qmin, self.qmax)

    def error(self, w):
        d = w - self.weights
        return float((d @ self.H * d).sum())


def test_gptq_on_a_per_block_grid_beats_nearest_rounding():
    """A scale and zero point per block of 8 inputs: GPTQ's integers stay on each block's
    grid and their output error is below nearest rounding's (as GPTQ's is per channel)."""
    torch.manual_seed(0)
    rows, k, block = 6, 32, 8
    x = torch.randn(256, k) @ (torch.eye(k) + 0.3 * torch.randn(k, k))     # correlated inputs
    h = (x.T @ x / 256).unsqueeze(0)
    w = torch.randn(1, rows, k)
    lo = w.reshape(rows, -1, block).amin(-1).clamp(max=0)
    hi = w.reshape(rows, -1, block).amax(-1).clamp(min=0)
    scale = (15 / (hi - lo)).repeat_interleave(block, dim=-1).unsqueeze(0)
    zp = (torch.round(lo * scale.reshape(rows, -1, block)[..., 0]) + 8).repeat_interleave(block, -1).unsqueeze(0)
    problem = _Problem(w, h, scale, zp, -8, 7)
    q = round_columns(problem, act_order=True, block=16)
    assert bool((q >= -8).all() and (q <= 7).all()) and torch.equal(q, q.round())
    nearest = torch.clamp(torch.round(w * scale - zp), -8, 7)
    dequant = (q + zp) / scale
    assert problem.error(dequant) < 0.8 * problem.error((nearest + zp) / scale)


@pytest.mark.parametrize("low_rank", [False, True])
def test_block_errors_are_each_block_s_change_of_the_output_error(low_rank):
    """Rows.block_errors (gptq_zy's choose_range on per-block weights): block b's figure
    is exactly how much the output error rises when block b alone takes the new weights
    (a last block shorter than the others included)."""
    from npuopt.quant.global_calibration._layers import Problem
    gen = torch.Generator().manual_seed(3)
    rows, k, block, patches = 5, 40, 16, 12 if low_rank else 200
    x = torch.randn(1, patches, k, generator=gen)
    v = x.transpose(1, 2) / patches ** 0.5
    h = v @ v.transpose(1, 2)
    w = torch.randn(1, rows, k, generator=gen)
    c = w @ h + 0.1 * torch.randn(1, rows, k, generator=gen)      # the float output is not W x_q's
    problem = Problem(None, w, None if low_rank else h, v if low_rank else None, c, torch.full((1, 1, 1), 0.05),
                      None, None, None)
    new = w + 0.2 * torch.randn(1, rows, k, generator=gen)
    part, = problem.parts()
    got = part.block_errors(new, block, part.gradient(w))
    assert got.shape == (1, rows, 3)
    for b, j1 in enumerate(range(0, k, block)):
        one = w.clone()
        one[..., j1:j1 + block] = new[..., j1:j1 + block]
        want = part.row_errors(one) - part.row_errors(w)
        assert torch.allclose(got[..., b], want, rtol=1e-4, atol=1e-4), (b, got[..., b], want)


@pytest.mark.parametrize("quant_type, want", [
    ("w4afp16", dict(weight_bits=4, trigger_float_op="float16_act_int_wht")),
    ("w8abfp16", dict(weight_bits=8, trigger_float_op="bfloat16_act_int_wht")),
    ("w4", dict(weight_bits=4, trigger_float_op="float16_act_int_wht")),
    ("fp16", dict(trigger_float_op="float16_preferred")),
])
def test_quant_type_names_a_format_and_says_so(tmp_path, caplog, quant_type, want):
    from npuopt.quant.settings import layer_settings, note_settings
    from test_opt_cfg import tiny
    cfg = tiny(tmp_path, quant_type=quant_type)
    graph = read_graph(str(cfg.graph), str(cfg.bin))
    settings = layer_settings(cfg, graph)
    with caplog.at_level("INFO", logger="npuopt"):
        note_settings(cfg, graph, settings)
    st = settings["conv1"]
    assert {k: getattr(st, k) for k in want} == want
    assert sum(m.startswith(f"quant_type {quant_type}: ") for m in caplog.messages) == 1



# ---- a transformer (acceptance 2) ----------------------------------------------------------
@pytest.mark.shared
def test_transformer_encoder_4_bit_per_block_weight_only_with_gptq(tmp_path):
    """The parser's transformer_encoder, its FullyConnected weights in 4-bit blocks of 32
    (asymmetric) rounded by GPTQ, float activations: output cosine to float >= 0.999 on
    samples it was not calibrated on (0.99959 when written; nearest rounding 0.99902)."""
    cosine, quantized = transformer_encoder_cosine(
        tmp_path, trigger_float_op="float16_act_int_wht", weight_bits=4, quantize_method_for_weight="per_block_asymmetric",
        weight_block_size=32, global_calibration="gptq_zy")
    assert sum("weight_block_size" in n.params or n.constants.get("weights") is not None
               and n.constants["weights"].block_size == 32 for n in quantized.nodes) == 8
    assert cosine >= 0.999, cosine


@pytest.mark.parametrize("method", ["gptq_zy", "adaround[0,20]"])
def test_global_calibration_of_a_weight_only_branch_beside_an_integer_one(tmp_path, method):
    """tiny_cnn with branch_a weight-only, branch_b integer, both reading `add`: the
    DeQuantize branch_a reads through sits right before it, so the quantized graph keeps
    the float graph's order, in which global calibration walks both graphs (appended at the
    end, it put branch_b first, and the rounding of branch_b found its input let go:
    KeyError 'add'; a parser squeezenet's fire modules under the search's formats)."""
    OptMaster(tiny(tmp_path, weight_bits=4, global_calibration=method,
                   trigger_float_op="disable & <{branch_a}:float16_act_int_wht>")).run()
    order = list(ir_layers(tmp_path / "out" / "tiny_cnn_o.txt"))
    reads = order.index("branch_a") - 1
    assert order[reads].endswith("_dequantize") and order.index("branch_a") < order.index("branch_b")
