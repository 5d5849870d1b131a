"""Pre-quantized sources: ConvInteger, MatMulInteger and FakeQuantWithMinMaxVars (float
forwards against references written from their definitions, the one-line errors of bad
params in process, through `npuopt` and `npuopt-run`), and the IRs the parser writes of
pre-quantized models (compat_quantized_model=true): quantized with the source's scales,
zero points and integers kept where the tool chain keeps them, without calibration too."""
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import npuopt.ops  # noqa: F401
from npuopt.dtype import Dtype
from npuopt.errors import IRError
from npuopt.ir import read_graph
from npuopt.ir.builder import GraphBuilder

from conftest import REPO, assert_one_line_error, edit_ir, run_in_process, start_npuopt
from test_ops_poolmorph import broken_op_test
from test_refrun import run_cli

OP_TESTS = REPO / "op_tests"


def run(optype, inputs, params, constants=None, types=None):
    b = GraphBuilder("t")
    types = types or [Dtype.FP32] * len(inputs)
    names = [b.input(f"in{i}", list(x.shape), x, dtype=t) for i, (x, t) in enumerate(zip(inputs, types))]
    return b.build(b.layer(optype, "op", names, params, constants)).forward(list(inputs))[0]


def window(k, stride=1, dilation=1, pads=(0, 0, 0, 0), group=1):
    return dict(kernel_y=k[0], kernel_x=k[1], stride_y=stride, stride_x=stride, dilation_y=dilation,
                dilation_x=dilation, pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3],
                group=group)


def u8(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8))


# ---- float forwards ----------------------------------------------------------------------
@pytest.mark.parametrize("k, stride, dilation, pads, group", [((3, 3), 1, 1, (1, 1, 1, 1), 1),
                                                              ((2, 3), 2, 2, (0, 1, 2, 0), 2),
                                                              ((1, 1), 1, 1, (0, 0, 0, 0), 4)])
def test_convinteger_is_the_integer_convolution_of_shifted_values(k, stride, dilation, pads, group):
    """sum (x - x_zp) * (w - w_zp) + biases, the pads a shifted zero (x_zp), exactly."""
    x, w = u8(2, 6, 7, 4, seed=1), u8(4, k[0], k[1], 4 // group, seed=2)
    b = torch.tensor([5, -7, 100000, 0], dtype=torch.int32)
    got = run("ConvInteger", [x], dict(window(k, stride, dilation, pads, group), x_zero_point=23, w_zero_point=130),
              {"weights": w, "biases": b}, [Dtype.UINT8])
    xs = F.pad((x.double() - 23).permute(0, 3, 1, 2), (pads[2], pads[3], pads[0], pads[1]))
    want = F.conv2d(xs, (w.double() - 130).permute(0, 3, 1, 2), b.double(), stride, 0, dilation, group)
    assert got.dtype == torch.int32 and torch.equal(got, want.permute(0, 2, 3, 1).to(torch.int32))


def test_matmulinteger_is_the_product_of_shifted_integers():
    a = torch.from_numpy(np.random.default_rng(3).integers(-128, 128, (2, 3, 5)).astype(np.int8))
    b = u8(2, 5, 4, seed=4)
    got = run("MatMulInteger", [a, b], dict(a_zero_point=-128, b_zero_point=255), types=[Dtype.INT8, Dtype.UINT8])
    assert got.dtype == torch.int32 and torch.equal(got, ((a.long() + 128) @ (b.long() - 255)).int())


def test_fake_quant_moves_its_range_to_hold_zero_and_clamps_to_it():
    """A range across zero: the grid steps of s = (max - min) / 255 from the nudged min;
    above zero: [0, max - min]; below zero: [min - max, 0] (the tool chain's ranges)."""
    x = (torch.linspace(-3, 3, 601) + 1 / 512).reshape(1, -1)  # off the ties of the grids
    across = run("FakeQuantWithMinMaxVars", [x], dict(min=-1.0, max=2.0, num_bits=8, narrow_range=False))
    step = 3.0 / 255
    assert torch.allclose(across, (torch.round(x.clamp(-1, 2) / step) * step).clamp(-1, 2), atol=1e-6)
    above = run("FakeQuantWithMinMaxVars", [x], dict(min=0.5, max=1.5, num_bits=8, narrow_range=False))
    assert float(above.min()) == 0.0 and abs(float(above.max()) - 1.0) < 1e-6
    below = run("FakeQuantWithMinMaxVars", [x], dict(min=-1.5, max=-0.5, num_bits=4, narrow_range=True))
    assert float(below.max()) == 0.0 and float(below.min()) >= -1.0 - 1e-6


# ---- bad params --------------------------------------------------------------------------
X8, W8 = u8(1, 5, 6, 4), u8(3, 3, 3, 4)
A8 = torch.zeros(1, 3, 5, dtype=torch.int8)
CI = dict(window((3, 3), pads=(1, 1, 1, 1)), x_zero_point=23, w_zero_point=130)
FQ = dict(min=-1.0, max=1.0, num_bits=8, narrow_range=False)
ERRORS = [
    ("ConvInteger", [X8], {k: v for k, v in CI.items() if k != "x_zero_point"}, {"weights": W8}, [Dtype.UINT8],
     "missing parameter 'x_zero_point'"),
    ("ConvInteger", [X8], dict(CI, w_zero_point=1.5), {"weights": W8}, [Dtype.UINT8], "w_zero_point must be an integer"),
    ("ConvInteger", [X8], dict(CI, x_zero_point=300), {"weights": W8}, [Dtype.UINT8],
     "x_zero_point=300 lies outside its operand's uint8 range [0, 255]"),
    ("ConvInteger", [X8], CI, {"weights": W8.float()}, [Dtype.UINT8], "weights must be integers (uint8 or int8)"),
    ("ConvInteger", [X8.float()], CI, {"weights": W8}, None, "input 'in0' is float32; it takes integers"),
    ("ConvInteger", [X8], dict(CI, kernel_x=2), {"weights": W8}, [Dtype.UINT8], "do not fit kernel [3, 2]"),
    ("MatMulInteger", [A8, torch.zeros(1, 4, 2, dtype=torch.int8)], dict(a_zero_point=0, b_zero_point=0), None,
     [Dtype.INT8, Dtype.INT8], "inputs [1, 3, 5] and [1, 4, 2] do not fit a matrix product"),
    ("MatMulInteger", [A8], dict(a_zero_point=0, b_zero_point=0), None, [Dtype.INT8],
     "takes 2 inputs and 1 output, the IR gives 1 and 1"),
    ("MatMulInteger", [A8, torch.zeros(1, 5, 2, dtype=torch.int8)], dict(a_zero_point=-129, b_zero_point=0), None,
     [Dtype.INT8, Dtype.INT8], "a_zero_point=-129 lies outside its operand's int8 range"),
    ("FakeQuantWithMinMaxVars", [torch.zeros(1, 4)], dict(FQ, min=2.0), None, None, "min 2.0 exceeds max 1.0"),
    ("FakeQuantWithMinMaxVars", [torch.zeros(1, 4)], dict(FQ, num_bits=17), None, None,
     "num_bits must lie in [2, 16], got 17"),
    ("FakeQuantWithMinMaxVars", [torch.zeros(1, 4)], dict(FQ, narrow_range="maybe"), None, None,
     "narrow_range must be true or false"),
    ("FakeQuantWithMinMaxVars", [torch.zeros(1, 4)], dict(FQ, max="high"), None, None, "max must be a number"),
]


@pytest.mark.parametrize("optype, inputs, params, constants, types, message", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_bad_params_are_one_line_errors(optype, inputs, params, constants, types, message):
    with pytest.raises(IRError) as e:
        run(optype, inputs, params, constants, types)
    assert str(e.value).startswith(f"layer 'op' ({optype}): ") and message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


CLI_ERRORS = [
    ("convinteger", "padded", "w_zero_point", "256", "layer 'padded' (ConvInteger): w_zero_point=256 lies outside"),
    ("parser_matmulinteger", "two_inputs", "b_zero_point", "[1,2]", "layer 'two_inputs' (MatMulInteger): b_zero_point"),
    ("parser_tf_fake_quant", "FakeQuantWithMinMaxVars_1", "num_bits", "1",
     "layer 'FakeQuantWithMinMaxVars_1' (FakeQuantWithMinMaxVars): num_bits must lie in [2, 16]"),
    ("parser_qdq", "/c1/Conv", "layer_top_scale", "[0.0]", "layer '/c1/Conv' (Convolution): layer_top_scale 0.0"),
]


@pytest.mark.parametrize("case, layer, key, value, words", CLI_ERRORS, ids=[c[0] for c in CLI_ERRORS])
def test_bad_params_through_npuopt(case, layer, key, value, words, tmp_path):
    """`npuopt --cfg` (in process) on a broken copy of the op test: exit 1, its last line the
    one error line, no traceback, nothing written."""
    folder = broken_op_test(tmp_path, case, layer, key, value)
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={folder / 'work'}")
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert result.exit_code == 1 and last.startswith("npuopt: error: ") and words in last, result.stderr
    assert result.stderr.count("npuopt: error:") == 1 and "Traceback" not in result.output
    assert not (folder / "work").exists()


def test_bad_param_as_a_user_runs_npuopt(tmp_path):
    case, layer, key, value, words = CLI_ERRORS[0]
    folder = broken_op_test(tmp_path, case, layer, key, value)
    assert_one_line_error(start_npuopt("--cfg", "opt.cfg", cwd=folder).result(), words, only_line=False)
    assert not (folder / "work").exists()


def test_npuopt_run_bad_params_are_one_line(tmp_path, capsys):
    """npuopt-run on quantized IRs whose params were broken after quantizing."""
    for case, layer, key, value, words in [("convinteger", "strided", "stride_x", "0", "'stride_x' must be"),
                                           ("matmulinteger", "two_inputs", "a_zero_point", "0.5", "a_zero_point"),
                                           ("fakequant", "across_zero", "layer_top_zp", "[3]", "differ from input")]:
        result = run_in_process("--cfg", OP_TESTS / case / "opt.cfg", "--set", f"output_dir={tmp_path / case}")
        assert result.exit_code == 0, result.output
        txt = tmp_path / case / f"{case}_o.txt"
        edit_ir(txt, layer, key, value)
        capsys.readouterr()
        inputs = sorted((OP_TESTS / case).glob("in*.npy"))
        argv = [str(txt), *[a for x in inputs for a in ("--input", str(x))], "-o", str(tmp_path / "o.npz")]
        assert run_cli(argv) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("npuopt-run: error: ") and words in lines[0], lines
        assert f"layer '{layer}'" in lines[0]


# ---- pre-quantized models: the source's grids kept ---------------------------------------
def blocks(txt):
    """{layer name: {key: raw value}} of an IR's text."""
    out = {}
    for block in txt.read_text().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.strip().splitlines() if "=" in line)
        if "layer_name" in fields:
            out[fields["layer_name"]] = fields
    return out


def numbers(text):
    return [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", text)]


def constant(folder, fields, key):
    """A constant of a layer's block read from the IR's .bin, as stated (type, offset, shape)."""
    raw = (folder / next(folder.glob("*.bin")).name).read_bytes()
    offset, size = int(fields[f"{key}_offset"]), int(fields[f"{key}_size"])
    return np.frombuffer(raw[offset:offset + size], np.dtype(fields[f"{key}_type"]))


@pytest.mark.parametrize("case", ["parser_qdq", "parser_qdq_per_channel", "parser_qoperator"])
def test_a_pre_quantized_model_keeps_the_sources_scales_zero_points_and_integers(case, tmp_path):
    """The parser's IR of a quantized ONNX model, quantized with the cfg's settings (8-bit
    symmetric, per tensor): every integer top keeps the source's type, scale and zero
    point (in the IR's convention: 1 / scale and -zero_point), every layer's weights their
    integers and scales, the biases their integers (the input zero point folded in)."""
    folder = OP_TESTS / case
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={tmp_path}",
                            "--set", "calibration_data=")
    assert result.exit_code == 0, result.output
    source, written = blocks(folder / f"{case}.txt"), blocks(tmp_path / f"{case}_o.txt")
    checked = 0
    for name, src in source.items():
        out = written[name]
        assert out["layer_top_type"] == src["layer_top_type"], name
        if "layer_top_scale" in src:
            want = np.float32(1) / np.float32(numbers(src["layer_top_scale"]))
            assert np.allclose(numbers(out["layer_top_scale"]), want, rtol=1e-6), name
            assert [-v for v in numbers(src["layer_top_zp"])] == numbers(out["layer_top_zp"]), name
            checked += 1
        if "weights_offset" in src and src["weights_type"] in ("int8", "uint8"):
            assert out["weights_type"] == src["weights_type"]
            assert np.array_equal(constant(folder, src, "weights"), constant(tmp_path, out, "weights")), name
            src_scale = numbers(src["weights_scale"]) if "weights_scale" in src else constant(folder, src,
                                                                                              "weights_scale")
            out_scale = numbers(out["weights_scale"]) if "weights_scale" in out else constant(tmp_path, out,
                                                                                              "weights_scale")
            assert np.allclose(out_scale, np.float32(1) / np.float32(src_scale), rtol=1e-6), name
    assert checked >= 8


def test_a_pre_quantized_model_needs_no_calibration(tmp_path):
    """Without calibration_data the source's grids quantize the model: the same IR."""
    folder = OP_TESTS / "parser_qdq_per_channel"
    for out, extra in ((tmp_path / "with", []), (tmp_path / "without", ["--set", "calibration_data="])):
        result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={out}", *extra)
        assert result.exit_code == 0, result.output
    for suffix in ("_o.txt", "_o.bin"):
        assert (tmp_path / "with" / f"parser_qdq_per_channel{suffix}").read_bytes() == \
            (tmp_path / "without" / f"parser_qdq_per_channel{suffix}").read_bytes()


def test_the_float_model_of_a_pre_quantized_ir():
    """Read as its float model: integer tops become float32 with the source's grid, integer
    weights their real values, the layers the source computes in float are marked so; a
    tensor an integer layer reads keeps its integers (its Quantize quantizes in float too)."""
    graph = read_graph(str(OP_TESTS / "parser_qdq" / "parser_qdq.txt"))
    conv = graph.node("/c1/Conv")
    assert conv.outputs[0].dtype == Dtype.FP32 and conv.outputs[0].source_grid.dtype == Dtype.UINT8
    assert conv.constants["weights"].dtype == Dtype.FP32 and "weights_scale" not in conv.params
    assert [n.name for n in graph.nodes if n.attrs.get("source_float")] == ["in0", "out_DequantizeLinear"]
    graph = read_graph(str(OP_TESTS / "parser_quantize_matmulinteger" / "parser_quantize_matmulinteger.txt"))
    x = torch.linspace(-2.0, 2.0, 24).reshape(1, 4, 6)
    graph.forward([x], keep_tensors=True)
    xq = graph.node("xq").outputs[0]
    assert xq.dtype == Dtype.UINT8 and torch.equal(xq.betensor.float(), torch.clamp(torch.round(x / 0.02) + 100, 0, 255))


@pytest.mark.parametrize("case", ["parser_qdq", "parser_qdq_per_channel", "parser_qdq_int8", "parser_qoperator",
                                  "parser_quantize_matmulinteger"])
def test_a_pre_quantized_model_computes_what_its_source_does(case, tmp_path):
    """npuopt's quantized IR of the parser's IR of a quantized ONNX model, on the op test's
    inputs, against the source model as onnxruntime runs it (source_outputs.npz): within one
    step of the output's grid (the rescales round in integers, onnxruntime's in float), float
    outputs (after the integer product) to float32 rounding."""
    folder = OP_TESTS / case
    result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={tmp_path}",
                            "--set", "calibration_data=")
    assert result.exit_code == 0, result.output
    graph = read_graph(str(tmp_path / f"{case}_o.txt"))
    inputs = [torch.from_numpy(np.load(p)) for p in sorted(folder.glob("in*.npy"))]
    ours = graph.forward(inputs)
    with np.load(folder / "source_outputs.npz") as data:
        theirs = [data[f"arr_{i}"] for i in range(len(data.files))]
    for t, mine, want in zip(graph.output_tensors, ours, theirs):
        producer = next(n for n in graph.nodes if t in n.outputs)
        step = 1 / producer.inputs[0].scale if producer.type == "DeQuantize" else 0.0
        allowed = step * (1 + 1e-5) + 1e-6 * max(1.0, float(np.abs(want).max()))
        assert np.abs(mine.numpy() - want).max() <= allowed, (t.name, np.abs(mine.numpy() - want).max(), step)


def test_tensors_that_lose_the_sources_grid_are_named(tmp_path, caplog):
    """A layer of the source the cfg keeps in float holds no grid: one line names its tensors
    (the MAX pooling after one keeps the source's grid: its boundary Quantize takes it)."""
    folder = OP_TESTS / "parser_qdq"
    with caplog.at_level("INFO", logger="npuopt"):
        result = run_in_process("--cfg", folder / "opt.cfg", "--set", f"output_dir={tmp_path}",
                                "--set", "trigger_float_op=disable & <[Convolution]:float16_preferred>")
    assert result.exit_code == 0, result.output
    assert "compat_quantized_model: 2 tensor(s) do not keep the source's grid" in caplog.text, caplog.text
    assert "/c1/Conv_0, /c2/Conv_0" in caplog.text


def compat_convinteger_ir(folder):
    """A pre-quantized model's IR holding a ConvInteger, as the parser would write one (it
    writes none from ONNX): float input -> Quantize (uint8, scale 0.05, zero point 23) ->
    ConvInteger (x_zero_point 23, uint8 weights with w_zero_point 130, zero biases, padded)."""
    rng = np.random.default_rng(7)
    w = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
    (folder / "ci.bin").write_bytes(w.tobytes() + np.zeros(4, np.int32).tobytes())
    quantize = ["layer_top_type=[uint8]", "layer_top_scale=[0.05]", "layer_top_zp=[23]", "round_mode=ROUND_TO_EVEN"]
    conv = ["layer_top_type=[int32]", "weights_type=uint8", "weights_offset=0", f"weights_size={w.size}",
            "weights_shape=[4,3,3,3]", "biases_type=int32", f"biases_offset={w.size}", "biases_size=16",
            "biases_shape=[4]", "num_output=4", "kernel_x=3", "kernel_y=3", "stride_x=1", "stride_y=1",
            "pad_left=1", "pad_right=1", "pad_top=1", "pad_bottom=1", "dilation_x=1", "dilation_y=1", "group=1",
            "x_zero_point=23", "w_zero_point=130"]
    layers = [("in0", "Input", "", "[float32]"), ("xq", "Quantize", "in0", None), ("ci", "ConvInteger", "xq", None)]
    text = ["model_name=ci", "layer_number=3", "compat_quantized_model=true", "input_tensors=[in0]",
            "output_tensors=[ci]", ""]
    for i, (name, kind, bottom, top_type) in enumerate(layers):
        text += [f"layer_id={i}", f"layer_name={name}", f"layer_type={kind}", f"layer_bottom=[{bottom}]",
                 f"layer_bottom_shape=[{'[1,5,6,3]' if bottom else ''}]", f"layer_top=[{name}]",
                 "layer_top_shape=[[1,5,6,4]]" if kind == "ConvInteger" else "layer_top_shape=[[1,5,6,3]]"]
        text += [f"layer_top_type={top_type}"] if top_type else quantize if kind == "Quantize" else conv
        text.append("")
    (folder / "ci.txt").write_text("\n".join(text))
    return folder / "ci.txt", w


@pytest.mark.shared
def test_a_pre_quantized_convinteger_reads_its_quantize_integers(tmp_path, oracle):
    """ConvInteger behind the source's Quantize: in the float model it convolves the Quantize's
    integers (the source's arithmetic); quantized (no calibration), the tool chain's reader
    and npuopt-run compute npuopt's integers exactly."""
    from opt_oracle import OptJob

    from conftest import npuopt_run_outputs, write_cfg
    txt, w = compat_convinteger_ir(tmp_path)
    x = np.random.default_rng(8).uniform(-1.5, 8, (2, 5, 6, 3)).astype(np.float32)
    float_out = read_graph(str(txt)).forward([torch.from_numpy(x)])[0]
    q = torch.clamp(torch.round(torch.from_numpy(x) / 0.05) + 23, 0, 255)
    want = F.conv2d(F.pad((q - 23).double().permute(0, 3, 1, 2), (1, 1, 1, 1)),
                    (torch.from_numpy(w).double() - 130).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
    assert torch.equal(float_out, want.to(torch.int32))
    result = run_in_process("--cfg", write_cfg(tmp_path / "opt.cfg", graph=txt, output_dir=tmp_path / "out"))
    assert result.exit_code == 0, result.output
    quantized = tmp_path / "out" / "ci_o.txt"
    ours = read_graph(str(quantized)).forward([torch.from_numpy(x)])[0].numpy()
    assert np.array_equal(ours, float_out.numpy())
    assert np.array_equal(npuopt_run_outputs(quantized, x, tmp_path)["ci"], ours)
    np.save(tmp_path / "x.npy", x)
    opt = oracle.forward([OptJob(quantized, quantized.with_suffix(".bin"), [tmp_path / "x.npy"],
                                 tmp_path / "opt.npz")])[0]
    assert not opt.errors and opt.quantized == {"in0": False, "xq": True, "ci": True}, opt.errors
    assert np.array_equal(opt.outputs[0], ours)
