"""Issue 13: a corpus of bad (and a few unusual but valid) inputs, generated from valid
material: the example model examples/tiny_cnn (graph, weights, data, labels) and a cfg
like opt.cfg.example. Each case breaks one thing, runs `npuopt --cfg` in a subprocess
and checks what a user sees:

- a bad input: a non-zero exit, exactly one `npuopt: error:` line that names the culprit
  (file, layer, field or plugin file), no traceback, and the case's folder exactly as it
  was before the run (no output_dir, no temporary file, no input overwritten);
- a valid one: exit 0 and the quantized IR written.

Every case starts its run at once on conftest's pool; each test waits for its own.
"""
import json
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import pytest

from conftest import REPO, assert_one_line_error, edit_ir, line_of, start_npuopt, write_cfg

EXAMPLE = REPO / "examples" / "tiny_cnn"
GRAPH = "tiny_cnn.txt"


class Material:
    """One case's folder: m/ holds copies of the example's files, opt.cfg the cfg,
    out/ is the output_dir (absent before the run)."""

    def __init__(self, root: Path):
        self.root = root
        self.m = root / "m"
        shutil.copytree(EXAMPLE, self.m)
        self.txt = self.m / GRAPH
        self.bin = self.m / "tiny_cnn.bin"
        self.out = root / "out"
        self.plugins: Optional[Path] = None
        self.cfg = dict(graph=self.txt, bin=self.bin, model_name="tiny_cnn", output_dir=self.out,
                        dataset="NumpyDataset", calibration_data=self.m / "data.npy", calibration_batch_size=16,
                        data=self.m / "data.npy", label=self.m / "labels.npy", metric_batch_size=16,
                        metric="TopKMetric", device="cpu")

    def edit(self, layer, key, value) -> int:
        return edit_ir(self.txt, layer, key, value)

    def add_key(self, layer, line: str) -> int:
        """Append `line` to the block of `layer`; returns its line number."""
        after = line_of(self.txt, layer, "layer_top_type")
        lines = self.txt.read_text(encoding="utf-8").split("\n")
        lines.insert(after, line)
        self.txt.write_text("\n".join(lines), encoding="utf-8")
        return after + 1

    def set_constant(self, layer: str, name: str, fn: Callable[[np.ndarray], None]) -> None:
        """Change the float32 constant `name` of `layer` in the .bin in place through `fn`."""
        text = self.txt.read_text(encoding="utf-8").split("\n")
        offset = int(text[line_of(self.txt, layer, f"{name}_offset") - 1].split("=")[1])
        size = int(text[line_of(self.txt, layer, f"{name}_size") - 1].split("=")[1])
        raw = bytearray(self.bin.read_bytes())
        values = np.frombuffer(bytes(raw[offset:offset + size]), dtype="<f4").copy()
        fn(values)
        raw[offset:offset + size] = values.astype("<f4").tobytes()
        self.bin.write_bytes(bytes(raw))

    def plugin(self, name: str, body: str) -> Path:
        self.plugins = self.root / "plugins"
        self.plugins.mkdir(exist_ok=True)
        path = self.plugins / name
        path.write_text(body, encoding="utf-8")
        return path


class Case:
    def __init__(self, name: str, make: Callable[[Material], Optional[List[str]]], valid: bool = False):
        self.name, self.make, self.valid = name, make, valid


CASES: List[Case] = []


def case(name, valid=False):
    def deco(fn):
        CASES.append(Case(name, fn, valid))
        return fn
    return deco


# ---- layer params ---------------------------------------------------------------------
def _param(name, layer, key, value, *extra):
    @case(name)
    def make(m: Material):
        m.edit(layer, key, value)
        return [f"'{layer}'", key, *extra]


_param("conv_stride_zero", "conv1", "stride_x", "0")
_param("conv_stride_negative", "dw", "stride_y", "-1")
_param("conv_group_zero", "pw", "group", "0")
_param("conv_group_not_dividing", "conv1", "group", "2")
_param("conv_pad_fraction", "conv1", "pad_left", "1.5")
_param("conv_kernel_word", "conv1", "kernel_x", "three")
_param("conv_kernel_huge", "conv1", "kernel_x", "1e11")
_param("conv_dilation_zero", "branch_b", "dilation_x", "0")
_param("conv_num_output_mismatch", "conv1", "num_output", "9")
_param("pool_stride_zero", "pool1", "stride_x", "0")
_param("pool_kernel_word", "pool1", "kernel_y", "three")
_param("pool_ceil_mode_maybe", "pool1", "ceil_mode", "maybe")
_param("pool_method_unknown", "pool1", "method", "MEDIAN")
_param("concat_axis_out_of_range", "concat", "axis", "7")
_param("softmax_axis_out_of_range", "prob", "axis", "-5")
_param("reshape_does_not_fit", "flatten", "shape", "[1,5]")
_param("eltwise_method_unknown", "add", "method", "POW")
_param("activation_method_unknown", "conv1", "with_activation", "SOMETIMES")


@case("conv_top_type_bool")
def _(m):
    m.edit("conv1", "layer_top_type", "[bool]")
    m.edit("pool1", "layer_bottom_type", "[bool]")
    return ["'conv1'", "layer_top_type"]


@case("input_zero_size")
def _(m):
    m.edit("input", "layer_top_shape", "[[1,0,12,3]]")
    m.edit("conv1", "layer_bottom_shape", "[[1,0,12,3]]")
    return ["'input'", "layer_top_shape"]


@case("input_huge")
def _(m):
    m.edit("input", "layer_top_shape", "[[1,100000,100000,3]]")
    m.edit("conv1", "layer_bottom_shape", "[[1,100000,100000,3]]")
    return ["'input'", "layer_top_shape"]


@case("int8_input_into_float_conv")
def _(m):
    m.edit("input", "layer_top_type", "[int8]")
    m.edit("conv1", "layer_bottom_type", "[int8]")
    return ["'conv1'", "int8"]


@case("weights_overflow")
def _(m):
    m.set_constant("conv1", "weights", lambda w: w.__setitem__(slice(None), 3e38))
    return ["'conv1'"]


@case("weights_nan")
def _(m):
    m.set_constant("dw", "weights", lambda w: w.__setitem__(5, np.nan))
    return ["'dw'", "weights", "NaN"]


@case("biases_inf")
def _(m):
    m.set_constant("branch_b", "biases", lambda w: w.__setitem__(1, np.inf))
    return ["'branch_b'", "biases"]


@case("ir_deeply_nested_list")
def _(m):
    line = m.add_key("conv1", "extra=" + "[" * 20000 + "]" * 20000)
    return [f"{GRAPH}:{line}"]


@case("opt_config_deeply_nested")
def _(m):
    path = m.m / "layers.json"
    path.write_text('{"conv1": {"weight_bits": ' + "[" * 20000 + "]" * 20000 + "}}")
    m.cfg["opt_config"] = path
    return ["layers.json"]


# ---- cfg values ------------------------------------------------------------------------
def _cfg(name, field, value, *fragments):
    @case(name)
    def make(m: Material):
        m.cfg[field] = value
        return [field, *fragments]


_cfg("metric_unbalanced", "metric", "TopKMetric(")
_cfg("metric_unknown", "metric", "TopKMetrik")
_cfg("output_dir_empty", "output_dir", "")
_cfg("model_name_slash", "model_name", "sub/model")
_cfg("model_name_dotdot", "model_name", "../escaped")
_cfg("out_ir_name_slash", "out_ir_name", "sub/model")
_cfg("out_ir_name_dotdot", "out_ir_name", "..")
_cfg("batch_size_zero", "calibration_batch_size", "0")
_cfg("bits_word", "activation_bits", "eight")


@case("output_overwrites_graph")
def _(m):
    m.cfg.update(output_dir=m.m, out_ir_name="tiny_cnn", graph=m.m / "tiny_cnn_o.txt", bin=m.m / "tiny_cnn_o.bin")
    m.txt.rename(m.m / "tiny_cnn_o.txt")
    m.bin.rename(m.m / "tiny_cnn_o.bin")
    return ["graph", "tiny_cnn_o.txt", "overwrite"]


@case("output_overwrites_calibration_data")
def _(m):
    m.cfg.update(output_dir=m.m, out_ir_name="x", calibration_data=m.m / "x_o.bin")
    shutil.copyfile(m.m / "data.npy", m.m / "x_o.bin")
    return ["calibration_data", "x_o.bin", "overwrite"]


@case("output_overwrites_opt_config")
def _(m):
    m.cfg.update(output_dir=m.m, opt_config=m.m / "tiny_cnn_opt_template.json")
    (m.m / "tiny_cnn_opt_template.json").write_text('{"conv1": {"weight_bits": 8}}')
    return ["opt_config", "tiny_cnn_opt_template.json", "overwrite"]


@case("statistic_file_is_folder")
def _(m):
    (m.m / "statdir").mkdir()
    m.cfg["statistic_file"] = m.m / "statdir"
    return ["statistic_file", "statdir"]


@case("statistic_file_is_graph")
def _(m):
    m.cfg["statistic_file"] = m.txt
    return ["statistic_file", GRAPH]


@case("dump_dir_is_file")
def _(m):
    (m.m / "a_file").write_text("x")
    m.cfg.update(dump="true", dump_dir=m.m / "a_file")
    return ["dump_dir", "a_file"]


# ---- data and labels ---------------------------------------------------------------------
@case("label_out_of_range_at_sample_7")
def _(m):
    labels = np.load(EXAMPLE / "labels.npy")
    labels[7] = 99
    np.save(m.m / "labels.npy", labels)
    return ["labels.npy", "99"]


@case("label_strings")
def _(m):
    np.save(m.m / "labels.npy", np.array(["cat"] * 100))
    return ["labels.npy"]


@case("data_big_endian", valid=True)
def _(m):
    np.save(m.m / "data.npy", np.load(EXAMPLE / "data.npy").astype(">f4"))
    np.save(m.m / "labels.npy", np.load(EXAMPLE / "labels.npy").astype(">i8"))


@case("data_wrong_shape")
def _(m):
    np.save(m.m / "data.npy", np.zeros((10, 12, 11, 3), np.float32))
    return ["NumpyDataset", "'input'"]


# ---- plugins -------------------------------------------------------------------------------
DATASET_PLUGIN = """
from npuopt.framework import Dataset, PluginType, register_plugin
import numpy as np
{before}
@register_plugin(PluginType.Dataset, "1.0")
class CorpusDataset(Dataset):
    def __init__(self, data_file, label_file=None):
        self.data = np.load(data_file)
        self.labels = np.load(label_file) if label_file else None
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return self.data[i], (self.labels[i] if self.labels is not None else np.zeros(()))
"""


@case("plugin_raises_at_import")
def _(m):
    m.plugin("corpus_dataset.py", DATASET_PLUGIN.format(before="raise RuntimeError('no licence found')"))
    m.cfg["dataset"] = "CorpusDataset"
    return ["corpus_dataset.py", "CorpusDataset"]


@case("plugin_exits_at_import")
def _(m):
    m.plugin("corpus_dataset.py", DATASET_PLUGIN.format(before="import sys; sys.exit(3)"))
    m.cfg["dataset"] = "CorpusDataset"
    return ["corpus_dataset.py", "CorpusDataset"]


@case("unused_plugin_raises_at_import", valid=True)
def _(m):
    m.plugin("unused.py", "raise ImportError('a module it needs is missing')\n")


@case("plugin_forward_raises")
def _(m):
    m.plugin("my_softmax.py", (
        "from npuopt.framework import OpType, op_register\n"
        "@op_register(OpType.Softmax, '9.0')\n"
        "def softmax(self, *args):\n"
        "    raise ValueError('my softmax is broken')\n"))
    return ["my_softmax.py", "'prob'", "my softmax is broken"]


@case("plugin_quantize_raises")
def _(m):
    m.plugin("my_softmax_q.py", (
        "from npuopt.framework import OpType, quant_register\n"
        "@quant_register(OpType.Softmax, '9.0')\n"
        "def softmax_quantize(self, *args):\n"
        "    raise KeyError('scale')\n"))
    return ["my_softmax_q.py", "'prob'"]


@case("plugin_metric_raises")
def _(m):
    m.plugin("my_metric.py", (
        "from npuopt.framework import OptBaseMetric, PluginType, register_plugin\n"
        "@register_plugin(PluginType.Metric, '1.0')\n"
        "class BrokenMetric(OptBaseMetric):\n"
        "    def __init__(self):\n"
        "        pass\n"
        "    def reset(self):\n"
        "        pass\n"
        "    def __call__(self, pred, target):\n"
        "        raise ZeroDivisionError('division by zero')\n"
        "    def compute(self):\n"
        "        return 0.0\n"))
    m.cfg["metric"] = "BrokenMetric"
    return ["my_metric.py", "BrokenMetric"]


@case("plugin_dataset_getitem_raises")
def _(m):
    m.plugin("corpus_dataset.py", DATASET_PLUGIN.format(before="").replace(
        "        return self.data[i]", "        if i == 7:\n            raise IndexError('sample 7 is gone')\n"
        "        return self.data[i]"))
    m.cfg["dataset"] = "CorpusDataset"
    return ["CorpusDataset", "sample 7 is gone"]


# ---- the runs --------------------------------------------------------------------------------
def _snapshot(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(root.rglob("*")) if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case prepared and started at once: name -> (material, fragments, snapshot, future)."""
    root = tmp_path_factory.mktemp("corpus")
    out = {}
    for c in CASES:
        m = Material(root / c.name)
        fragments = c.make(m)
        cfg = write_cfg(m.root / "opt.cfg", **m.cfg)
        before = _snapshot(m.root)
        out[c.name] = (m, fragments, before, start_npuopt("--cfg", cfg, cwd=m.root, plugin_path=m.plugins))
    return out


@pytest.mark.parametrize("name", [c.name for c in CASES if not c.valid])
def test_bad_input(runs, name):
    m, fragments, before, future = runs[name]
    result = future.result()
    assert_one_line_error(result, *fragments, only_line=False)
    assert _snapshot(m.root) == before, f"the run left or changed files: " \
        f"{sorted(set(_snapshot(m.root)) ^ set(before))}\n{result.stderr}"


@pytest.mark.parametrize("name", [c.name for c in CASES if c.valid])
def test_valid_input(runs, name):
    m, _, _, future = runs[name]
    result = future.result()
    assert result.returncode == 0, result.stderr
    assert "npuopt: error" not in result.stderr
    assert (m.out / "tiny_cnn_o.txt").is_file() and (m.out / "tiny_cnn_o.bin").is_file()


def test_corpus_covers_each_class():
    names = {c.name for c in CASES}
    assert len(names) == len(CASES)
    assert len(CASES) >= 50
