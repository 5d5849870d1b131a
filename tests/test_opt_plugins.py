"""Issue 11: the Compass Optimizer's own plugin files, ported with the documented rule
(`AIPUBuilder.Optimizer` -> `npuopt` in import lines, nothing else), load and register
as npuopt plugins; and the helper API they use (npuopt.utils, npuopt.framework, node
attrs) means what it means there, on npuopt's arithmetic.

Loading plugins replaces built-ins for the whole process, so every load runs in a
subprocess; the helper checks run here."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from npuopt.dtype import Dtype
from npuopt.node import PyNode
from npuopt.quant import qmath
from npuopt.quant.settings import QuantSettings
from npuopt.registry import Registry
from npuopt.tensor import PyTensor
from npuopt.utils import (QuantMode, align_shape_by_padding, bits2dtype, bits2range, dtype2bits, dtype2nptype,
                          dtype2range, get_linear_quant_params_from_tensor, get_scale_approximation_params,
                          is_signed, linear_dequantize, linear_quantize_clip, linear_requantize, lookup_lut_powerof2,
                          range2dtype)

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
from port_opt_plugins import port_text  # noqa: E402

MEASURE = textwrap.dedent('''
    import json, os, sys
    from npuopt import plugins
    from npuopt.registry import OP_FORWARDS, OP_QUANTIZERS, PLUGINS
    plugins.load_plugins()
    registered = {os.path.realpath(r.source) for reg in [OP_FORWARDS, OP_QUANTIZERS, *PLUGINS.values()]
                  for r in reg.all()}
    failed = {os.path.realpath(f.path): f.error for f in plugins.failures}
    print(json.dumps({"registered": sorted(registered), "failed": failed}))
''')


def measure(folders, cwd):
    """{file name: 'registered' | 'loaded' | error} for every plugin file of `folders`."""
    env = {**__import__("os").environ, "AIPUPLUGIN_PATH": ":".join(str(f) for f in folders),
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", MEASURE], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(run.stdout.strip().splitlines()[-1])
    out = {}
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            real = str(path.resolve())
            out[path.name] = ("registered" if real in data["registered"] else
                              data["failed"].get(real, "loaded"))
    return out


def _report(title, results, names):
    ok = [n for n in names if results[n] == "registered"]
    failed = {n: results[n] for n in names if results[n] not in ("registered", "loaded")}
    print(f"\n{title}: {len(ok)} of {len(names)} import and register; "
          f"{len(names) - len(ok) - len(failed)} import without registering; {len(failed)} fail")
    for name, error in failed.items():
        print(f"  {name}: {error}")
    return ok, failed


@pytest.mark.shared
def test_opt_dataset_and_metric_plugins_load_and_register(ported, tmp_path):
    results = measure([ported / "plugins"], tmp_path)
    names = [n for n in results if n.startswith(("aipubt_dataset_", "aipubt_metric_"))]
    ok, failed = _report("OPT dataset/metric plugins", results, names)
    assert len(names) == 74
    # measured: 72; bevformer needs mmdet3d (not installed), mobiledetSSDmAP imports OPT's
    # ops/decodebox, which only OPT's op files provide (see the next test)
    assert len(ok) >= 72, failed
    assert set(failed) <= {"aipubt_metric_bevformer.py", "aipubt_metric_mobiledetSSDmAP.py"}


@pytest.mark.shared
def test_opt_op_files_load_and_register(ported, tmp_path):
    results = measure([ported / "ops"], tmp_path)
    names = list(results)
    ok, failed = _report("OPT op files", results, names)
    loaded = [n for n in names if n not in failed]
    print(f"OPT op files: {len(loaded)} of {len(names)} import")
    assert len(names) == 195
    assert not failed
    # measured: 191; convwinograd, relu_family, rnn and select hold helpers only
    assert len(ok) >= 191


@pytest.mark.shared
def test_plugins_beside_opt_op_files(ported, tmp_path):
    """With OPT's op files on the plugin path too, plugins importing them load."""
    results = measure([ported / "plugins", ported / "ops"], tmp_path)
    names = [n for n in results if n.startswith(("aipubt_dataset_", "aipubt_metric_"))]
    ok, failed = _report("OPT dataset/metric plugins beside OPT's op files", results, names)
    assert len(ok) >= 73 and set(failed) <= {"aipubt_metric_bevformer.py"}, failed


# ---- the port rule ---------------------------------------------------------------------
def test_port_rule_changes_import_lines_only():
    text = ("from AIPUBuilder.Optimizer.framework import *\n"
            "    import AIPUBuilder.Optimizer.ops.activation as act\n"
            "x = 'AIPUBuilder.Optimizer.ops.tf_ops'  # not an import line\n")
    assert port_text(text) == ("from npuopt.framework import *\n"
                               "    import npuopt.ops.activation as act\n"
                               "x = 'AIPUBuilder.Optimizer.ops.tf_ops'  # not an import line\n")


# ---- plugin discovery ------------------------------------------------------------------
def test_sibling_imports_case_insensitive_names_and_user_over_builtin(tmp_path):
    (tmp_path / "aipubt_base_metric.py").write_text(textwrap.dedent('''
        from npuopt.framework import *
        class BaseCounting(OptBaseMetric):
            def __init__(self, *args):
                self.n = 0
    '''))
    (tmp_path / "aipubt_metric_user.py").write_text(textwrap.dedent('''
        from npuopt.framework import *
        from npuopt.plugins.aipubt_base_metric import BaseCounting
        import aipubt_base_metric
        assert aipubt_base_metric.BaseCounting is BaseCounting  # one module, whatever the name
        @register_plugin(PluginType.Metric, 0.01)
        class RMSEMetric(BaseCounting):
            pass
    '''))
    script = textwrap.dedent('''
        from npuopt import plugins
        from npuopt.registry import PLUGINS, PluginType
        plugins.load_plugins()
        assert not plugins.failures, plugins.failures
        cls = PLUGINS[PluginType.Metric].get("rmsemetric")
        print(cls.__module__, cls.__mro__[1].__name__)
    ''')
    env = {**__import__("os").environ, "AIPUPLUGIN_PATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "aipubt_metric_user" in run.stdout and "BaseCounting" in run.stdout
    # the user's RMSEMetric (version 0.01) wins over the built-in one (1.0), saying so in one line
    info = [line for line in run.stderr.splitlines() if "RMSEMetric" in line]
    assert len(info) == 1 and "aipubt_metric_user.py" in info[0] and "aipubt_opt_metric_rmse.py" in info[0]


def test_registry_prefers_user_then_version_and_ignores_case():
    reg = Registry("metric", case_insensitive=True)
    builtin = str(REPO / "plugins" / "aipubt_opt_metric_rmse.py")
    reg.add("RMSEMetric", "1.0", "builtin", builtin)
    reg.add("RMSEMetric", 0.01, "user", "/elsewhere/user.py")
    assert reg.get("rmsemetric") == "user" and reg.get("RMSEMETRIC") == "user"
    reg.add("rmsemetric", "0.02", "newer user", "/elsewhere/user2.py")
    assert reg.get("RMSEMetric") == "newer user"
    reg.remove_source("/elsewhere/user2.py")
    reg.remove_source("/elsewhere/user.py")
    assert reg.get("RmseMetric") == "builtin"


# ---- the helper API --------------------------------------------------------------------
def test_dtype_helpers():
    assert bits2dtype(4, True) is Dtype.INT4 and bits2dtype(6, False) is Dtype.UINT8
    assert bits2dtype(12, True) is Dtype.INT12 and bits2dtype(16, True, use_float=True, mantissa_bits=10) is Dtype.FP16
    assert dtype2bits(Dtype.INT12) == 12 and is_signed(Dtype.FP32) and not is_signed(Dtype.UINT8)
    assert dtype2range(Dtype.INT8) == (-128, 127) and bits2range(10, False) == (0, 1023)
    assert dtype2nptype(Dtype.INT12) is np.int16 and dtype2nptype(Dtype.BFP16) is np.float32
    assert range2dtype(0, 300) == (16, Dtype.UINT16) and range2dtype(0, 3, force_int=True) == (8, Dtype.INT8)


def test_quant_mode():
    m = "per_tensor_symmetric_restricted_range"
    assert QuantMode.is_valid(m) and QuantMode.is_per_tensor(m) and not QuantMode.is_full_range(m)
    assert QuantMode.to_per_channel(m) == "per_channel_symmetric_restricted_range"
    assert QuantMode.to_asymmetric(m) == "per_tensor_asymmetric"
    assert not QuantMode.is_valid("per_tensor_whatever")


def test_quantize_requantize_are_npuopt_arithmetic():
    x = torch.tensor([-3.7, -0.5, 0.5, 1.5, 2.5, 100.0, float("nan")])
    assert torch.equal(linear_quantize_clip(x, 2.0, 1, -128, 127), qmath.quantize(x, 2.0, 1, -128, 127))
    q = torch.tensor([[-300, 7], [45, 32000]], dtype=torch.int32)
    m, s = torch.tensor([3000., 17000.]), torch.tensor([12., 15.])
    y = linear_requantize(q, m, s, 0, -128, 127, key_axis=1)
    ref = qmath.requantize(q, m.reshape(1, -1), s.long().reshape(1, -1), 0, -128, 127)
    assert y.dtype == torch.int32 and torch.equal(y.double(), ref)
    assert torch.allclose(linear_dequantize(torch.tensor([3, -4]), 2.0, 1), torch.tensor([2.0, -1.5]))


def test_scale_approximation_returns_as_opt():
    mult, mtype, shift, stype = get_scale_approximation_params(0.37, 15)
    assert (int(mult), int(shift)) == qmath.scale_approximation(0.37, 15)
    assert isinstance(mult, float) and mtype is Dtype.UINT16 and stype is Dtype.INT8
    mult, mtype, shift, stype = get_scale_approximation_params(0.37, 8, force_shift_positive=True)
    assert mtype is Dtype.UINT8


def test_linear_quant_params_from_a_tensor():
    t = PyTensor("t", torch.tensor([-1.0, 0.0, 3.0]))
    scale, zp, qmin, qmax, dtype = get_linear_quant_params_from_tensor(t, "per_tensor_asymmetric", 8, False)
    ref = qmath.linear_quant_params(-1.0, 3.0, 8, False, True, False)
    assert (float(scale), int(zp), qmin, qmax) == ref and dtype is Dtype.UINT8
    w = PyTensor("w", torch.tensor([[1.0, -2.0], [0.5, 0.25]]))
    w.key_axis = 0
    scale, zp, *_ = get_linear_quant_params_from_tensor(w, "per_channel_symmetric_restricted_range", 8, True)
    assert torch.allclose(scale, torch.tensor([254 / 4.0, 254 / 1.0]))  # (qmax - qmin) / (2 max|w|) per row


def test_align_shape_by_padding_pads_both_to_a_common_shape():
    a, b = align_shape_by_padding(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.ones(2, 3))
    assert torch.equal(a, torch.ones(2, 4) * torch.tensor([1.0, 1.0, 1.0, 0.0]))  # the one of more axes first
    assert torch.equal(b, torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]]))


def test_lookup_lut_powerof2_interpolates_with_floor():
    lut = torch.arange(0, 512, 2)  # 256 entries
    idx = torch.tensor([-32768, -32767, 0, 32767], dtype=torch.int32)
    out = lookup_lut_powerof2(idx, lut, 16, True, 16, True)
    expect = qmath.lut_lookup(idx.long() + 32768, lut, 16, 16, True)
    assert torch.equal(out, expect)


# ---- nodes and tensors as a plugin reads them ----------------------------------------
def test_node_attrs_and_get_param():
    node = PyNode("conv", "Convolution", layer_id=7)
    node.params["group"] = 1
    node.attrs["qsettings"] = QuantSettings(activation_bits=16, weight_bits=4,
                                            quantize_method_for_activation="per_tensor_asymmetric")
    node.inputs = [PyTensor("x", torch.zeros(3, 4))]
    assert node.attrs["layer_id"] == "7" and node.attrs["q_bits_activation"] == 16
    # 16-bit activations are symmetric, as the tool chain's check_quantization_info makes them
    assert node.attrs["q_bits_weight"] == 4 and node.attrs["q_mode_activation"] == "per_tensor_symmetric_restricted_range"
    assert "lut_items_in_bits" in node.attrs and node.attrs["current_batch_size"] == 3
    assert node.get_attrs("nothing", optional=True, default_value=5) == 5
    assert node.get_param("group") == 1 and node.get_param("pad", optional=True, default_value=0) == 0
    node.attrs["q_bits_activation"] = 8
    assert node.attrs["q_bits_activation"] == 8 and not node.force_shift_positive
    old = node.replace_input_temporarily(0, PyTensor("y"))
    assert old.name == "x" and node.inputs[0].name == "y"


def test_standalone_decodebox_and_nms_as_opt_plugins_build_them():
    """OPT users' SSD post-processing plugins build layers outside a graph with
    PyNode.add_input/add_output and call the forwards OPT's op modules export."""
    from npuopt.framework import TensorShape
    from npuopt.ops.decodebox import decodebox_ssd
    from npuopt.ops.nms import Nms

    def layer(optype, params, ins, outs, constants=()):
        node = PyNode(optype, optype)
        for i, shape in enumerate(ins):
            node.add_input(PyTensor(f"in{i}", TensorShape(shape)))
        node.add_output(PyTensor("last", TensorShape(outs[-1])))
        for i, shape in enumerate(outs[:-1]):
            node.add_output(PyTensor(f"out{i}", TensorShape(shape)), i)  # inserted before the last
        node.params.update(params)
        for key, value in constants:
            node.constants[key] = PyTensor(key, value)
        return node

    n, rooms = 8, 10
    centres = torch.linspace(0.2, 0.8, n)
    db = layer("DecodeBox", {"class_num": 2, "score_threshold": 0.5, "image_width": 64, "image_height": 64},
               [[1, n, 3], [1, n, 4]], [[1, rooms, 4], [1, rooms], [1, 1], [1, rooms], [1, rooms]],
               [("ycenter", centres), ("xcenter", centres), ("ha", torch.full((n,), 0.2)), ("wa", torch.full((n,), 0.2))])
    assert [t.name for t in db.outputs] == ["out0", "out1", "out2", "out3", "last"]
    db.inputs[0].betensor = torch.tensor([[[0.1, 0.9, 0.2]] * 3 + [[0.9, 0.1, 0.6]] * (n - 3)])
    db.inputs[1].betensor = torch.zeros(1, n, 4)
    boxes, box_counts, classes, class_ids, scores = decodebox_ssd(db)
    assert classes.flatten().tolist() == [2]                 # columns 1 and 2 are the classes, 0 the background
    assert box_counts[0, :2].tolist() == [3, n - 3]
    nms = layer("NMS", {"iou_threshold": 0.5, "max_output_size": 4, "method": "HARD",
                        "image_width": 64, "image_height": 64, "center_point_box": 0},
                [[1, rooms, 4], [1, rooms], [1, 1], [1, rooms]], [[1, 4, 4], [1, rooms], [1, 4], [1, 4]])
    for tensor, value in zip(nms.inputs, (boxes, box_counts, classes, scores)):
        tensor.betensor = value
    kept_boxes = Nms(nms)[0]
    assert kept_boxes.shape == (1, 4, 4)


def test_pytensor_from_ndarray_holds_a_torch_tensor():
    t = PyTensor("t", np.arange(6, dtype=np.int16).reshape(2, 3))
    assert isinstance(t.betensor, torch.Tensor) and t.dtype is Dtype.INT16 and t.ir_shape == (2, 3)
    assert (t.min, t.max) == (0.0, 5.0)
    t.max = 9.0
    assert t.max == 9.0
