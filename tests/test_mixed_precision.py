"""A layer that cannot be quantized is kept in float alone: the graph built around it
equals the one built with the layer asked to stay float from the start, and the layers
before it are not quantized again."""
from dataclasses import replace

import pytest
import torch

from npuopt.ir.builder import GraphBuilder
from npuopt.quant import quantizer
from npuopt.quant.calibration import Calibrator, attach_statistics
from npuopt.quant.quantizer import build_quantized_graph, float_layers
from npuopt.quant.settings import QuantSettings
from tests.test_quantize_ops import batches


def fc(b, name, bottom, activation="NONE"):
    gen = torch.Generator().manual_seed(len(name) + sum(map(ord, name)))
    b.layer("FullyConnected", name, [bottom], dict(num_output=8, with_activation=activation),
            {"weights": torch.randn(8, 8, generator=gen) * 0.4, "biases": torch.randn(8, generator=gen) * 0.1})


def model():
    """fc1 -> fc2 (fused TANH: no integer form) -> fc3 -> add(fc3, fc1) -> fc4."""
    b = GraphBuilder("t")
    b.input("x", [1, 6, 8])
    fc(b, "fc1", "x")
    fc(b, "fc2", "fc1", "TANH")
    fc(b, "fc3", "fc2")
    b.layer("Eltwise", "add", ["fc3", "fc1"], dict(method="ADD", with_activation="NONE"))
    fc(b, "fc4", "add")
    g = b.build(["fc4"])
    data = batches((6, 8), n=3)
    attach_statistics(g, Calibrator(g, 512, 0.9).run([list(d) for d in data]))
    return g, data


def graph_copies(monkeypatch) -> list:
    """The type names of what quantizer deep-copies from now on."""
    copies = []
    deepcopy = quantizer.copy.deepcopy
    monkeypatch.setattr(quantizer.copy, "deepcopy", lambda x, *a: copies.append(type(x).__name__) or deepcopy(x, *a))
    return copies


def structure(g):
    return sorted((n.name, n.type, tuple(t.name for t in n.inputs), n.quantized) for n in g.nodes)


@pytest.mark.parametrize("asked", [set(), {"fc3"}, {"fc1"}, {"fc1", "fc3", "add"}])
def test_unsupported_layer_is_kept_in_float_alone(asked, monkeypatch):
    g, data = model()
    settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema", trigger_float_op=n.name in asked)
                for n in g.nodes}
    copies = graph_copies(monkeypatch)
    qg, kept = build_quantized_graph(g, dict(settings), float_layers(g, settings))
    assert kept == asked | {"fc2"}
    assert copies.count("QuantizeGraph") == 1  # no restart: only fc2 was made again from the float graph
    assert not qg.node("fc2").quantized and qg.node("fc4").quantized

    settings_ahead = {k: replace(v, trigger_float_op=k in kept) for k, v in settings.items()}
    want, _ = build_quantized_graph(g, settings_ahead, float_layers(g, settings_ahead))
    assert structure(qg) == structure(want)
    x = list(data[-1])
    assert torch.equal(qg.forward(x)[0], want.forward(x)[0])
    boundaries = [n for n in qg.nodes if n.type in ("Quantize", "DeQuantize")]
    assert all(n.params["unquantifiable"] for n in boundaries)
    # every edge between a float and a quantized layer crosses exactly one boundary
    for n in qg.nodes:
        for t in n.inputs:
            src = next(p for p in qg.nodes if t in p.outputs) if t.name != "x" else None
            if src is not None and src.type not in ("Quantize", "DeQuantize") and n.type not in ("Quantize", "DeQuantize"):
                assert (src.name in kept) == (n.name in kept), (src.name, n.name)


def test_a_quantize_that_changed_its_inputs_restarts(monkeypatch):
    """When the failing layer's quantize had changed its input's quantization, which the
    layers before it were quantized with, the build starts again from the float graph."""
    g, data = model()
    settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema") for n in g.nodes}
    real = quantizer.PyNode.quantize

    def quantize(node, *args):
        if node.name == "fc2" and node.quantized is False and "fc2" not in seen:
            seen.add("fc2")
            node.inputs[0].scale = node.inputs[0].scale * 2
        return real(node, *args)
    seen = set()
    monkeypatch.setattr(quantizer.PyNode, "quantize", quantize)
    copies = graph_copies(monkeypatch)
    qg, kept = build_quantized_graph(g, settings, set())
    assert kept == {"fc2"} and copies.count("QuantizeGraph") == 2
    settings_ahead = {k: replace(v, trigger_float_op=k == "fc2") for k, v in settings.items()}
    want, _ = build_quantized_graph(g, settings_ahead, {"fc2"})
    x = list(data[-1])
    assert torch.equal(qg.forward(x)[0], want.forward(x)[0])
