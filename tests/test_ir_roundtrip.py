"""Issue 2, point 2: every example IR loads, and read -> write -> read gives the same
graph (layers, order, params, constants) with a byte-identical .bin."""
import numpy as np
import pytest
import torch

from npuopt.dtype import Dtype, bytes_to_tensor, tensor_to_bytes
from npuopt.ir import read_graph, write_graph
from npuopt.ir.values import parse_value

from conftest import SQUEEZENET_BIN_BYTES, write_tiny_ir


def assert_same_graph(a, b):
    assert (a.name, dict(a.header)) == (b.name, dict(b.header))
    assert [t.name for t in a.input_tensors] == [t.name for t in b.input_tensors]
    assert [t.name for t in a.output_tensors] == [t.name for t in b.output_tensors]
    assert [(n.name, n.type) for n in a.nodes] == [(n.name, n.type) for n in b.nodes]
    for x, y in zip(a.nodes, b.nodes):
        assert list(x.params.items()) == list(y.params.items()), x.name
        assert list(x.constants) == list(y.constants), x.name
        for cx, cy in zip(x.constants.values(), y.constants.values()):
            assert (cx.dtype, cx.ir_shape) == (cy.dtype, cy.ir_shape), (x.name, cx.name)
            assert tensor_to_bytes(cx.betensor, cx.dtype) == tensor_to_bytes(cy.betensor, cy.dtype), (x.name, cx.name)
        assert _tensors(x.inputs) == _tensors(y.inputs), x.name
        assert _tensors(x.outputs) == _tensors(y.outputs), x.name
        assert x.attrs.get("ir_top_fields") == y.attrs.get("ir_top_fields"), x.name


def _tensors(tensors):
    return [(t.name, t.dtype, t.ir_shape, t.scale, t.zerop, t.qmin, t.qmax) for t in tensors]


def ir_blocks(path):
    """The file as a list of {key: parsed value} blocks: what any reader of the format sees."""
    blocks = []
    for chunk in path.read_text(encoding="utf-8").split("\n\n"):
        lines = [line for line in chunk.splitlines() if line.strip()]
        if lines:
            blocks.append({k: parse_value(v) for k, v in (line.split("=", 1) for line in lines)})
    return blocks


def roundtrip(txt, bin_path, out_dir):
    graph = read_graph(str(txt), str(bin_path) if bin_path else None)
    out_txt = out_dir / txt.name
    write_graph(graph, str(out_txt))
    again = read_graph(str(out_txt))
    assert_same_graph(graph, again)
    assert ir_blocks(out_txt) == ir_blocks(txt)
    return graph, out_txt, out_txt.with_suffix(".bin")


@pytest.mark.shared
@pytest.mark.parametrize("name, layers, constants", [
    ("tiny_conv_sigmoid", ["x", "conv", "sig"], {"conv": ["biases", "weights"]}),
    ("single_eltwise_1", ["Placeholder1", "Placeholder2", "eltwise"], {}),
])
def test_small_examples_roundtrip(ir_examples, tmp_path, name, layers, constants):
    txt = ir_examples / f"{name}.txt"
    source_bin = txt.with_suffix(".bin")
    graph, _, out_bin = roundtrip(txt, None, tmp_path)
    assert [n.name for n in graph.nodes] == layers
    assert {n.name: list(n.constants) for n in graph.nodes if n.constants} == constants
    expected = source_bin.read_bytes() if source_bin.exists() else b""
    assert out_bin.read_bytes() == expected


@pytest.mark.shared
def test_tiny_conv_sigmoid_constants_are_the_bin_bytes(ir_examples):
    graph = read_graph(str(ir_examples / "tiny_conv_sigmoid.txt"))
    conv = graph.node("conv")
    raw = (ir_examples / "tiny_conv_sigmoid.bin").read_bytes()
    assert conv.constants["biases"].ir_shape == (8,)
    assert conv.constants["weights"].ir_shape == (8, 3, 3, 4)
    assert np.array_equal(conv.constants["biases"].betensor.numpy(), np.frombuffer(raw[:32], "<f4"))
    assert np.array_equal(conv.constants["weights"].betensor.numpy().ravel(), np.frombuffer(raw[32:], "<f4"))
    assert conv.params["with_activation"] == "NONE" and conv.params["pad_top"] == 1


@pytest.mark.shared
def test_squeezenet_loads_and_roundtrips_byte_identical(squeezenet, tmp_path):
    source_bin = squeezenet.with_suffix(".bin")
    assert source_bin.stat().st_size == SQUEEZENET_BIN_BYTES
    graph, _, out_bin = roundtrip(squeezenet, source_bin, tmp_path)
    assert len(graph.nodes) == 42
    assert [t.name for t in graph.input_tensors] == ["data"]
    assert [t.name for t in graph.output_tensors] == ["prob"]
    assert graph.nodes[0].type == "Input" and graph.nodes[-1].type == "Softmax"
    conv1 = graph.node("conv1")
    assert conv1.constants["weights"].ir_shape == (96, 7, 7, 3)
    assert conv1.outputs[0].ir_shape == (1, 111, 111, 96)
    # the float IR's layer_top_scale/zp are kept and written back
    assert list(conv1.attrs["ir_top_fields"]) == ["layer_top_scale", "layer_top_zp"]
    assert out_bin.read_bytes() == source_bin.read_bytes()


def test_generated_ir_roundtrips(tmp_path):
    txt = write_tiny_ir(tmp_path / "a")
    graph, out_txt, out_bin = roundtrip(txt, None, tmp_path / "b")
    assert out_bin.read_bytes() == txt.with_suffix(".bin").read_bytes()
    assert out_txt.read_text() == txt.read_text()  # the writer's own output is its fixed point
    assert [n.name for n in graph.nodes] == ["x", "conv", "sig", "prob"]


# Float constants start with a NaN carrying a payload, a negative zero and a denormal:
# any conversion on the way (rather than a reinterpretation of the bits) changes a byte.
SPECIAL_FLOATS = {
    Dtype.FP32: np.array([0x7FC00001, 0x80000000, 0x00000001], "<u4"),
    Dtype.FP16: np.array([0x7E01, 0x8000, 0x0001], "<u2"),
    Dtype.BFP16: np.array([0x7FC1, 0x8000, 0x0001], "<u2"),
    Dtype.FP64: np.array([0x7FF8000000000001, 0x8000000000000000, 0x1], "<u8"),
}


def _raw_values(dtype: Dtype, count: int, rng) -> bytes:
    """`count` values of `dtype` as the .bin holds them."""
    if dtype is Dtype.BOOL:
        return rng.integers(0, 2, count, dtype=np.uint8).tobytes()
    if dtype is Dtype.INT4:
        return rng.integers(-8, 8, count).astype(np.int8).tobytes()
    if dtype is Dtype.UINT4 or dtype is Dtype.FP4_E2M1FN:  # (fp4: the 16 codes of sign and magnitude)
        return rng.integers(0, 16, count).astype(np.uint8).tobytes()
    if dtype.is_minifloat:  # fp8 bytes but NaN's, whose payloads read back as one NaN
        codes = rng.integers(0, 256, 4 * count).astype(np.uint8)
        values = bytes_to_tensor(codes, dtype, codes.shape)
        return codes[~torch.isnan(values).numpy()][:count].tobytes()
    special = SPECIAL_FLOATS[dtype].tobytes() if dtype in SPECIAL_FLOATS else b""
    rest = count * dtype.storage_bytes - len(special)
    return special + rng.integers(0, 256, rest, dtype=np.uint8).tobytes()


def test_every_dtype_and_param_kind_roundtrips(tmp_path):
    rng = np.random.default_rng(1)
    constants, blob = [], b""
    for i, dtype in enumerate(Dtype):
        shape = [2, 3] if i % 2 else [5]
        data = _raw_values(dtype, int(np.prod(shape)), rng)
        constants += [f"c_{dtype.value}_type={dtype.value}", f"c_{dtype.value}_offset={len(blob)}",
                      f"c_{dtype.value}_size={len(data)}", f"c_{dtype.value}_shape={shape}".replace(" ", "")]
        blob += data
    scalar = np.array([3.5], "<f4").tobytes()
    constants += ["scalar_type=float32", f"scalar_offset={len(blob)}", "scalar_size=4", "scalar_shape=[]"]
    blob += scalar
    text = "\n".join([
        "model_name=dtypes", "layer_number=2", "input_tensors=[in]", "output_tensors=[out]",
        "compat_quantized_model=false", "",
        "layer_id=0", "layer_name=in", "layer_type=Input", "layer_bottom=[]", "layer_bottom_shape=[]",
        "layer_bottom_type=[]", "layer_top=[in]", "layer_top_shape=[[1,4]]", "layer_top_type=[int8]",
        "layer_top_scale=[12.5]", "layer_top_zp=[-3]", "layer_top_range=[[-1.25,0.75]]", "",
        "layer_id=1", "layer_name=mix", "layer_type=MyVendorOp", "layer_bottom=[in]",
        "layer_bottom_shape=[[1,4]]", "layer_bottom_type=[int8]", "layer_top=[out]",
        "layer_top_shape=[[1,4]]", "layer_top_type=[int16]", *constants,
        "nested=[[1,-2],[3,4]]", "ratio=-0.125", "tiny=1e-30", "flag=true", "mode=half_pixel",
        "empty=[]", "big=12345678901234", "words=[A,B]",
    ]) + "\n"
    txt = tmp_path / "dtypes.txt"
    txt.write_text(text)
    txt.with_suffix(".bin").write_bytes(blob)
    graph, _, out_bin = roundtrip(txt, None, tmp_path / "out")
    assert out_bin.read_bytes() == blob
    mix = graph.node("mix")
    assert list(mix.params.items()) == [
        ("nested", [[1, -2], [3, 4]]), ("ratio", -0.125), ("tiny", 1e-30), ("flag", True),
        ("mode", "half_pixel"), ("empty", []), ("big", 12345678901234), ("words", ["A", "B"])]
    assert mix.constants["scalar"].ir_shape == () and mix.constants["scalar"].betensor.item() == 3.5
    assert mix.constants["c_aligned_int4"].dtype is Dtype.INT4
    assert graph.header == {"compat_quantized_model": False}
    top = graph.node("in").outputs[0]
    assert (top.scale, top.zerop, top.qmin, top.qmax, top.qbits) == (12.5, -3, -128, 127, 8)
    assert graph.node("in").attrs["ir_top_fields"]["layer_top_range"] == [[-1.25, 0.75]]


def test_tied_weights_are_written_once_and_read_shared(tmp_path):
    """A decoder's head tied to its embedding (one tensor in two layers): its bytes are
    written once, both constants pointing at them, and read back as one tensor; the
    graph computes as before, and a quantized IR, whose head has its own integers, still
    writes both."""
    from npuopt_export.export_llm import export_step
    from npuopt_export.llama import tiny_llama
    graph, _ = export_step(tiny_llama(tied=True), "prefill", "tied", length=8)
    embed, head = graph.node("model.embed.embedding.const"), graph.node("model.linear")
    assert embed.constants["weights"].betensor.data_ptr() == head.constants["weights"].betensor.data_ptr()
    write_graph(graph, str(tmp_path / "t.txt"), str(tmp_path / "t.bin"))
    blocks = {b.get("layer_name"): b for b in ir_blocks(tmp_path / "t.txt")}
    places = [(blocks[n]["weights_offset"], blocks[n]["weights_size"]) for n in (embed.name, head.name)]
    assert places[0] == places[1]
    assert (tmp_path / "t.bin").stat().st_size == sum(
        b[k] for b in blocks.values() for k in b if k.endswith("_size") and not (b is blocks[head.name] and k == "weights_size"))
    back = read_graph(str(tmp_path / "t.txt"))
    assert back.node(embed.name).constants["weights"].betensor is back.node(head.name).constants["weights"].betensor
    x = torch.randint(0, 64, (1, 8), dtype=torch.int32)
    assert torch.equal(back.forward([x])[0], graph.forward([x])[0])
