"""Issue 24, float16/bfloat16 layers: a layer kept in float in a float16 or bfloat16 mode
(trigger_float_op = float16_preferred, bfloat16_preferred, *_act_int_wht) computes in
float64 and holds values of its type: its tops are written as that type and rounded to it
(clamped to its finite range, half to even), its float constants too, but its biases,
which stay float32; a DeQuantize before it gives that type. The IR read back and
npuopt-run compute the same, bit for bit. OPT's forward reads them as npuopt does: the
conformance setting `float16_conv` (within one float16 step where float sums round
differently)."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import npuopt_run_outputs
from npuopt.dtype import Dtype, fit_float
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.calibration import Calibrator, attach_statistics
from npuopt.quant.quantizer import build_quantized_graph, float_layers, warn_float16_ranges
from npuopt.quant.settings import QuantSettings
from npuopt_run.runner import to_float_type
from test_ops_conv import params_of
from test_quantize_ops import batches
from test_refrun import OP_CASES, OP_TESTS, _compare_module


def conv_between_integer_layers(mode, factor: float = 100):
    """input -> conv1 (integers) -> conv2 (kept in float, `mode`; weights N(0, factor^2),
    biases 1e-5 of that) -> relu (integers)."""
    torch.manual_seed(0)
    b = GraphBuilder("t")
    x = b.input("in", [1, 6, 6, 3])
    params = params_of((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 4, "NONE")
    a = b.layer("Convolution", "conv1", [x], params, {"weights": torch.randn(4, 3, 3, 3), "biases": torch.randn(4)})
    c = b.layer("Convolution", "conv2", a, params, {"weights": torch.randn(4, 3, 3, 4) * factor,
                                                     "biases": torch.randn(4) * factor * 1e-5})
    r = b.layer("Activation", "relu", c, dict(method="RELU"))
    graph = b.build(r)
    graph.mark_integer_tensors()
    data = batches((6, 6, 3))
    attach_statistics(graph, Calibrator(graph, 512, 0.9).run([list(d) for d in data]))
    settings = {n.name: QuantSettings(trigger_float_op=mode if n.name == "conv2" else False) for n in graph.nodes}
    qg, _ = build_quantized_graph(graph, settings, float_layers(graph, settings))
    return graph, qg, data


@pytest.mark.parametrize("mode, dtype", [("float16_preferred", Dtype.FP16), ("bfloat16_preferred!", Dtype.BFP16)])
def test_a_float16_layer_holds_values_of_its_type(tmp_path, mode, dtype):
    graph, qg, data = conv_between_integer_layers(mode)
    conv = qg.node("conv2")
    assert not conv.quantized and conv.outputs[0].dtype is dtype and conv.inputs[0].dtype is dtype
    assert conv.constants["weights"].dtype is dtype and conv.constants["biases"].dtype is Dtype.FP32
    w = conv.constants["weights"].betensor
    assert torch.equal(w, fit_float(w, dtype)) and not torch.equal(w, graph.node("conv2").constants["weights"].betensor)
    x = list(data[-1])
    got = qg.forward(x, keep_tensors=True)[0].clone()
    top = conv.outputs[0].betensor
    assert torch.equal(top, fit_float(top, dtype))          # every value is one of the type's
    path = tmp_path / "q_o.txt"
    write_graph(qg, str(path))
    text = path.read_text()
    assert f"layer_top_type=[{dtype.value}]" in text and f"weights_type={dtype.value}" in text
    back = read_graph(str(path))
    assert torch.equal(back.forward(x)[0], got)
    ran = npuopt_run_outputs(path, x[0].numpy(), tmp_path)[qg.output_tensors[0].name]
    assert np.array_equal(ran, got.numpy())   # both compute float layers in float64


@pytest.mark.parametrize("factor, said", [(100, False), (1e-9, True), (1e5, True)])
def test_float16_tensors_out_of_the_types_range_are_named(caplog, factor, said):
    """A float16 layer whose calibrated outputs lie below float16's smallest normal (the
    parser's random-weight mobilenet_v2: about 1e-11, all zeros in float16) or above its
    largest gets one warning naming its tensor; bfloat16 none."""
    for mode in ("float16_preferred", "bfloat16_preferred!"):
        graph, qg, _ = conv_between_integer_layers(mode, factor)
        caplog.clear()
        with caplog.at_level("WARNING", logger="npuopt"):
            warn_float16_ranges(qg, graph)
        warned = "1 float16 tensor(s) hold values float16 cannot" in caplog.text and "'conv2'" in caplog.text
        assert warned == (said and mode == "float16_preferred"), caplog.text


def test_values_beyond_the_type_are_clamped_and_infinities_kept():
    x = torch.tensor([70000.0, -1e6, float("inf"), 1.0 + 2 ** -12, float("nan")])
    y = fit_float(x, Dtype.FP16)
    assert y[:4].tolist() == [65504.0, -65504.0, float("inf"), 1.0] and torch.isnan(y[4])
    assert fit_float(torch.tensor([1.0 + 2 ** -9]), Dtype.BFP16).item() == 1.0
    ours = fit_float(torch.linspace(-3e5, 3e5, 1001), Dtype.FP16).numpy()
    np.testing.assert_array_equal(to_float_type(np.linspace(-3e5, 3e5, 1001, dtype=np.float32), "float16"), ours)
    v = torch.randn(10000) * 1e3
    np.testing.assert_array_equal(to_float_type(v.numpy(), "bfloat16"), fit_float(v, Dtype.BFP16).numpy())


FLOAT_MODES = ("float16_preferred!", "bfloat16_preferred!", "float32_preferred!")


@pytest.mark.parametrize("mode", FLOAT_MODES)
@pytest.mark.parametrize("case", OP_CASES)
def test_float_layers_equal_npuopt(case, mode):
    """Every op test with all its layers but its Inputs kept in float (`mode`): npuopt-run
    gives npuopt's every tensor bit for bit, float ones included (both compute float layers
    in float64 and round each top to float32 and then to its type; in float32 they
    differed in 8 of these cases in float16 mode, and npuopt-run refused 12 whose float
    layers read indices or write a comparison's 0/1)."""
    types = sorted(set(re.findall(r"^layer_type=(\w+)$", Path(OP_TESTS, case, f"{case}.txt").read_text(), re.M)))
    types.remove("Input")
    compare = _compare_module()
    passed, line = compare.run_case(str(Path(OP_TESTS, case)), {"trigger_float_op": f"disable & <[{', '.join(types)}]:{mode}>"},
                                    exact=True)
    assert passed, line
