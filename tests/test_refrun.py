"""The reference runner npuopt-run (npuopt_run): its own IR parser against
npuopt's reader, its one-line errors, the op tests (op_tests/), and, marked
slow, whole models against npuopt's quantized forward."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from npuopt_run import cli
from npuopt_run.irfile import read_model

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


QUANTIZED_TAIL = ("\n\nlayer_id=3\nlayer_name=q\nlayer_type=Quantize\nlayer_bottom=[sig]\n"
                  "layer_bottom_shape=[[1,8,8,8]]\nlayer_bottom_type=[float32]\nlayer_top=[q]\n"
                  "layer_top_shape=[[1,8,8,8]]\nlayer_top_type=[uint8]\nlayer_top_scale=[255.0]\nlayer_top_zp=[0]\n")


def with_quantized_tail(txt):
    """tiny_conv_sigmoid's float layers ending in a Quantize layer (npuopt-run refuses a
    float IR: here the float layers are those a mixed-precision IR keeps in float)."""
    with open(txt) as f:
        text = f.read()
    with open(txt, "w") as f:
        f.write(text.replace("layer_number=3", "layer_number=4").replace("output_tensors=[sig]", "output_tensors=[q]")
                .rstrip("\n") + QUANTIZED_TAIL)
    return txt


@needs_shared
def test_float_layers_run_like_npuopt(tmp_path):
    """Layers kept in float (float64 in the mixed IR) match npuopt's float forward of the
    float IR (float32) to float32 rounding."""
    import npuopt.ops  # noqa: F401  (registers the forwards)
    from npuopt.ir import read_graph

    graph = read_graph(example(tmp_path, "tiny_conv_sigmoid"))
    (tmp_path / "mixed").mkdir()
    txt = with_quantized_tail(example(tmp_path / "mixed", "tiny_conv_sigmoid"))
    x = np.random.default_rng(1).standard_normal((3, 8, 8, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert run_cli([txt, "--input", str(tmp_path / "x.npy"), "-o", str(out), "--dump", str(tmp_path / "dump")]) == 0
    graph.forward([torch.from_numpy(x)], keep_tensors=True)
    sig = graph.tensor("sig").betensor.numpy()
    np.testing.assert_allclose(np.load(tmp_path / "dump" / "sig.npy"), sig, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "dump" / "conv.npy"), graph.tensor("conv").betensor.numpy(),
                               rtol=1e-5, atol=1e-5)
    assert np.load(out)["q"].dtype == np.uint8
    assert np.abs(np.load(out)["q.float"] - sig).max() <= 0.5 / 255 + 1e-6


@needs_shared
def test_a_float_ir_is_refused(capsys, tmp_path):
    txt = example(tmp_path, "tiny_conv_sigmoid")
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 4), np.float32))
    expect_error(capsys, [txt, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz")],
                 "tiny_conv_sigmoid.txt", "not a quantized IR")
    assert not (tmp_path / "o.npz").exists()


def test_value_syntax():
    from npuopt_run.irfile import ValueSyntax, parse_value

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
    code = ("import sys, npuopt_run.cli; "
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
    """tiny_conv_sigmoid (with a quantized tail) and an input; returns (txt path, edit(old, new), argv)."""
    if not os.path.isdir(EXAMPLES):
        pytest.skip(f"the example IRs ({EXAMPLES}) are not beside this checkout")
    txt = with_quantized_tail(example(tmp_path, "tiny_conv_sigmoid"))
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
    ("layer_number=4", "layer_number=5", ["layer_number", "truncated"]),
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
    cmd = [exe] if exe else [sys.executable, "-m", "npuopt_run.cli"]
    proc = subprocess.run(cmd + argv, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("npuopt-run: error: ") and "layer 'sig'" in proc.stderr
    with_verbose = subprocess.run(cmd + argv + ["--verbose"], capture_output=True, text=True, cwd=REPO)
    assert with_verbose.returncode == 1 and "Traceback" in with_verbose.stderr


# ------------------------------------------------- integer semantics, by hand
def test_rounding_primitives_follow_the_page():
    from npuopt_run.intmath import as_float32, as_float64, dequantize, quantize, shift_round_even

    # graph inputs: round half to even in float32; NaN -> 0, +-inf saturate
    f = np.array([-2.5, 2.5, -0.5, 0.5, 1.5, np.nan, np.inf, -np.inf, 1000.0], np.float32)
    assert quantize(f, 1.0, 0, -128, 127).tolist() == [-2, 2, 0, 0, 2, 0, 127, -128, 127]
    assert quantize(np.float32([1.0]), 2.0, -3, 0, 255).tolist() == [5]
    # the rescale's rounding: ties to even, negative shifts are left shifts
    assert shift_round_even(np.array([-5, -6, 5, 6, 7, -7, 3]), 1).tolist() == [-2, -3, 2, 3, 4, -4, 2]
    assert shift_round_even(np.array([3, -3]), -2).tolist() == [12, -12]
    assert shift_round_even(np.array([[6, 6]]), np.array([1, 2])).tolist() == [[3, 2]]
    # float steps of the tool chain, reproduced on integers
    assert as_float32(np.array([(1 << 24) + 1, (1 << 24) + 3])).tolist() == [1 << 24, (1 << 24) + 4]
    assert as_float64(np.array([(1 << 53) + 1, (1 << 53) + 3, 5])).tolist() == [1 << 53, (1 << 53) + 4, 5]
    # DeQuantize multiplies by the float32 reciprocal of the scale
    want = np.float32(7) * (np.float32(1) / np.float32(0.3))
    assert dequantize(np.array([6]), 0.3, 1).tolist() == [want]


def test_requantize_is_the_tool_chains_float64_rescale():
    """round_half_even(fl64(x * M) * 2^-s): exact below 2^53, and the float64 rounding of the
    product reproduced beyond."""
    from npuopt_run.intmath import requantize

    class Layer:  # requantize only names its layer in errors
        def error(self, message):
            return AssertionError(message)

    x = np.array([-2, 22, 5, 7])
    assert requantize(Layer(), x, 3, 2, -2, -128, 127).tolist() == [0, 18, 6, 7]
    big = np.array([(1 << 53) + 1])  # fl64(x * 1) = 2^53: the tie at 2^53 / 4 is not seen
    assert requantize(Layer(), big * 3, 1, 2, 0, 0, 1 << 60).tolist() == [(((1 << 53) + 1) * 3 >> 2) + 1]
    assert requantize(Layer(), big, 1, 1, 0, 0, 1 << 60).tolist() == [1 << 52]


def test_avg_multiplier_is_derived_in_float32():
    """255 / 0.25 = 1020: shift floor(log2(1020)) = 9, M = 0.25 * 2^9 = 128; a ratio of
    exactly 1 (M = 2^shift) everywhere becomes (1, 0)."""
    from npuopt_run.intmath import scale_approximation_f32

    m, s = scale_approximation_f32(np.float32([0.25, 0.2]), 8)
    assert m.tolist() == [128, 205] and s.tolist() == [9, 10]
    m, s = scale_approximation_f32(np.float32([1.0, 1.0]), 8)
    assert m.tolist() == [1, 1] and s.tolist() == [0, 0]


def write_qir(folder, layers, inputs, outputs, name="q"):
    """A quantized IR written by hand (not by npuopt): `layers` are dicts with name,
    type, bottoms, tops, shapes, types, scales, zps, ranges, params and consts
    {name: (dtype, array)}."""
    blobs, blocks = [], [f"model_name={name}\nlayer_number={len(layers)}\ninput_tensors=[{','.join(inputs)}]\n"
                           f"output_tensors=[{','.join(outputs)}]"]
    offset = 0
    shapes = {}
    for i, layer in enumerate(layers):
        for t, s, ty in zip(layer["tops"], layer["shapes"], layer["types"]):
            shapes[t] = (s, ty)
        fmt = lambda v: str(v).replace(" ", "").replace("'", "")
        lines = [f"layer_id={i}", f"layer_name={layer['name']}", f"layer_type={layer['type']}",
                 f"layer_bottom=[{','.join(layer.get('bottoms', []))}]",
                 f"layer_bottom_shape={fmt([shapes[b][0] for b in layer.get('bottoms', [])])}",
                 f"layer_bottom_type=[{','.join(shapes[b][1] for b in layer.get('bottoms', []))}]",
                 f"layer_top=[{','.join(layer['tops'])}]", f"layer_top_shape={fmt(layer['shapes'])}",
                 f"layer_top_type=[{','.join(layer['types'])}]"]
        if "ranges" in layer:
            lines.append(f"layer_top_range={fmt(layer['ranges'])}")
        if "scales" in layer:
            lines += [f"layer_top_scale={fmt(layer['scales'])}", f"layer_top_zp={fmt(layer['zps'])}"]
        for cname, (dtype, value) in layer.get("consts", {}).items():
            storage = ("<u1" if dtype.endswith("uint4") else "<i1") if dtype.endswith("int4") \
                else np.dtype(dtype).newbyteorder("<")
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
    """A 1x1 convolution on x (zp 1, q = [-3, 5]): the biases 7 hold 4 + zp_x * 3, so
    acc = 3q + 7 = [-2, 22]; y = round_half_even(3 acc / 4) = [-2 (-1.5), 16 (16.5)];
    out = y - (-2) = [0, 18]."""
    layer = dict(name="conv", type="Convolution", bottoms=["x"], tops=["conv"], shapes=[[1, 1, 2, 1]],
                 types=["int8"], scales=[1.0], zps=[-2],
                 consts={"weights": ("int8", np.full((1, 1, 1, 1), 3)), "biases": ("int32", np.array([7]))},
                 params=dict(kernel_x=1, kernel_y=1, stride_x=1, stride_y=1, pad_left=0, pad_right=0, pad_top=0,
                             pad_bottom=0, dilation_x=1, dilation_y=1, group=1, num_output=1,
                             with_activation="NONE", scale_value=3, shift_value=2))
    for key, value in changes.items():
        if value is None:  # remove the key, wherever it lives
            for where in (layer, layer["params"], layer["consts"]):
                where.pop(key, None)
        elif key in ("consts", "types", "scales", "zps", "ranges", "type"):
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
    assert out["conv"].dtype == np.int8 and out["conv"].ravel().tolist() == [0, 18]
    np.testing.assert_array_equal(out["conv.float"].ravel(), np.float32([-2, 16]))
    assert np.load(tmp_path / "dump" / "x.npy").ravel().tolist() == [-3, 5]


def test_padding_holds_the_input_zero_point(tmp_path):
    """Pads hold -zp_x (real zero, the biases hold zp_x * sum W): a 1x2 kernel of ones with
    pad_left 1 over q = [-3, 5] (zp 1) sums [pad -1 + (-3), -3 + 5] = [-4, 2], + biases
    2 * zp_x = [-2, 4]; M = 1, s = 0."""
    layer = conv_layer(kernel_x=2, pad_left=1, scale_value=1, shift_value=0, zps=[0],
                       consts={"weights": ("int8", np.ones((1, 1, 2, 1))), "biases": ("int32", np.array([2]))})
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["conv"])
    status, out = run_qir(tmp_path, txt, X_Q)
    assert status == 0 and out["conv"].ravel().tolist() == [-2, 4]


def test_hand_computed_leakyrelu_and_top_range(tmp_path):
    """LEAKYRELU, slope 5 * 2^-1: acc -2 -> round(-2 * 5 / 2) = -5 -> round(-5 * 3 / 4) = -4,
    out -2; acc 22 -> 18 as before, clamped to layer_top_range's 10."""
    layer = conv_layer(with_activation="LEAKYRELU", negative_slope_value=5, negative_slope_shift=1,
                       ranges=[[-100, 10]])
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["conv"])
    status, out = run_qir(tmp_path, txt, X_Q)
    assert status == 0 and out["conv"].ravel().tolist() == [-2, 10]


def test_fused_relu_takes_the_accumulator_through_float32(tmp_path):
    """acc = q + 2^24 + 1 = [2^24 + 1, 2^24 + 3] is 2^24 and 2^24 + 4 in float32."""
    layer = conv_layer(with_activation="RELU", scale_value=1, shift_value=0, types=["int32"], zps=[0],
                       consts={"weights": ("int8", np.ones((1, 1, 1, 1))),
                               "biases": ("int32", np.array([(1 << 24) + 1]))})
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1]), layer], ["x"], ["conv"])
    status, out = run_qir(tmp_path, txt, np.array([0, 2], np.int8).reshape(1, 1, 2, 1))
    assert status == 0 and out["conv"].ravel().tolist() == [1 << 24, (1 << 24) + 4]


def test_hand_computed_clip(tmp_path):
    """CLIP on an 8-bit top: requantize to a 2^8-finer value clamped to [clip_min, clip_max],
    then shift by 8: acc [-2, 22] * 3 * 2^-(2 - 8) = [-384, 4224] -> clamp [-300, 2000] ->
    round(/256) = [-1 (-1.17), 8 (7.8)] -> - zp_out (-2) = [1, 10]."""
    layer = conv_layer(with_activation="CLIP", clip_min=-300, clip_max=2000)
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["conv"])
    status, out = run_qir(tmp_path, txt, X_Q)
    assert status == 0 and out["conv"].ravel().tolist() == [1, 10]


def test_hand_computed_lut_interpolation(tmp_path):
    """64 entries on int8 input: index = q + 128, b = 2. q = -125: i = 0, r = 3:
    -60 + floor(2 * 3 / 4) = -59; q = -121: i = 1, r = 3: -58 + floor(-1 * 3 / 4) = -59;
    q = 127: i = 63, the entry past the end repeats the last: 80."""
    lut = np.arange(64) * 2 - 60
    lut[2], lut[63] = -59, 80
    layer = dict(name="sig", type="Activation", bottoms=["x"], tops=["sig"], shapes=[[1, 1, 4, 1]],
                 types=["int8"], scales=[1.0], zps=[0], consts={"lut": ("int8", lut)},
                 params=dict(method="SIGMOID"))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 4, 1]), layer], ["x"], ["sig"])
    status, out = run_qir(tmp_path, txt, np.array([-128, -125, -121, 127], np.int8).reshape(1, 1, 4, 1))
    assert status == 0 and out["sig"].ravel().tolist() == [-60, -59, -59, 80]


def test_hand_computed_eltwise_add(tmp_path):
    """A = q_a + 1 = [-2, 6], B = q_b = [4, 4]: z = 3A + 5B = [14, 38], then M_out = 1, shift 2:
    round_half_even([3.5, 9.5]) = [4, 10]."""
    layer = dict(name="add", type="Eltwise", bottoms=["x", "y"], tops=["add"], shapes=[[1, 1, 2, 1]],
                 types=["int8"], scales=[1.0], zps=[0],
                 params=dict(method="ADD", with_activation="NONE", scale_value=[1, 3, 5], shift_value=2))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), int8_input("y", [1, 1, 2, 1]), layer],
                    ["x", "y"], ["add"])
    np.save(tmp_path / "x.npy", X_Q)
    np.save(tmp_path / "y.npy", np.full((1, 1, 2, 1), 4, np.int8))
    out = tmp_path / "out.npz"
    assert run_cli([txt, "--input", str(tmp_path / "x.npy"), "--input", str(tmp_path / "y.npy"),
                    "--integer-input", "-o", str(out)]) == 0
    assert np.load(out)["add"].ravel().tolist() == [4, 10]


def test_hand_computed_avg_pooling(tmp_path):
    """2x2 windows of A = q (scales 1): sums 6 and 10, ratio 1/4 -> M 128, shift 9:
    round_half_even(1.5, 2.5) = [2, 2]."""
    layer = dict(name="pool", type="Pooling", bottoms=["x"], tops=["pool"], shapes=[[1, 1, 2, 1]],
                 types=["int8"], scales=[1.0], zps=[0],
                 params=dict(method="AVG", kernel_x=2, kernel_y=2, stride_x=2, stride_y=2, pad_left=0,
                             pad_right=0, pad_top=0, pad_bottom=0, count_include_pad=False))
    txt = write_qir(tmp_path, [int8_input("x", [1, 2, 4, 1]), layer], ["x"], ["pool"])
    x = np.array([[1, 2, 3, 1], [1, 2, 3, 3]], np.int8).reshape(1, 2, 4, 1)
    status, out = run_qir(tmp_path, txt, x)
    assert status == 0 and out["pool"].ravel().tolist() == [2, 2]


def test_reads_an_ir_written_by_the_tool_chain(tmp_path):
    """The tool chain's spelling: DepthwiseConv with per-channel scale/shift constants,
    weights_scale/weights_zp constants, an int64 biases_zp constant, aligned_int4 weights,
    is_perf_mode/unquantifiable/activation_quantization_axis params. Channel c: acc =
    (w_c + zp_c) * q + b_c + bzp = [(2 - 1) * 4 + 1 + 1, (-3 + 0) * 4 + 2 + 1] = [6, -9];
    rescales [1/2, 3/4]: round_half_even([3, -6.75]) = [3, -7]."""
    common = dict(is_perf_mode=True, unquantifiable=False, activation_quantization_axis=["None"])
    inp = dict(int8_input("x", [1, 1, 1, 2]), ranges=[[-127, 127]], params=common)
    layer = dict(name="dw", type="DepthwiseConv", bottoms=["x"], tops=["dw"], shapes=[[1, 1, 1, 2]],
                 types=["int8"], ranges=[[-127, 127]], scales=[1.0], zps=[0],
                 consts={"weights": ("aligned_int4", np.array([2, -3]).reshape(2, 1, 1, 1)),
                         "biases": ("int32", np.array([1, 2])), "scale": ("uint16", np.array([1, 3])),
                         "shift": ("int8", np.array([1, 2])), "weights_scale": ("float32", np.ones(2)),
                         "weights_zp": ("int32", np.array([-1, 0])), "biases_scale": ("float32", np.ones(2)),
                         "biases_zp": ("int64", np.array([1]))},
                 params=dict(kernel_x=1, kernel_y=1, stride_x=1, stride_y=1, pad_left=0, pad_right=0, pad_top=0,
                             pad_bottom=0, dilation_x=1, dilation_y=1, group=2, num_output=2, multiplier=1,
                             with_activation="NONE", **common))
    txt = write_qir(tmp_path, [inp, layer], ["x"], ["dw"])
    status, out = run_qir(tmp_path, txt, np.array([4, 4], np.int8).reshape(1, 1, 1, 2))
    assert status == 0 and out["dw"].ravel().tolist() == [3, -7]


@pytest.mark.parametrize("layer, words", [
    (conv_layer(with_activation="SIGMOID"), ["layer 'conv'", "SIGMOID"]),
    (conv_layer(with_activation="CLIP"), ["layer 'conv'", "clip_min"]),
    (conv_layer(scale_value=None), ["layer 'conv'", "scale_value"]),
    (conv_layer(shift_value=1.5), ["layer 'conv'", "shift_value"]),
    (conv_layer(consts={"weights": ("int8", np.ones((1, 1, 1, 1))), "scale": ("uint16", np.ones(3)),
                        "shift": ("int8", np.ones(3))}), ["layer 'conv'", "per-channel"]),
    (conv_layer(consts={"weights": ("int4", np.full((1, 1, 1, 1), 9))}), ["layer 'conv'", "int4"]),
    (conv_layer(consts={"weights": ("int8", np.ones((1, 1, 1, 2)))}), ["layer 'conv'", "group"]),
    (conv_layer(scales=None, zps=None), ["layer 'conv'", "layer_top_scale"]),
    (conv_layer(ranges=[[-128, 300]]), ["layer 'conv'", "layer_top_range"]),
    (conv_layer(activation_quantization_axis=[3]), ["layer 'conv'", "activation_quantization_axis"]),
    (conv_layer(type="Eltwise", method="POW"), ["layer 'conv'", "Eltwise"]),
    (conv_layer(type="Eltwise", method="ADD"), ["layer 'conv'", "Eltwise takes 2 inputs"]),
    (conv_layer(type="Pooling", method="MEDIAN"), ["layer 'conv'", "MEDIAN"]),
    (conv_layer(type="Activation", method="SIGMOID", consts={"lut": ("int8", np.zeros(100))}), ["layer 'conv'", "lut"]),
    (conv_layer(type="Activation", method="ELU"), ["layer 'conv'", "ELU", "lut"]),
    (conv_layer(type="Split", splits=[2], scales=[0.5]), ["layer 'conv'", "does not rescale"]),
    (conv_layer(type="Softmax", axis=4), ["layer 'conv'", "axis"]),
    (conv_layer(type="Softmax", adjust_q=4), ["layer 'conv'", "adjust_q"]),
    (conv_layer(type="LayerNorm", axis=[7]), ["layer 'conv'", "axis"]),
    (conv_layer(type="LayerNorm", axis=[2]), ["layer 'conv'", "norm_scale_value"]),
    (conv_layer(type="Reduce", method="MEDIAN", axis=[1]), ["layer 'conv'", "MEDIAN"]),
    (conv_layer(type="Reduce", method="SUM", axis=[1, -3]), ["layer 'conv'", "twice"]),
    (conv_layer(type="Resize", method="CUBIC", zps=[1]), ["layer 'conv'", "CUBIC"]),
    (conv_layer(type="Resize", method="BILINEAR", interp_shift_value=31, zps=[1]), ["layer 'conv'", "interp_shift"]),
])
def test_unsupported_or_broken_quantized_layer(capsys, tmp_path, layer, words):
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["conv"])
    np.save(tmp_path / "x.npy", X_Q)
    expect_error(capsys, [txt, "--input", str(tmp_path / "x.npy"), "--integer-input", "-o",
                          str(tmp_path / "o.npz")], *words)


@pytest.mark.parametrize("nearest_mode, want", [("ROUND_PREFER_FLOOR", [-2, -2, -2, 5, 5]),
                                                ("ROUND_PREFER_CEIL", [-2, -2, 5, 5, 5])])
def test_resize_nearest_by_hand(tmp_path, nearest_mode, want):
    """NEAREST HALF_PIXEL 2 -> 5: c = (i + 0.5) * 2 / 5 - 0.5 = -0.3, 0.1, 0.5, 0.9, 1.3; the
    tie 0.5 goes down (ROUND_PREFER_FLOOR) or up; q = -3 clamps to layer_top_range's -2."""
    layer = dict(name="rs", type="Resize", bottoms=["x"], tops=["rs"], shapes=[[1, 1, 5, 1]], types=["int8"],
                 ranges=[[-2, 127]], scales=[1.0], zps=[1],
                 params=dict(method="NEAREST", mode="HALF_PIXEL", nearest_mode=nearest_mode))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], zp=1), layer], ["x"], ["rs"])
    status, out = run_qir(tmp_path, txt, X_Q)
    assert status == 0 and out["rs"].ravel().tolist() == want


def test_resize_bilinear_by_hand(tmp_path):
    """BILINEAR ASYMMETRIC 2 -> 4 with 2-bit weights: c = 0, 0.5, 1, 1.5; weights x 4 on
    (q0, q1) = (4, 0), (2, 2), (4, 0) and for c = 1.5 (both taps clamped to pixel 1) (2, 2):
    on q = [-3, 4]: [-12, 2, 16, 16] / 4 = [-3, 0 (0.5 to even), 4, 4]."""
    layer = dict(name="rs", type="Resize", bottoms=["x"], tops=["rs"], shapes=[[1, 1, 4, 1]], types=["int8"],
                 ranges=[[-128, 127]], scales=[1.0], zps=[0],
                 params=dict(method="BILINEAR", mode="ASYMMETRIC", interp_shift_value=2))
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1]), layer], ["x"], ["rs"])
    status, out = run_qir(tmp_path, txt, np.array([-3, 4], np.int8).reshape(1, 1, 2, 1))
    assert status == 0 and out["rs"].ravel().tolist() == [-3, 0, 4, 4]


def _fp24(v):
    return (np.asarray(v, np.float32).view(np.int32) & np.int32(-256)).view(np.float32)


SOFTMAX_FORMS = {
    # the tool chain's X3 float form
    "perf_mode": dict(params=dict(is_perf_mode="true", quantize_method="LUT", scale_value=1, shift_value=0),
                      consts={"float_lut": ("float32", _fp24(2.0 ** np.linspace(0.0, 1.0, 513)))}),
    # FAST_EXP with adjust_q 0 and 1 (npuopt writes 15)
    "fast_exp_0": dict(params=dict(adjust_q=0, input_scale_value=185, input_shift_value=8, pow2_out_q=28,
                                   quantize_method="FAST_EXP")),
    "fast_exp_1": dict(params=dict(adjust_q=1, input_scale_value=185, input_shift_value=8, pow2_out_q=28,
                                   quantize_method="FAST_EXP")),
    "fast_exp_9": dict(params=dict(adjust_q=9, input_scale_value=5919, input_shift_value=13, pow2_out_q=28,
                                   quantize_method="FAST_EXP")),
}


@pytest.mark.parametrize("form", sorted(SOFTMAX_FORMS))
def test_softmax_forms_npuopt_does_not_write(tmp_path, form):
    """Softmax forms only the tool chain writes, on a hand-written IR (input scale 8, uint8 top
    of scale 255): npuopt-run and npuopt's forward give the same integers."""
    import npuopt.ops  # noqa: F401  (registers the forwards)
    from npuopt.ir import read_graph

    spec = SOFTMAX_FORMS[form]
    shape = [1, 4, 6, 9]
    layer = dict(name="sm", type="Softmax", bottoms=["x"], tops=["sm"], shapes=[shape], types=["uint8"],
                 ranges=[[0, 255]], scales=[255.0], zps=[0], consts=spec.get("consts", {}),
                 params=dict(axis=3, **spec["params"]))
    txt = write_qir(tmp_path, [dict(int8_input("x", shape, scale=8.0), ranges=[[-128, 127]]), layer], ["x"], ["sm"])
    x = np.random.default_rng(3).integers(-128, 128, size=[2] + shape[1:]).astype(np.int8)
    x[0, 0, 0] = 7  # a row of equal values
    status, out = run_qir(tmp_path, txt, x)
    assert status == 0
    graph = read_graph(txt)
    graph.forward([torch.from_numpy(x.astype(np.float32) / 8.0)], keep_tensors=True)
    want = graph.tensor("sm").betensor.numpy().astype(np.int64)
    np.testing.assert_array_equal(out["sm"].astype(np.int64), want)
    assert len(np.unique(want)) > 8  # the rows spread over the output range


FLOAT_RESIZES = [  # method, mode, nearest_mode, top shape, ratio
    ("NEAREST", "HALF_PIXEL", "ROUND_PREFER_FLOOR", [1, 7, 6, 4], None),
    ("NEAREST", "ASYMMETRIC", "FLOOR", [1, 3, 9, 4], None),
    ("NEAREST", "ASYMMETRIC", "ROUND_PREFER_FLOOR", [1, 10, 10, 4], 2.0),
    ("NEAREST", "ALIGN_CORNERS", "ROUND_PREFER_CEIL", [1, 7, 3, 4], None),
    ("NEAREST", "TF_HALF_PIXEL_FOR_NN", "CEIL", [1, 8, 4, 4], 1.6),
    ("NEAREST", "PYTORCH_HALF_PIXEL", "SIMPLE", [1, 1, 7, 4], None),
    ("NEAREST", "HALF_PIXEL", "SIMPLE", [1, 3, 2, 4], None),
    ("NEAREST", "HALF_PIXEL_SYMMETRIC", "ROUND_PREFER_FLOOR", [1, 7, 7, 4], 1.5),
    ("BILINEAR", "HALF_PIXEL", None, [1, 7, 9, 4], None),
    ("BILINEAR", "HALF_PIXEL", None, [1, 10, 10, 4], 2.0),
    ("BILINEAR", "ALIGN_CORNERS", None, [1, 9, 3, 4], None),
    ("BILINEAR", "ASYMMETRIC", None, [1, 3, 7, 4], 1.4),
    ("BILINEAR", "PYTORCH_HALF_PIXEL", None, [1, 1, 8, 4], None),
    ("BILINEAR", "TF_HALF_PIXEL_FOR_NN", None, [1, 4, 4, 4], None),
    ("BILINEAR", "HALF_PIXEL_SYMMETRIC", None, [1, 7, 7, 4], 1.5),
]
FLOAT_REDUCES = [("MEAN", [1, 2]), ("SUM", [2]), ("MAX", [3]), ("MIN", [1]), ("PROD", [3, 1]), ("L1", [1, 2]),
                 ("L2", [2]), ("VARIANCE", [1, 2]), ("UNBIASED_VARIANCE", [3]), ("ANY", [2]), ("ALL", [1])]


def test_float_resize_and_reduce_run_like_npuopt(tmp_path):
    """Float layers of every Resize mode/nearest_mode (with ratios for some) and every
    Reduce method: npuopt-run's float forward gives npuopt's to float rounding."""
    import npuopt.ops  # noqa: F401  (registers the forwards)
    from npuopt.ir import read_graph

    shape = [1, 5, 5, 4]
    layers = [dict(name="x", type="Input", tops=["x"], shapes=[shape], types=["float32"])]
    for i, (method, mode, nearest_mode, top, ratio) in enumerate(FLOAT_RESIZES):
        params = dict(method=method, mode=mode)
        if nearest_mode:
            params["nearest_mode"] = nearest_mode
        if ratio:
            params.update(ratio_x=ratio, ratio_y=ratio)
        layers.append(dict(name=f"rs{i}", type="Resize", bottoms=["x"], tops=[f"rs{i}"], shapes=[top],
                           types=["float32"], params=params))
    for method, axes in FLOAT_REDUCES:
        top = [1 if d in axes else n for d, n in enumerate(shape)]
        layers.append(dict(name=method.lower(), type="Reduce", bottoms=["x"], tops=[method.lower()], shapes=[top],
                           types=["float32"], params=dict(method=method, axis=axes)))
    tops = [t for layer in layers[1:] for t in layer["tops"]]
    txt = write_qir(tmp_path, layers, ["x"], tops)
    # npuopt-run refuses a float IR: these float layers are those a mixed-precision IR keeps in float
    quantize = dict(name="q", type="Quantize", bottoms=["x"], tops=["q"], shapes=[shape], types=["int8"],
                    scales=[50.0], zps=[0])
    (tmp_path / "mixed").mkdir()
    mixed = write_qir(tmp_path / "mixed", layers + [quantize], ["x"], tops + ["q"])
    x = np.random.default_rng(5).uniform(-1.5, 1.5, [3] + shape[1:]).astype(np.float32)
    x[0, 1, 1] = 0.0
    np.save(tmp_path / "x.npy", x)
    assert run_cli([mixed, "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out.npz")]) == 0
    got = np.load(tmp_path / "out.npz")
    graph = read_graph(txt)
    graph.forward([torch.from_numpy(x)], keep_tensors=True)
    for t in tops:
        want = graph.tensor(t).betensor.numpy()
        np.testing.assert_allclose(got[t], want, rtol=1e-5, atol=1e-6, err_msg=t)


def test_float_and_integer_meet_only_at_boundaries(capsys, tmp_path):
    relu = dict(name="relu", type="Activation", bottoms=["x"], tops=["relu"], shapes=[[1, 1, 2, 1]],
                types=["float32"], params=dict(method="RELU"))
    # (a scaled input: integers of scale 1, zero point 0 are their own values, which float
    # layers read as they are: indices, counts)
    txt = write_qir(tmp_path, [int8_input("x", [1, 1, 2, 1], scale=4.0), relu], ["x"], ["relu"])
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
    """The committed folders are reproduced byte for byte by tools/gen_op_tests.py (all but
    those whose IR the tool chain's parser wrote: tools/parser_op_tests.py, beside a parser.cfg;
    and npuopt-export's: tools/export_op_tests.py, checked by tests/test_export_rnn.py)."""
    import gen_op_tests

    gen_op_tests.main([str(tmp_path)])
    generated = [c for c in OP_CASES if not os.path.isfile(os.path.join(OP_TESTS, c, "parser.cfg"))
                 and "export_op_tests.py" not in open(os.path.join(OP_TESTS, c, "opt.cfg")).read()]
    assert sorted(os.listdir(tmp_path)) == generated
    for case in generated:
        for name in os.listdir(tmp_path / case):
            with open(tmp_path / case / name, "rb") as a, open(os.path.join(OP_TESTS, case, name), "rb") as b:
                assert a.read() == b.read(), f"op_tests/{case}/{name} differs from what the generator writes"


def test_run_sh_prints_one_line_per_test_and_the_total():
    """op_tests/run.sh through the shell and the console scripts, on two cases, with a
    setting passed through to npuopt."""
    env = dict(os.environ, PYTHON=sys.executable,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["sh", os.path.join(OP_TESTS, "run.sh"), "--set", "activation_bits=16", "conv", "matmul"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.splitlines() == ["PASS conv", "PASS matmul", "2 passed, 0 failed"], proc.stdout + proc.stderr
    assert proc.returncode == 0
    assert read_model(os.path.join(OP_TESTS, "conv", "work", "conv_o.txt")).layers[-1].top_types[0].name == "int16"


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

