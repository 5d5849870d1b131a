"""Issue 2, point 5: a user's plugin folder on AIPUPLUGIN_PATH (a dataset, a metric, and
an op replacing a built-in forward at a higher version) is listed by `npuopt --plugin`
and used by `npuopt --cfg`; broken plugin files are reported and skipped.

Plugins are only ever loaded in subprocesses: loading them here would replace the
built-in Softmax for every other test."""
import json
import re
import textwrap

import pytest

from npuopt.errors import PluginError
from npuopt.registry import Registry, op_register

from conftest import REPO, error_lines, start_npuopt, write_cfg

PLUGIN_FILES = {
    "user_dataset.py": '''
        from npuopt.framework import *
        from npuopt.logger import *

        @register_plugin(PluginType.Dataset, "1.0")
        class RampDataset(Dataset):
            """Sample i is an image full of i; its label is i % 4. The data file holds the count."""
            def __init__(self, data_file, label_file=None):
                with open(data_file) as f:
                    self.count = int(f.read())
                OPT_INFO(f"RampDataset: {self.count} samples")

            def __len__(self):
                return self.count

            def __getitem__(self, i):
                return torch.full((12, 12, 3), float(i)), torch.tensor(i % 4)
        ''',
    "user_metric.py": '''
        from npuopt.framework import *
        from npuopt.logger import *

        @register_plugin(PluginType.Metric, "1.0")
        class CountingMetric(OptBaseMetric):
            """samples + labels' sum / 1000: a value no built-in metric gives."""
            def __init__(self, *args):
                self.reset()

            def __call__(self, pred, target):
                self.samples += pred[0].shape[0]
                self.label_sum += int(target.sum())

            def reset(self):
                self.samples, self.label_sum = 0, 0

            def compute(self):
                return self.samples + self.label_sum / 1000
        ''',
    "user_softmax.py": '''
        from npuopt.framework import *
        from npuopt.logger import *

        @op_register(OpType.Softmax, "1.1")
        def marked_softmax(self, *args):
            """Writes 0.125 everywhere: the report's output statistics show it ran."""
            out = torch.full_like(self.inputs[0].betensor, 0.125)
            self.outputs[0].betensor = out
            return out
        ''',
    "user_float_op.py": '''
        from npuopt.framework import *

        register_optype("UserFloatOnly")

        @op_register(OpType.UserFloatOnly, "1.0")
        def user_float_only(self, *args):
            """A forward without a quantize function: kept in float in a quantized IR."""
            self.outputs[0].betensor = self.inputs[0].betensor
            return self.outputs[0].betensor
        ''',
    "broken_syntax.py": '''
        from npuopt.framework import *

        def broken(:
            pass
        ''',
    "broken_import.py": '''
        from npuopt.framework import *

        raise RuntimeError("plugin refuses to load")
        ''',
}
CWD_PLUGIN = '''
    from npuopt.framework import *

    @register_plugin(PluginType.Metric, "1.0")
    class CwdMetric(OptBaseMetric):
        def __call__(self, pred, target): pass
        def reset(self): pass
        def compute(self): return 0.0
    '''
LISTING = re.compile(r"^(op forward|op quantize|dataset|metric)\s+(\S+)\s+(\S+)\s+(\S+)(\s+\(overridden\))?$")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_plugins")
    user_dir = root / "my_plugins"
    user_dir.mkdir()
    for name, text in PLUGIN_FILES.items():
        (user_dir / name).write_text(textwrap.dedent(text).lstrip())
    (root / "plugin").mkdir()
    (root / "plugin" / "cwd_metric.py").write_text(textwrap.dedent(CWD_PLUGIN).lstrip())
    (root / "count.txt").write_text("5")
    cfg = write_cfg(root / "opt.cfg", graph=REPO / "examples" / "tiny_cnn" / "tiny_cnn.txt", dataset="RampDataset",
                    data="count.txt", metric="CountingMetric", output_dir="out", device="cpu")
    return {
        "root": root,
        "user_dir": user_dir,
        "listing": start_npuopt("--plugin", cwd=root, plugin_path=user_dir),
        "run": start_npuopt("--cfg", cfg, cwd=root, plugin_path=user_dir),
    }


def listing(result):
    """{(kind, name): [(version, source, overridden)]} from `npuopt --plugin`."""
    found = {}
    for line in result.stdout.splitlines():
        m = LISTING.match(line)
        if m:
            found.setdefault((m[1], m[2]), []).append((m[3], m[4], bool(m[5])))
    return found


def test_plugin_lists_user_plugins_with_version_source_and_override(runs):
    result = runs["listing"].result()
    assert result.returncode == 0, result.stderr
    found = listing(result)
    softmax = found[("op forward", "Softmax")]
    assert [(version, overridden) for version, _, overridden in softmax] == [("1.0", True), ("1.1", False)]
    assert softmax[0][1].endswith("npuopt/ops/softmax.py")
    assert softmax[1][1] == "my_plugins/user_softmax.py"  # relative to the working directory
    assert found[("dataset", "RampDataset")] == [("1.0", "my_plugins/user_dataset.py", False)]
    assert found[("metric", "CountingMetric")] == [("1.0", "my_plugins/user_metric.py", False)]
    assert found[("metric", "CwdMetric")] == [("1.0", "plugin/cwd_metric.py", False)]  # ./plugin/
    assert found[("metric", "TopKMetric")][0][1].endswith("aipubt_opt_metric_topk.py")  # built-ins still there
    assert ("op forward", "Convolution") in found
    # a type with a forward and no quantize function is listed as kept in float
    float_lines = {line.split()[2]: line for line in result.stdout.splitlines() if line.startswith("op float")}
    assert "kept in float (no quantize function)" in float_lines["UserFloatOnly"], float_lines
    assert "Softmax" not in float_lines and "Convolution" not in float_lines
    folders = next(line for line in result.stdout.splitlines() if line.startswith("plugin folders: "))
    assert str(runs["user_dir"]) in folders and str(runs["root"] / "plugin") in folders


def test_plugin_lists_broken_files_with_their_errors(runs):
    result = runs["listing"].result()
    failed = [line for line in result.stdout.splitlines() if line.startswith("failed")]
    assert len(failed) == 2, result.stdout
    assert failed[0].split(None, 1)[1] == "my_plugins/broken_import.py: RuntimeError: plugin refuses to load (line 3)"
    assert failed[1].split(None, 1)[1].startswith("my_plugins/broken_syntax.py: SyntaxError: ")
    assert "line 3" in failed[1]


def test_cfg_run_uses_the_user_dataset_metric_and_op(runs):
    result = runs["run"].result()
    assert result.returncode == 0, result.stderr
    assert error_lines(result) == []
    report = json.loads((runs["root"] / "out" / "tiny_cnn_report.json").read_text())
    assert report["samples"] == 5                                    # RampDataset's count, from count.txt
    assert report["metrics"]["float"] == {"CountingMetric": 5.006}   # 5 samples, labels 0+1+2+3+0
    assert report["outputs"]["prob"] == {"shape": [4], "min": 0.125, "max": 0.125, "mean": 0.125}  # user Softmax
    assert "RampDataset: 5 samples" in result.stderr                 # the plugin's OPT_INFO


def test_cfg_run_reports_broken_plugins_and_goes_on(runs):
    stderr = runs["run"].result().stderr
    user_dir = runs["user_dir"]
    assert (f"plugin file '{user_dir / 'broken_import.py'}' failed to import and is skipped: "
            f"RuntimeError: plugin refuses to load (line 3)") in stderr
    assert f"plugin file '{user_dir / 'broken_syntax.py'}' failed to import and is skipped: SyntaxError: " in stderr


# ---- the version rule, on a registry of its own ---------------------------------------
def test_highest_version_wins_then_the_last_loaded():
    registry = Registry("test")
    registry.add("Op", "1.0", "builtin", "builtin.py")
    registry.add("Op", "1.10", "user", "user.py")
    registry.add("Op", "1.9", "older", "older.py")
    assert registry.get("Op") == "user"  # 1.10 > 1.9: versions compare as numbers
    registry.add("Op", "1.10", "later", "later.py")
    assert registry.get("Op") == "later"
    registry.remove_source("later.py")
    assert registry.get("Op") == "user"


def test_bad_version_and_unknown_op_type_name_the_file():
    with pytest.raises(PluginError, match=r"mine\.py: version '1\.x' is not of the form"):
        Registry("test").add("Op", "1.x", None, "mine.py")
    with pytest.raises(PluginError, match=r"test_user_plugins\.py: unknown op type 'NoSuchOp'; add it with "
                                          r"register_optype\('NoSuchOp'\)"):
        op_register("NoSuchOp", "1.0")(lambda self: None)
