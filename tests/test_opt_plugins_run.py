"""Issue 11, acceptance 1: the Compass Optimizer's own op files and the DummyOP example of
its readme, ported with the documented rule only, run end to end in `npuopt --cfg` as
plugins that replace npuopt's built-ins: sanity forward, calibration, quantize, quantized
forward and the written IR.

One IR holds a layer for each op file (Abs, Square; Activation LEAKYRELU, HARDSWISH,
SIGMOID, TANH; Reduce; Eltwise; Convolution with per-tensor and per-channel weights) and
a DummyOP. It runs twice on the same data: with OPT's op files (and everything they
import from OPT) on AIPUPLUGIN_PATH, and with npuopt's built-ins (the DummyOP plugin
alone). Each run's quantized outputs must keep a cosine of 0.99 with float, and OPT's
quantize, on npuopt's calibrated ranges, must write the very fields npuopt's built-ins
write, except where the tool chain's format allows both (EXPECTED_DIFFERENCES)."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from npuopt.ir import write_graph
from npuopt.ir.builder import GraphBuilder
from port_opt_plugins import port_text

from conftest import start_npuopt, write_cfg

SHAPE = [1, 4, 4, 3]
# layer -> (OPT op file, layer type, params)
LAYERS = {
    "abs": ("abs", "Abs", {}),
    "square": ("square", "Square", {}),
    "leakyrelu": ("leakyrelu", "Activation", {"method": "LEAKYRELU", "negative_slope_value": 0.1}),
    "hardswish": ("hardswish", "Activation", {"method": "HARDSWISH"}),
    "sigmoid": ("sigmoid", "Activation", {"method": "SIGMOID"}),
    "tanh": ("tanh", "Activation", {"method": "TANH"}),
    "reduce": ("reduce", "Reduce", {"method": "MEAN", "axis": [2]}),
}
CONV = dict(kernel_x=3, kernel_y=3, stride_x=1, stride_y=1, pad_left=1, pad_right=1, pad_top=1, pad_bottom=1,
            dilation_x=1, dilation_y=1, group=1, num_output=4, with_activation="NONE")
# the Activation layers run OPT's activation.py, which dispatches to the method's file
OP_FILES = sorted({f for f, _, _ in LAYERS.values()} | {"activation", "eltwise", "conv"})
REPLACED_TYPES = ["Abs", "Square", "Activation", "Reduce", "Eltwise", "Convolution"]
# IR fields where OPT's quantize and npuopt's differ, both in the tool chain's format:
# LeakyRELU's slope in 8 bits (shifted by the output bits) or in 16 bits with its own
# shift; Eltwise ADD's branch multipliers relative to the larger input scale or to the output
EXPECTED_DIFFERENCES = {
    "leakyrelu": {"negative_slope_value", "negative_slope_type", "negative_slope_shift"},
    "eltwise": {"scale_value", "shift_value"},
}
IMPORTED_OP = re.compile(r"^\s*(?:from|import)\s+npuopt\.ops\.(\w+)", re.M)


def with_imports(ops: Path, names) -> list:
    """`names` and every OPT op file they import, transitively."""
    todo, found = list(names), set()
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += IMPORTED_OP.findall((ops / f"{name}.py").read_text(encoding="utf-8"))
    return sorted(found)


def dummy_example(opt_root: Path) -> str:
    """The op plugin example of OPT's readme (the code block registering DummyOP)."""
    readme = (opt_root / "readme.md").read_text(encoding="utf-8")
    return next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "register_optype('DummyOP')" in b)


def build_ir(folder: Path, extra: dict = None) -> Path:
    """The common layers (LAYERS, Eltwise, Convolution per tensor and per channel, DummyOP)
    on the inputs, and `extra` {name: (type, params, {constant: shape})} before DummyOP."""
    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder("ops")
    b.input("x", SHAPE)
    b.input("y", SHAPE)
    for name, (_, optype, params) in LAYERS.items():
        b.layer(optype, name, ["x"], params)
    b.layer("Eltwise", "eltwise", ["x", "y"], {"method": "ADD", "with_activation": "NONE"})
    for name in ("conv", "conv_pc"):
        b.layer("Convolution", name, ["x"], CONV, {"weights": torch.randn(4, 3, 3, 3, generator=gen)
                                                   * torch.tensor([1.0, 0.1, 0.01, 2.0]).reshape(4, 1, 1, 1),
                                                   "biases": torch.randn(4, generator=gen)})
    for name, (optype, params, constants) in (extra or {}).items():
        values = {k: torch.rand(shape, generator=gen) + 0.5 if k == "weights" and len(shape) == 1
                  else torch.randn(shape, generator=gen) for k, shape in constants.items()}
        b.layer(optype, name, ["x", "y"] if optype == "Add" else ["x"], params, values)
    b.layer("Abs", "dummy", ["x"], {"whether_minus_one": False})  # written as a DummyOP (its forward is a plugin's)
    b.nodes[-1].type = "DummyOP"
    txt = folder / "ops.txt"
    write_graph(b.build([n.name for n in b.nodes[2:]]), str(txt))
    return txt


def read_layers(txt: Path) -> dict:
    """{layer name: {key: value text, and for each constant C: C_data = its bytes}}, offsets left out."""
    raw = txt.with_suffix(".bin").read_bytes()
    layers = {}
    for block in txt.read_text(encoding="utf-8").split("\n\n")[1:]:
        fields = dict(line.split("=", 1) for line in block.strip().splitlines())
        for key in [k for k in fields if k.endswith("_offset")]:
            offset, size = int(fields.pop(key)), int(fields[key[:-7] + "_size"])
            fields[key[:-7] + "_data"] = raw[offset:offset + size]
        layers[fields["layer_name"]] = fields
    return layers


@pytest.fixture(scope="module")
def runs(ported, opt_root, tmp_path_factory):
    """(stderr, layers of the written IR, report) of the run with OPT's op files and of the built-in run."""
    work = tmp_path_factory.mktemp("opt_ops")
    txt = build_ir(work)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal([16] + SHAPE[1:]) * 2).astype(np.float32)
    np.savez(work / "data.npz", x, rng.standard_normal([16] + SHAPE[1:]).astype(np.float32))
    plugin_dirs = {"opt": work / "opt_ops", "builtin": work / "dummy_only"}
    for folder in plugin_dirs.values():
        folder.mkdir()
        (folder / "aipubt_opt_op_dummy.py").write_text(port_text(dummy_example(opt_root)), encoding="utf-8")
    for name in with_imports(ported / "ops", OP_FILES):
        shutil.copy(ported / "ops" / f"{name}.py", plugin_dirs["opt"])
    return quantize_with_plugins(work, txt, plugin_dirs)


def quantize_with_plugins(work: Path, txt: Path, plugin_dirs: dict) -> dict:
    """{kind: (stderr, layers of the written IR, report)} of one npuopt run on `txt` (with
    work/data.npz) per plugin folder of `plugin_dirs` {kind: folder}, side by side."""
    futures = {}
    for kind, folder in plugin_dirs.items():
        cfg = write_cfg(work / f"{kind}.cfg", graph=txt.name, bin=txt.with_suffix(".bin").name,
                        dataset="NumpyMultiInputDataset", calibration_data="data.npz", data="data.npz",
                        calibration_batch_size=8, metric_batch_size=8, output_dir=kind,
                        global_calibration="none",  # OPT's quantize rounds to nearest, not to npuopt's plan
                        quantize_method_for_weight="per_tensor_symmetric_restricted_range & "
                                                   "<{^conv_pc}:per_channel_symmetric_restricted_range>")
        futures[kind] = start_npuopt("--cfg", cfg, cwd=work, plugin_path=folder)
    out = {}
    for kind, future in futures.items():
        result = future.result()
        assert result.returncode == 0, f"{kind} run:\n{result.stderr[-6000:]}"
        report = json.loads((work / kind / "ops_report.json").read_text())
        out[kind] = (result.stderr, read_layers(work / kind / "ops_o.txt"), report)
    return out


@pytest.mark.shared
def test_opt_op_files_replace_the_builtins(runs):
    stderr = runs["opt"][0]
    for optype in REPLACED_TYPES:
        for what in ("op forward", "op quantizer"):
            assert re.search(rf"{what} '{optype}': the user's \S+ is used instead of the built-in", stderr), \
                (what, optype)
    assert "op forward 'Abs': the user's" not in runs["builtin"][0]


@pytest.mark.shared
@pytest.mark.parametrize("kind", ["opt", "builtin"])
def test_quantized_outputs_follow_float(runs, kind):
    """The report's per-layer similarity: the quantized forward (OPT's ops in the opt run)
    against the float one, on the first samples."""
    rows = {r["layer"]: r for r in runs[kind][2]["layer_similarity"]}
    layers = [*LAYERS, "eltwise", "conv", "conv_pc", "dummy"]
    assert all(rows[n]["quantized"] for n in layers)
    low = {n: rows[n]["cosine"] for n in layers if rows[n]["cosine"] < 0.99}
    assert not low, low


@pytest.mark.shared
def test_opt_quantize_writes_what_npuopt_writes(runs):
    opt, builtin = runs["opt"][1], runs["builtin"][1]
    for name in [*LAYERS, "eltwise", "conv", "conv_pc"]:
        differ = {k for k in opt[name].keys() | builtin[name].keys() if opt[name].get(k) != builtin[name].get(k)}
        assert differ == EXPECTED_DIFFERENCES.get(name, set()), (name, {k: (opt[name].get(k), builtin[name].get(k))
                                                                        for k in differ if not k.endswith("_data")})
    # OPT's quantize put these in node.params; the IR has them
    assert opt["leakyrelu"]["negative_slope_type"] == "uint8" and opt["eltwise"]["scale_value"].count(",") == 2
    assert opt["conv_pc"]["scale_type"] == "uint16" and len(opt["conv_pc"]["scale_data"]) == 4 * 2  # per channel


@pytest.mark.shared
def test_dummy_example_writes_its_fields(runs):
    dummy = runs["opt"][1]["dummy"]
    assert dummy["whether_plus_one"] == "true" and dummy["whether_minus_one"] == "false"
    assert (dummy["lut_type"], dummy["lut_shape"], dummy["lut_data"]) == ("uint16", "[256]", bytes(512))
    x = runs["opt"][1]["x"]
    assert [dummy[k] for k in ("layer_top_scale", "layer_top_zp", "layer_top_type")] == \
        [x[k] for k in ("layer_top_scale", "layer_top_zp", "layer_top_type")]
