"""Issue 24, 16-bit layers with wide biases: bias_bits from 16 to 48 (stored as int16,
int32 or int64, as the tool chain stores them), quant_type w16a16 (16/16/48/10 bits) and
16-bit activations made symmetric as the tool chain makes them. OPT's forward reads
them as npuopt does: tests/test_conformance.py's `w16a16` setting on every op test and
parser IR."""
import math

import pytest
import torch

from npuopt.dtype import Dtype
from npuopt.ir import read_graph, write_graph
from npuopt.quant.settings import QuantSettings, layer_settings, note_settings
from test_opt_cfg import tiny
from test_quantize_ops import batches, check, one_layer, quantize

FC = dict(num_output=4, with_activation="NONE")


def fc_with_large_biases():
    """A FullyConnected layer whose biases are large against its small products: at 16-bit
    activations and weights they pass 2^31 times the accumulator's scale."""
    torch.manual_seed(0)
    weights = torch.randn(4, 8) * 6.0
    return one_layer("FullyConnected", [(8,)], FC, {"weights": weights, "biases": torch.tensor([3e3, -2e3, 1.0, 0.0])})


@pytest.mark.parametrize("bits, dtype", [(16, Dtype.INT16), (24, Dtype.INT32), (32, Dtype.INT32), (40, Dtype.INT64),
                                         (48, Dtype.INT64)])
def test_biases_take_their_bits_and_the_tool_chains_storage(tmp_path, bits, dtype):
    qg = quantize(fc_with_large_biases(), batches((8,), lo=-20.0, hi=20.0), activation_bits=16, weight_bits=16,
                  bias_bits=bits)
    b = qg.node("op").constants["biases"]
    assert b.dtype is dtype and b.betensor.dtype == dtype.torch_dtype
    assert (b.qmin, b.qmax, b.qbits) == (-(1 << (bits - 1)), (1 << (bits - 1)) - 1, bits)
    assert int(b.betensor.min()) >= b.qmin and int(b.betensor.max()) <= b.qmax


def test_48_bit_biases_keep_what_32_bits_clamp(tmp_path):
    """The same layer at 16/16 bits: with 32-bit biases the large ones saturate and the
    output is wrong; with 48-bit biases they are held and the output is within an LSB or so
    (check's bound), written as int64 and read back bit for bit."""
    data = batches((8,), lo=-20.0, hi=20.0)
    graph = fc_with_large_biases()
    qg, *_ = check(graph, data, tmp_path, activation_bits=16, weight_bits=16, bias_bits=48)
    b = qg.node("op").constants["biases"].betensor
    assert b.dtype == torch.int64 and int(b.abs().max()) > (1 << 31)
    with pytest.raises(AssertionError):
        check(fc_with_large_biases(), data, tmp_path, activation_bits=16, weight_bits=16, bias_bits=32)


@pytest.mark.parametrize("method, bits, want", [
    ("per_tensor_asymmetric", 16, "per_tensor_symmetric_restricted_range"),
    ("per_channel_asymmetric", 16, "per_channel_symmetric_restricted_range"),
    ("per_tensor_symmetric_full_range", 16, "per_tensor_symmetric_full_range"),
    ("per_tensor_asymmetric", 8, "per_tensor_asymmetric"),
])
def test_16_bit_activations_are_symmetric_as_in_the_tool_chain(method, bits, want):
    st = QuantSettings(quantize_method_for_activation=method, activation_bits=bits)
    assert st.quantize_method_for_activation == want


def test_quant_type_w16a16_sets_the_bits_and_says_so(tmp_path, caplog):
    cfg = tiny(tmp_path, quant_type="w16a16", quantize_method_for_activation="per_tensor_asymmetric")
    graph = read_graph(str(cfg.graph), str(cfg.bin))
    settings = layer_settings(cfg, graph)
    with caplog.at_level("INFO", logger="npuopt"):
        note_settings(cfg, graph, settings)
    seen = caplog.messages
    st = next(iter(settings.values()))
    assert (st.activation_bits, st.weight_bits, st.bias_bits, st.lut_items_in_bits) == (16, 16, 48, 10)
    assert st.quantize_method_for_activation == "per_tensor_symmetric_restricted_range"
    assert sum("quant_type w16a16: activation_bits = 16, weight_bits = 16, bias_bits = 48, lut_items_in_bits = 10"
               in m for m in seen) == 1
    assert sum("16-bit activations are quantized per_tensor_symmetric_restricted_range" in m for m in seen) == 1


def test_an_all_zero_channel_does_not_take_the_others_multipliers(tmp_path):
    """Per-channel 16-bit weights with one all-zero channel, shifts unified: the tool chain's
    scale 1 for the empty channel made its rescale ratio dominate and the other channels'
    multipliers round to 0; it takes the median range of the others instead."""
    torch.manual_seed(0)
    weights = torch.randn(6, 8) * 0.05
    weights[2] = 0.0
    graph = one_layer("FullyConnected", [(8,)], dict(FC, num_output=6), {"weights": weights, "biases": torch.randn(6)})
    qg, *_ = check(graph, batches((8,)), tmp_path, tol_lsb=4.0, activation_bits=16, weight_bits=16, bias_bits=48,
                   quantize_method_for_weight="per_channel_symmetric_restricted_range")
    node = qg.node("op")
    assert int(node.constants["scale"].betensor.min()) > 1000      # every channel keeps a precise multiplier
    w_scale, others = node.constants["weights"].scale, node.constants["weights"].scale[[0, 1, 3, 4, 5]]
    assert float(others.min()) <= float(w_scale[2]) <= float(others.max())


# ---- remain_shift: the accumulator shifted to 32 bits ahead of the rescale ---------------
def test_remain_shift_shifts_a_wide_layers_accumulator_ahead(tmp_path):
    """16-bit FullyConnected with remain_shift: the param is written, the rescale as
    constants; the integer output is the hand computation of the chip's ahead shift
    (acc -> round(acc / 2^d), biases -> floor(biases / 2^d), both int32, then the rescale
    with shift remain_shift), which a small remain_shift makes differ from the rescale of
    the whole accumulator; an 8-bit layer gets no remain_shift."""
    data = batches((8,), lo=-20.0, hi=20.0)
    qg = quantize(fc_with_large_biases(), data, activation_bits=16, weight_bits=16, bias_bits=48,
                  cfg_attrs={"remain_shift": 6})
    node = qg.node("op")
    assert node.params["remain_shift"] == 6 and "shift" in node.constants and "shift_value" not in node.params
    m = node.constants["scale"].betensor.to(torch.float64)
    s = int(node.constants["shift"].betensor.reshape(-1)[0])
    d = s - 6
    assert d > 0
    x = data[-1][0]
    got = qg.forward([x])[0].to(torch.float64)
    q_x = qg.nodes[0].outputs[0]
    qx = torch.clamp(torch.round(x * q_x.scale), q_x.qmin, q_x.qmax).to(torch.float64)
    acc = qx @ node.constants["weights"].betensor.to(torch.float64).T
    b = node.constants["biases"].betensor.to(torch.float64)
    out = node.outputs[0]

    def output(z, shift):
        return torch.clamp(torch.round(z * m * 2.0 ** -shift) - out.zerop, out.qmin, out.qmax)

    int32 = (-2 ** 31, 2 ** 31 - 1)
    want = output(torch.clamp(torch.round(acc * 2.0 ** -d), *int32) + torch.clamp(torch.floor(b * 2.0 ** -d), *int32), 6)
    assert torch.equal(got, want)
    assert not torch.equal(want, output(acc + b, s))
    assert "remain_shift" not in quantize(fc_with_large_biases(), data, cfg_attrs={"remain_shift": 6}).node("op").params


# ---- bias_effective_bits: the low bits of biases cleared -------------------------------
def test_clear_low_bits_keeps_the_high_bits_that_fit():
    from npuopt.quant.qmath import clear_low_bits
    q = torch.tensor([100000.0, -70001.0, 5.0, -1.0], dtype=torch.float64)
    # 16 bits hold [-32768, 32767]: 100000 / 32767 needs 2 bits more, -70001 / -32768 too (ceil(log2 2.14) = 2)
    assert clear_low_bits(q, 16).tolist() == [100000.0, -70004.0, 4.0, -4.0]
    assert torch.equal(clear_low_bits(q, 18), q)           # already within 18 bits
    assert clear_low_bits(torch.tensor([3.0e6], dtype=torch.float64), 16).tolist() == [2999936.0]  # l = 7


def test_bias_effective_bits_clears_a_layers_low_bias_bits(tmp_path):
    data = batches((8,), lo=-20.0, hi=20.0)
    full = quantize(fc_with_large_biases(), data, activation_bits=16, weight_bits=16, bias_bits=48)
    cut = quantize(fc_with_large_biases(), data, activation_bits=16, weight_bits=16, bias_bits=48,
                   cfg_attrs={"bias_effective_bits": 24})
    b_full = full.node("op").constants["biases"].betensor.to(torch.float64)
    b_cut = cut.node("op").constants["biases"].betensor.to(torch.float64)
    low = math.ceil(max(math.log2(float(b_full.max()) / (2 ** 23 - 1)), math.log2(float(b_full.min()) / -2 ** 23)))
    assert low > 0 and torch.equal(b_cut, torch.floor(b_full / 2 ** low) * 2 ** low)
    assert not torch.equal(b_cut, b_full)


def test_remain_shift_is_an_attr_where_the_tool_chain_sets_it():
    """OPT's quantize functions copy attrs['remain_shift'] into the IR where it is present:
    only on its ahead-shift layer types and when the cfg sets it."""
    from npuopt.node import PyNode
    conv, pool, other = PyNode("c", "Convolution"), PyNode("p", "Pooling"), PyNode("d", "Convolution")
    for node in (conv, pool):
        node.attrs["qsettings"] = QuantSettings(cfg_attrs={"remain_shift": 20})
    other.attrs["qsettings"] = QuantSettings(cfg_attrs={"remain_shift": ""})
    assert "remain_shift" in conv.attrs and conv.attrs["remain_shift"] == 20
    assert "remain_shift" not in pool.attrs and "remain_shift" not in other.attrs
    with pytest.raises(KeyError):
        other.attrs["remain_shift"]


def test_force_shift_positive_saturates_a_rescale_that_needs_a_negative_shift(tmp_path):
    """force_shift_positive (per layer, as the tool chain's): a CLIP of a huge input range
    to a tiny output needs ratio ~2^27, a negative shift (-20 at 8-bit multipliers); with
    it the shift is 0 and the multiplier the largest, and the forward follows the IR."""
    outputs = {}
    for force in (False, True):
        graph = one_layer("Activation", [(8,)], dict(method="CLIP", clip_min=0.0, clip_max=1e-3))
        data = batches((8,), lo=-1e5, hi=1e5)
        qg = quantize(graph, data, cfg_attrs={"force_shift_positive": force})
        params = qg.node("op").params
        outputs[force] = (params["scale_value"], params["shift_value"])
        path = tmp_path / f"{force}_o.txt"
        write_graph(qg, str(path))
        assert torch.equal(read_graph(str(path)).forward(list(data[0]))[0], qg.forward(list(data[0]))[0])
    assert outputs[False][1] < 0 and outputs[True] == (255, 0)


def test_bias_effective_bits_auto_adaption_searches_a_narrower_clamp():
    """16-bit effective biases of 32: two biases one integer step apart at 2^23 become equal
    when 9 low bits are cleared, which moves their softmax by 0.06 in KL (over 0.05), so
    the adaption searches the clamp width (19 to 31 bits) that the clearing changes least,
    as the tool chain's does; biases the clearing does not move keep all their bits."""
    from npuopt.quant.bias_bits import adapted_bias_bits
    close = torch.tensor([1.0, 1.0 + 2 ** -23])
    assert adapted_bias_bits(close, float(2 ** 23), 32, 16) == 19
    assert adapted_bias_bits(torch.tensor([1.0, -1.0, 0.5, 0.25]), 100.0, 32, 16) == 32
    assert adapted_bias_bits(close, float(2 ** 23), 32, 31) == 32      # nothing cleared at 31 bits
