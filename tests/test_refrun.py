"""The reference runner npuopt-run (tools/refrun): its own IR parser against
npuopt's reader, its one-line errors, the op tests (op_tests/), and, marked
slow, whole models against npuopt's quantized forward."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tools.refrun import cli
from tools.refrun.irfile import read_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(REPO, "..", "shared")
EXAMPLES = os.path.join(SHARED, "data", "compass_ir_examples")
needs_shared = pytest.mark.skipif(not os.path.isdir(EXAMPLES),
                                  reason=f"the example IRs ({EXAMPLES}) are not beside this checkout")
SQUEEZENET_BIN_BYTES = 4993696


def example(tmp_path, name):
    """An example IR copied into tmp_path, with a random .bin where none is shipped."""
    txt = os.path.join(EXAMPLES, name + ".txt")
    shutil.copy(txt, tmp_path / (name + ".txt"))
    bin_path = os.path.join(EXAMPLES, name + ".bin")
    if os.path.isfile(bin_path):
        shutil.copy(bin_path, tmp_path / (name + ".bin"))
    elif name == "squeezenet_s":
        rng = np.random.default_rng(0)
        (tmp_path / (name + ".bin")).write_bytes(rng.standard_normal(SQUEEZENET_BIN_BYTES // 4, np.float32).tobytes())
    return str(tmp_path / (name + ".txt"))


def assert_same_as_npuopt(model, graph):
    """Layer by layer: names, types, tensors, shapes, dtypes, params, constants."""
    assert model.name == graph.name
    assert model.inputs == [t.name for t in graph.input_tensors]
    assert model.outputs == [t.name for t in graph.output_tensors]
    nodes = {n.name: n for n in graph.nodes}
    assert sorted(nodes) == sorted(layer.name for layer in model.layers)
    for layer in model.layers:
        node = nodes[layer.name]
        assert layer.type == node.type
        assert layer.bottoms == [t.name for t in node.inputs]
        assert layer.tops == [t.name for t in node.outputs]
        assert layer.top_shapes == [tuple(t.ir_shape) for t in node.outputs]
        assert [d.name for d in layer.top_types] == [t.dtype.value for t in node.outputs]
        assert layer.params == dict(node.params), layer.name
        assert sorted(layer.consts) == sorted(node.constants), layer.name
        for cname, value in layer.consts.items():
            want = node.constants[cname].betensor.float().numpy()
            np.testing.assert_array_equal(value.astype(np.float32), want, err_msg=f"{layer.name}.{cname}")


@needs_shared
@pytest.mark.parametrize("name", ["squeezenet_s", "single_eltwise_1", "tiny_conv_sigmoid"])
def test_parser_agrees_with_npuopt_and_survives_a_round_trip(tmp_path, name):
    from npuopt.ir import read_graph, write_graph

    txt = example(tmp_path, name)
    model = read_model(txt)
    assert_same_as_npuopt(model, read_graph(txt))
    # round trip: npuopt writes what it read, the runner reads the same model back
    again = str(tmp_path / "again.txt")
    write_graph(read_graph(txt), again)
    assert_same_as_npuopt(read_model(again), read_graph(txt))
    back = read_model(again)
    for a, b in zip(model.layers, back.layers):
        assert (a.name, a.type, a.params, a.top_shapes) == (b.name, b.type, b.params, b.top_shapes)


@needs_shared
def test_float_model_runs_like_npuopt(tmp_path):
    """A float IR (no quantized layer) runs in float32 and matches npuopt's float forward."""
    import npuopt.ops  # noqa: F401  (registers the forwards)
    from npuopt.ir import read_graph

    txt = example(tmp_path, "tiny_conv_sigmoid")
    x = np.random.default_rng(1).standard_normal((3, 8, 8, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    run_cli([txt, "--input", str(tmp_path / "x.npy"), "-o", str(out), "--dump", str(tmp_path / "dump")])
    graph = read_graph(txt)
    graph.forward([torch.from_numpy(x)], keep_tensors=True)
    got = np.load(out)
    np.testing.assert_allclose(got["sig"], graph.tensor("sig").betensor.numpy(), atol=1e-6)
    np.testing.assert_array_equal(got["sig.float"], got["sig"])
    np.testing.assert_allclose(np.load(tmp_path / "dump" / "conv.npy"), graph.tensor("conv").betensor.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_value_syntax():
    from tools.refrun.irfile import ValueSyntax, parse_value

    assert parse_value("[[1,2],[3,-4]]") == [[1, 2], [3, -4]]
    assert parse_value("[]") == []
    assert parse_value("1.5e-3") == 1.5e-3
    assert parse_value("true") is True
    assert parse_value("RELU") == "RELU"
    assert parse_value("[a/b:0,c]") == ["a/b:0", "c"]
    for bad in ("[1,2", "[1,,2]", "[1]]", "[1 [2]]", ""):
        with pytest.raises(ValueSyntax):
            parse_value(bad)


def test_runner_imports_nothing_from_npuopt():
    """The second opinion must not share npuopt's code (nor torch's arithmetic)."""
    code = ("import sys, tools.refrun.cli; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('npuopt', 'torch')); "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------------ errors
def run_cli(argv):
    """cli.main in this process; returns its exit status."""
    try:
        cli.main(argv)
    except SystemExit as e:
        return e.code
    return 0


def expect_error(capsys, argv, *words):
    capsys.readouterr()
    assert run_cli(argv) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("npuopt-run: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def tiny(tmp_path):
    """tiny_conv_sigmoid with an input; returns (txt path, edit(old, new), argv)."""
    if not os.path.isdir(EXAMPLES):
        pytest.skip(f"the example IRs ({EXAMPLES}) are not beside this checkout")
    txt = example(tmp_path, "tiny_conv_sigmoid")
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 4), np.float32))

    def edit(old, new):
        with open(txt) as f:
            text = f.read()
        assert old in text
        with open(txt, "w") as f:
            f.write(text.replace(old, new, 1))

    return txt, edit, [txt, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz")]


@pytest.mark.parametrize("old, new, words", [
    ("kernel_x=3\n", "kernel_x 3\n", ["bad line", "tiny_conv_sigmoid.txt:"]),
    ("layer_top=[conv]\n", "", ["layer 'conv'", "missing key 'layer_top'"]),
    ("weights_size=1152", "weights_size=1000", ["layer 'conv'", "weights", "size 1000"]),
    ("weights_offset=32", "weights_offset=64", ["layer 'conv'", "weights", "past the end"]),
    ("weights_shape=[8,3,3,4]\n", "", ["layer 'conv'", "weights", "weights_shape"]),
    ("weights_shape=[8,3,3,4]", "weights_shape=[8,3,3,4", ["layer 'conv'", "cannot parse"]),
    ("layer_top_type=[float32]\nmethod", "layer_top_type=[float31]\nmethod", ["layer 'sig'", "float31"]),
    ("layer_type=Activation", "layer_type=Frobnicate", ["layer 'sig'", "Frobnicate"]),
    ("method=SIGMOID", "method=FROB", ["layer 'sig'", "FROB"]),
    ("layer_bottom=[conv]", "layer_bottom=[nothing]", ["layer 'sig'", "nothing"]),
    ("layer_number=3", "layer_number=4", ["layer_number", "truncated"]),
    ("layer_top_shape=[[1,8,8,8]]\nlayer_top_type=[float32]\nbiases",
     "layer_top_shape=[[1,8,8,7]]\nlayer_top_type=[float32]\nbiases", ["layer 'conv'", "shape"]),
])
def test_malformed_ir_is_one_line_naming_the_layer(capsys, tiny, old, new, words):
    txt, edit, argv = tiny
    edit(old, new)
    expect_error(capsys, argv, *words)


def test_truncated_graph_file(capsys, tiny):
    txt, _, argv = tiny
    with open(txt) as f:
        text = f.read()
    with open(txt, "w") as f:
        f.write(text[: text.index("layer_top_shape=[[1,8,8,8]]\nlayer_top_type=[float32]\nmethod")])
    expect_error(capsys, argv, "layer 'sig'", "missing key")


def test_truncated_weights_file(capsys, tiny):
    txt, _, argv = tiny
    bin_path = txt[:-4] + ".bin"
    with open(bin_path, "rb") as f:
        data = f.read()
    with open(bin_path, "wb") as f:
        f.write(data[:600])
    expect_error(capsys, argv, "layer 'conv'", "past the end")


def test_bad_inputs(capsys, tiny, tmp_path):
    txt, _, argv = tiny
    expect_error(capsys, argv[:1] + ["-o", argv[-1]], "takes 1 input")
    np.save(tmp_path / "bad.npy", np.zeros((1, 8, 8, 3), np.float32))
    expect_error(capsys, [txt, "--input", str(tmp_path / "bad.npy"), "-o", argv[-1]], "input 'x'", "shape")
    expect_error(capsys, [txt, "--input", str(tmp_path / "missing.npy"), "-o", argv[-1]], "not found")
    expect_error(capsys, [str(tmp_path / "none.txt"), "-o", argv[-1]], "not found")


def test_console_script_prints_one_line_and_exits_1(tiny):
    """The installed entry point, in a process of its own (no traceback leaks)."""
    txt, edit, argv = tiny
    edit("layer_type=Activation", "layer_type=Frobnicate")
    exe = shutil.which("npuopt-run", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cmd = [exe] if exe else [sys.executable, "-m", "tools.refrun.cli"]
    proc = subprocess.run(cmd + argv, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("npuopt-run: error: ") and "layer 'sig'" in proc.stderr
    with_verbose = subprocess.run(cmd + argv + ["--verbose"], capture_output=True, text=True, cwd=REPO)
    assert with_verbose.returncode == 1 and "Traceback" in with_verbose.stderr


# ------------------------------------------------- integer semantics, by hand
def test_rounding_primitives_follow_the_page():
    from tools.refrun.intmath import quantize, round_div, rrs
    from tools.refrun.irfile import DTYPES

    # round half up: -2.5 -> -2, 2.5 -> 3; NaN -> 0, +-inf -> qmax/qmin
    f = np.array([-2.5, 2.5, -0.5, 0.5, np.nan, np.inf, -np.inf, 1000.0], np.float32)
    assert quantize(f, 1.0, 0, DTYPES["int8"]).tolist() == [-2, 3, 0, 1, 0, 127, -128, 127]
    assert quantize(np.float32([1.0]), 2.0, -3, DTYPES["uint8"]).tolist() == [5]
    assert rrs(np.array([-5, -6, 5, 6, 7]), 1).tolist() == [-2, -3, 3, 3, 4]
    assert rrs(np.array([3, -3]), 0).tolist() == [3, -3]
    assert rrs(np.array([3, -3]), -2).tolist() == [12, -12]
    assert rrs(np.array([[5, 5]]), np.array([1, 2])).tolist() == [[3, 1]]
    assert round_div(np.array([5, -5, 7, -7]), 2).tolist() == [3, -2, 4, -3]


def write_qir(folder, layers, inputs, outputs, name="q"):
    """A quantized IR written by hand (not by npuopt): `layers` are dicts with name,
    type, bottoms, tops, shapes, types, scales, zps, params and consts {name: (dtype, array)}."""
    blobs, blocks = [], [f"model_name={name}\nlayer_number={len(layers)}\ninput_tensors=[{','.join(inputs)}]\n"
                           f"output_tensors=[{','.join(outputs)}]"]
    offset = 0
    shapes = {}
    for i, layer in enumerate(layers):
        for t, s, ty in zip(layer["tops"], layer["shapes"], layer["types"]):
            shapes[t] = (s, ty)
        fmt = lambda v: str(v).replace(" ", "")
        lines = [f"layer_id={i}", f"layer_name={layer['name']}", f"layer_type={layer['type']}",
                 f"layer_bottom=[{','.join(layer.get('bottoms', []))}]",
                 f"layer_bottom_shape={fmt([shapes[b][0] for b in layer.get('bottoms', [])])}",
                 f"layer_bottom_type=[{','.join(shapes[b][1] for b in layer.get('bottoms', []))}]",
                 f"layer_top=[{','.join(layer['tops'])}]", f"layer_top_shape={fmt(layer['shapes'])}",
                 f"layer_top_type=[{','.join(layer['types'])}]"]
        if "scales" in layer:
            lines += [f"layer_top_scale={fmt(layer['scales'])}", f"layer_top_zp={fmt(layer['zps'])}"]
        for cname, (dtype, value) in layer.get("consts", {}).items():
            storage = {"int4": "<i1", "uint4": "<u1"}[dtype] if dtype.endswith("int4") else np.dtype(dtype).newbyteorder("<")
            data = np.asarray(value).astype(storage).tobytes()
            lines += [f"{cname}_type={dtype}", f"{cname}_offset={offset}", f"{cname}_size={len(data)}",
                      f"{cname}_shape={fmt(list(np.shape(value)))}"]
            blobs.append(data)
            offset += len(data)
        lines += [f"{k}={fmt(v)}" for k, v in layer.get("params", {}).items()]
        blocks.append("\n".join(lines))
    txt = os.path.join(str(folder), name + ".txt")
    with open(txt, "w") as f:
        f.write("\n\n".join(blocks) + "\n")
    with open(txt[:-4] + ".bin", "wb") as f:
        f.write(b"".join(blobs))
    return txt


def int8_input(name, shape, scale=1.0, zp=0, dtype="int8"):
    return dict(name=name, type="Input", tops=[name], shapes=[shape], types=[dtype], scales=[scale], zps=[zp])


def conv_layer(**changes):
    """A 1x1 convolution on x (zp 1): A = [-2, 6], z = 3A + 4 = [-2, 22],
    y = RRS(3z, 2) = [-1, 17], out = y - (-2) = [1, 19]."""
    layer = dict(name="conv", type="Convolution", bottoms=["x"], tops=["conv"], shapes=[[1, 1, 2, 1]],
                 types=["int8"], scales=[1.0], zps=[-2],
                 consts={"weights": ("int8", np.full((1, 1, 1, 1), 3)), "biases": ("int32", np.array([4]))},
                 params=dict(kernel_x=1, kernel_y=1, stride_x=1, stride_y=1, pad_left=0, pad_right=0, pad_top=0,
                             pad_bottom=0, dilation_x=1, dilation_y=1, group=1, num_output=1,
                             with_activation="NONE", scale_value=3, shift_value=2))
    for key, value in changes.items():
        if value is None:  # remove the key, wherever it lives
            for where in (layer, layer["params"], layer["consts"]):
                where.pop(key, None)
        elif key in ("consts", "types", "scales", "zps", "type"):
            layer[key] = value
        else:
            layer["params"][key] = value
    return layer


def run_qir(tmp_path, txt, x, *extra):
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    status = run_cli([txt, "--input", str(tmp_path / "x.npy"), "--integer-input", "-o", str(out), *extra])
    return status, (np.load(out) if status == 0 else None)


X_Q = np.array([-3, 5], np.int8).reshape(1, 1, 2, 1)


def test_hand_computed_convolution(tmp_path):
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), conv_layer()], ["x"], ["conv"])
    status, out = run_qir(tmp_path, txt, X_Q, "--dump", str(tmp_path / "dump"))
    assert status == 0
    assert out["conv"].dtype == np.int8 and out["conv"].ravel().tolist() == [1, 19]
    np.testing.assert_array_equal(out["conv.float"].ravel(), np.float32([-1, 17]))
    assert np.load(tmp_path / "dump" / "x.npy").ravel().tolist() == [-3, 5]


def test_hand_computed_leakyrelu_and_clamp(tmp_path):
    """LEAKYRELU: z = -2 < 0 takes RRS(-2 * 5, 1) = -5, out -3; z = 22 as before, 19;
    then activation_qmax = 10 clamps 19 to 10."""
    layer = conv_layer(with_activation="LEAKYRELU", negative_scale_value=5, negative_shift_value=1,
                       activation_qmin=-100, activation_qmax=10)
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["conv"])
    status, out = run_qir(tmp_path, txt, X_Q)
    assert status == 0 and out["conv"].ravel().tolist() == [-3, 10]


def test_hand_computed_lut_interpolation(tmp_path):
    """64 entries on int8 input: k = 2. q = -125: d = 3, i = 0, r = 3: -60 + RRS((-58 + 60) * 3, 2) = -58;
    q = 127: d = 255, i = 63, j = 63: 80 + RRS((80 - 64) * 3, 2) = 92 continues the last slope."""
    lut = np.arange(64) * 2 - 60
    lut[63] = 80
    layer = dict(name="sig", type="Activation", bottoms=["x"], tops=["sig"], shapes=[[1, 1, 3, 1]],
                 types=["int8"], scales=[1.0], zps=[0], consts={"lut": ("int8", lut)},
                 params=dict(method="SIGMOID"))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 3, 1]), layer], ["x"], ["sig"])
    status, out = run_qir(tmp_path, txt, np.array([-128, -125, 127], np.int8).reshape(1, 1, 3, 1))
    assert status == 0 and out["sig"].ravel().tolist() == [-60, -58, 92]


@pytest.mark.parametrize("layer, words", [
    (conv_layer(with_activation="SIGMOID"), ["layer 'conv'", "SIGMOID"]),
    (conv_layer(with_activation="RELU"), ["layer 'conv'", "activation_qmin"]),
    (conv_layer(scale_value=None), ["layer 'conv'", "scale_value"]),
    (conv_layer(shift_value=1.5), ["layer 'conv'", "shift_value"]),
    (conv_layer(consts={"weights": ("int8", np.ones((1, 1, 1, 1))), "scale": ("uint16", np.ones(3)),
                        "shift": ("int8", np.ones(3))}), ["layer 'conv'", "per-channel"]),
    (conv_layer(consts={"weights": ("int4", np.full((1, 1, 1, 1), 9))}), ["layer 'conv'", "int4"]),
    (conv_layer(consts={"weights": ("int8", np.ones((1, 1, 1, 2)))}), ["layer 'conv'", "group"]),
    (conv_layer(scales=None, zps=None), ["layer 'conv'", "layer_top_scale"]),
    (conv_layer(type="Eltwise", method="POW"), ["layer 'conv'", "Eltwise"]),
    (conv_layer(type="Pooling", method="MEDIAN"), ["layer 'conv'", "MEDIAN"]),
    (conv_layer(type="Softmax"), ["layer 'conv'", "unsigned"]),
    (conv_layer(type="Activation", method="SIGMOID", consts={"lut": ("int8", np.zeros(100))}), ["layer 'conv'", "lut"]),
    (conv_layer(type="Activation", method="ELU"), ["layer 'conv'", "ELU"]),
    (conv_layer(type="Split", splits=[2]), ["layer 'conv'", "does not rescale"]),
    (conv_layer(type="LayerNorm", axis=[3]), ["layer 'conv'", "norm_shift"]),
    (conv_layer(type="LayerNorm", axis=[1], norm_shift=0, variance_bias=0, norm_bits=8), ["layer 'conv'", "last axes"]),
    (conv_layer(type="Resize", method="CUBIC", zps=[1]), ["layer 'conv'", "CUBIC"]),
])
def test_unsupported_or_broken_quantized_layer(capsys, tmp_path, layer, words):
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["conv"])
    np.save(tmp_path / "x.npy", X_Q)
    expect_error(capsys, [txt, "--input", str(tmp_path / "x.npy"), "--integer-input", "-o",
                          str(tmp_path / "o.npz")], *words)


def test_resize_nearest_by_hand(tmp_path):
    """NEAREST half_pixel 2 -> 5: source floor((2d + 1) * 2 / 10) = 0, 0, 1, 1, 1."""
    layer = dict(name="rs", type="Resize", bottoms=["x"], tops=["rs"], shapes=[[1, 1, 5, 1]], types=["int8"],
                 scales=[1.0], zps=[1], params=dict(method="NEAREST", mode="half_pixel"))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["rs"])
    status, out = run_qir(tmp_path, txt, X_Q)
    assert status == 0 and out["rs"].ravel().tolist() == [-3, -3, 5, 5, 5]


def test_float_and_integer_meet_only_at_boundaries(capsys, tmp_path):
    relu = dict(name="relu", type="Activation", bottoms=["x"], tops=["relu"], shapes=[[1, 1, 2, 1]],
                types=["float32"], params=dict(method="RELU"))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1]), relu], ["x"], ["relu"])
    np.save(tmp_path / "x.npy", X_Q)
    expect_error(capsys, [txt, "--input", str(tmp_path / "x.npy"), "--integer-input", "-o",
                          str(tmp_path / "o.npz")], "layer 'relu'", "DeQuantize")
    expect_error(capsys, [txt, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz")],
                 "input 'x'", "--integer-input")


# ------------------------------------------------------------------- op tests
OP_TESTS = os.path.join(REPO, "op_tests")
OP_CASES = sorted(d for d in os.listdir(OP_TESTS) if os.path.isfile(os.path.join(OP_TESTS, d, "run.sh")))


def _compare_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("op_tests_compare", os.path.join(OP_TESTS, "compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", OP_CASES)
def test_op(case):
    """op_tests/CASE/run.sh in this process: quantize, npuopt-run, every tensor equal."""
    passed, line = _compare_module().run_case(os.path.join(OP_TESTS, case))
    assert passed, line


def test_op_tests_are_what_the_generator_writes(tmp_path):
    """The committed folders are reproduced byte for byte by tools/gen_op_tests.py."""
    from tools import gen_op_tests

    gen_op_tests.main([str(tmp_path)])
    assert sorted(os.listdir(tmp_path)) == OP_CASES
    for case in OP_CASES:
        for name in os.listdir(tmp_path / case):
            with open(tmp_path / case / name, "rb") as a, open(os.path.join(OP_TESTS, case, name), "rb") as b:
                assert a.read() == b.read(), f"op_tests/{case}/{name} differs from what the generator writes"


def test_run_sh_prints_one_line_per_test_and_the_total():
    """op_tests/run.sh through the shell and the console scripts, on two cases."""
    env = dict(os.environ, PYTHON=sys.executable,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["sh", os.path.join(OP_TESTS, "run.sh"), "conv", "softmax"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.stdout.splitlines() == ["PASS conv", "PASS softmax", "2 passed, 0 failed"], proc.stdout + proc.stderr
    assert proc.returncode == 0


# --------------------------------------------------------------------- models
MODEL_NAMES = ["resnet18", "mobilenet_v2", "efficientnet_lite0"]


@pytest.mark.slow
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_matches_npuopt_on_16_images(tmp_path_factory, model):
    """Export, quantize (32 calib images), and compare every tensor of npuopt's quantized
    forward with npuopt-run's on 16 val images: integers equal, float layers to rounding."""
    if not os.path.isdir(os.path.join(SHARED, "data", "imagenet_sample")):
        pytest.skip("../shared/data/imagenet_sample is not beside this checkout")
    import importlib.util

    spec = importlib.util.spec_from_file_location("refrun_compare",
                                                  os.path.join(REPO, "model_tests", "refrun_compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.prepare(model, str(tmp_path_factory.mktemp(model)), calib_images=32)
    result = module.compare_model(cfg, images=16, all_tensors=True)
    assert result["images"] == 16
    assert result["differ"] == {}, result
    assert result["top1"]["npuopt"] == result["top1"]["npuopt-run"]

