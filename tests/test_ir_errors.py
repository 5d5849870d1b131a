"""Issue 2, point 4: a malformed IR is one error that names its culprit (file and line,
or layer and tensor), from the reader and from `npuopt --cfg`: exit status 1, one
`npuopt: error:` line on stderr and no traceback; `--verbose` adds the traceback."""
from pathlib import Path

import pytest

from npuopt.errors import GraphError, IRError, NpuoptError
from npuopt.ir import read_graph

from conftest import (assert_one_line_error, assert_verbose_traceback, edit_ir, line_of, start_npuopt,
                      write_cfg, write_tiny_ir)


def replace_line(txt: Path, number: int, text: str) -> None:
    lines = txt.read_text(encoding="utf-8").split("\n")
    lines[number - 1] = text
    txt.write_text("\n".join(lines), encoding="utf-8")


def insert_after(txt: Path, layer, key: str, text: str) -> int:
    """Insert the raw line `text` after `key` in `layer`'s block; returns its line number."""
    number = line_of(txt, layer, key) + 1
    lines = txt.read_text(encoding="utf-8").split("\n")
    lines.insert(number - 1, text)
    txt.write_text("\n".join(lines), encoding="utf-8")
    return number


# ---- the acceptance's errors, each also through the CLI -----------------------------
# A case breaks the valid tiny IR (x -> conv -> sig -> prob) one way and returns
# (graph path for the cfg, error class, fragments the message must contain).
def missing_graph(folder):
    write_tiny_ir(folder)
    return folder / "absent.txt", IRError, ["absent.txt", "not found"]


def missing_bin(folder):
    txt = write_tiny_ir(folder)
    txt.with_suffix(".bin").unlink()
    return txt, IRError, ["tiny.bin", "not found", "layer 'conv'"]


def unparsable_line(folder):
    txt = write_tiny_ir(folder)
    number = line_of(txt, "sig", "method")
    replace_line(txt, number, "method SIGMOID")
    return txt, IRError, [f"tiny.txt:{number}:", "cannot parse line 'method SIGMOID'"]


def unknown_dtype(folder):
    txt = write_tiny_ir(folder)
    number = edit_ir(txt, "conv", "layer_top_type", "[float33]")
    return txt, IRError, [f"tiny.txt:{number}:", "layer 'conv'", "unknown dtype 'float33'"]


def constant_past_bin_end(folder):
    txt = write_tiny_ir(folder)
    bin_size = txt.with_suffix(".bin").stat().st_size
    number = edit_ir(txt, "conv", "weights_offset", str(bin_size - 8))
    return txt, IRError, [f"tiny.txt:{number}:", "layer 'conv'", "constant 'weights'",
                          f"offset {bin_size - 8} + size 288 passes the end of '{txt.with_suffix('.bin')}' "
                          f"({bin_size} bytes)"]


def constant_size_vs_shape(folder):
    txt = write_tiny_ir(folder)
    number = edit_ir(txt, "conv", "weights_size", "100")
    return txt, IRError, [f"tiny.txt:{number}:", "layer 'conv'", "constant 'weights'",
                          "size 100 bytes disagrees with shape [4, 3, 3, 2] of float32 (288 bytes)"]


def tensor_never_written(folder):
    txt = write_tiny_ir(folder)
    edit_ir(txt, "conv", "layer_bottom", "[ghost]")
    return txt, GraphError, ["tiny.txt", "layer 'conv' reads tensor 'ghost' that no layer writes"]


def tensor_written_twice(folder):
    txt = write_tiny_ir(folder)
    edit_ir(txt, "sig", "layer_top", "[conv]")
    return txt, GraphError, ["tiny.txt", "tensor 'conv' is written twice, by layers 'conv' and 'sig'"]


def list_lengths_disagree(folder):
    txt = write_tiny_ir(folder)
    number = edit_ir(txt, "conv", "layer_top_shape", "[[1,6,6,4],[1,6,6,4]]")
    return txt, IRError, [f"tiny.txt:{number}:", "layer 'conv'",
                          "'layer_top_shape' has 2 entries but 'layer_top' has 1"]


def cycle(folder):
    txt = write_tiny_ir(folder)
    edit_ir(txt, "conv", "layer_bottom", "[prob]")
    return txt, GraphError, ["tiny.txt", "the graph has a cycle", "conv", "sig", "prob"]


CLI_CASES = [missing_graph, missing_bin, unparsable_line, unknown_dtype, constant_past_bin_end,
             constant_size_vs_shape, tensor_never_written, tensor_written_twice, list_lengths_disagree, cycle]


@pytest.fixture(scope="module")
def cli_cases(request, tmp_path_factory):
    """Every selected case built and its CLI run started at once; tests wait for their own."""
    selected = {item.callspec.params["case"] for item in request.session.items
                if item.originalname == "test_error_names_culprit_in_reader_and_cli"}
    built = {}
    for make in (m for m in CLI_CASES if m.__name__ in selected):
        folder = tmp_path_factory.mktemp(make.__name__)
        txt, error, fragments = make(folder / "ir")
        cfg = write_cfg(folder / "opt.cfg", graph=txt.relative_to(folder), output_dir="out")
        built[make.__name__] = (txt, error, fragments, cfg, start_npuopt("--cfg", cfg, cwd=folder))
    return built


@pytest.mark.parametrize("case", [make.__name__ for make in CLI_CASES])
def test_error_names_culprit_in_reader_and_cli(cli_cases, case):
    txt, error, fragments, cfg, run = cli_cases[case]
    with pytest.raises(error) as info:
        read_graph(str(txt))
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert_one_line_error(run.result(), *fragments)
    assert_verbose_traceback("--cfg", cfg, fragment=fragments[-1])


def test_cycle_message_is_the_cycle(tmp_path):
    txt, _, _ = cycle(tmp_path)
    with pytest.raises(GraphError) as info:
        read_graph(str(txt))
    path = str(info.value).split("cycle: ", 1)[1].split(" -> ")
    assert path[0] == path[-1] and sorted(path[:-1]) == ["conv", "prob", "sig"]


def test_explicit_missing_bin_is_named(tiny_ir, tmp_path):
    with pytest.raises(IRError, match=r"weights file '.*other\.bin' not found \(needed by layer 'conv'"):
        read_graph(str(tiny_ir), str(tmp_path / "other.bin"))


# ---- every other malformation the reader must turn into a clear IRError/GraphError ----
# (layer, key, new raw value or None to delete, error class, fragments; "{line}" stands
# for "tiny.txt:N:", N the edited key's line)
EDITS = [
    ("conv", "weights_offset", "abc", IRError, ["{line}", "weights_offset 'abc' is not a non-negative integer"]),
    ("conv", "weights_offset", "-4", IRError, ["{line}", "weights_offset '-4' is not a non-negative integer"]),
    ("conv", "weights_offset", "0.5", IRError, ["{line}", "weights_offset '0.5' is not a non-negative integer"]),
    ("conv", "weights_size", "[288]", IRError, ["{line}", "weights_size '[288]' is not a non-negative integer"]),
    ("conv", "weights_shape", "8", IRError, ["{line}", "layer 'conv'", "weights_shape: '8' is not a shape"]),
    ("conv", "weights_shape", "[4,3,3,-2]", IRError, ["{line}", "weights_shape: '[4, 3, 3, -2]' is not a shape"]),
    ("conv", "weights_shape", "[4,3,3,2", IRError, ["{line}", "cannot parse value '[4,3,3,2': unclosed '['"]),
    ("conv", "weights_type", "float33", IRError, ["{line}", "layer 'conv'", "unknown dtype 'float33'"]),
    ("conv", "weights_type", None, IRError, ["layer 'conv'", "constant 'weights' lacks weights_type"]),
    ("conv", "weights_offset", None, IRError, ["layer 'conv'", "constant 'weights' lacks weights_offset"]),
    ("conv", "layer_top", None, IRError, ["layer 'conv'", "missing 'layer_top'"]),
    ("conv", "layer_bottom", None, IRError, ["layer 'conv'", "missing 'layer_bottom'"]),
    ("conv", "layer_top_shape", None, IRError, ["layer 'conv'", "missing 'layer_top_shape'"]),
    ("conv", "layer_top_type", None, IRError, ["layer 'conv'", "missing 'layer_top_type'"]),
    ("conv", "layer_type", None, IRError, ["layer 'conv'", "missing 'layer_type'"]),
    ("conv", "layer_name", None, IRError, ["tiny.txt:", "layer block lacks 'layer_name'"]),
    ("conv", "layer_name", "", IRError, ["{line}", "empty layer_name"]),
    ("conv", "layer_top_shape", "5", IRError, ["{line}", "'layer_top_shape' must be a list"]),
    ("conv", "layer_top_shape", "[[1,6,6,x]]", IRError, ["{line}", "layer_top_shape: '[1, 6, 6, 'x']' is not a shape"]),
    ("conv", "layer_top_shape", "[[1,6,6,4.0]]", IRError, ["{line}", "is not a shape"]),
    ("conv", "layer_top", "conv", IRError, ["{line}", "cannot parse 'layer_top'", "bracketed list"]),
    ("conv", "layer_top", "[conv,]", IRError, ["{line}", "cannot parse 'layer_top': empty name"]),
    ("conv", "layer_top", "[[conv]]", IRError, ["{line}", "cannot parse 'layer_top'", "flat list"]),
    ("conv", "layer_bottom_shape", "[[1,6,6,2],[1,6,6,2]]", IRError,
     ["{line}", "'layer_bottom_shape' has 2 entries but 'layer_bottom' has 1"]),
    ("conv", "layer_bottom_shape", "[5]", IRError, ["{line}", "layer_bottom_shape: '5' is not a shape"]),
    ("conv", "layer_bottom_shape", "7", IRError, ["{line}", "'layer_bottom_shape' must be a list"]),
    ("conv", "layer_bottom_shape", "[[1,6,6,3]]", GraphError,
     ["{line}", "layer_bottom_shape [1, 6, 6, 3] for tensor 'x' disagrees with its producer's "
      "layer_top_shape [1, 6, 6, 2]"]),
    ("conv", "layer_bottom_type", "[float33]", IRError, ["{line}", "unknown dtype 'float33'"]),
    ("conv", "layer_bottom_type", "[int8]", GraphError,
     ["{line}", "layer_bottom_type int8 for tensor 'x' disagrees with its producer's layer_top_type float32"]),
    ("conv", "layer_id", "one", IRError, ["{line}", "layer 'conv': layer_id 'one' is not an integer"]),
    ("conv", "kernel_x", "[1,,2]", IRError, ["{line}", "cannot parse value '[1,,2]': empty list item"]),
    ("prob", "layer_name", "sig", GraphError, ["tiny.txt", "two layers are named 'sig'"]),
    (None, "layer_number", "5", IRError, ["{line}", "layer_number=5 but the file has 4 layer blocks"]),
    (None, "layer_number", "four", IRError, ["{line}", "layer_number 'four' is not an integer"]),
    (None, "input_tensors", None, IRError, ["tiny.txt", "missing 'input_tensors'"]),
    (None, "input_tensors", "x", IRError, ["{line}", "cannot parse 'input_tensors'"]),
    (None, "output_tensors", "[nowhere]", GraphError, ["tensor 'nowhere' is not written by any layer"]),
]


@pytest.mark.parametrize("layer, key, value, error, fragments", EDITS,
                         ids=[f"{layer}.{key}={value}" for layer, key, value, *_ in EDITS])
def test_malformed_ir_is_a_clear_error(tiny_ir, layer, key, value, error, fragments):
    where = f"tiny.txt:{edit_ir(tiny_ir, layer, key, value)}:"
    with pytest.raises(error) as info:
        read_graph(str(tiny_ir))
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment.replace("{line}", where) in message


@pytest.mark.parametrize("key, value, expected", [
    ("layer_top_scale", "[abc]", "'layer_top_scale' entry 'abc' is not a number"),
    ("layer_top_scale", "[1.0,2.0]", "'layer_top_scale' has 2 entries but 'layer_top' has 1"),
    ("layer_top_zp", "[0.5]", "'layer_top_zp' entry '0.5' is not an integer"),
    ("layer_top_range", "[[1.0]]", "'layer_top_range' entry '[1.0]' is not a [min,max] pair of numbers"),
])
def test_bad_top_quantization_is_a_clear_error(tiny_ir, key, value, expected):
    number = insert_after(tiny_ir, "sig", "layer_top_type", f"{key}={value}")
    with pytest.raises(IRError) as info:
        read_graph(str(tiny_ir))
    assert f"tiny.txt:{number}: layer 'sig': {expected}" in str(info.value)


def test_key_twice_in_a_block(tiny_ir):
    number = insert_after(tiny_ir, "sig", "method", "method=TANH")
    with pytest.raises(IRError, match=rf"tiny\.txt:{number}: key 'method' appears twice in one block"):
        read_graph(str(tiny_ir))


def test_block_without_layer_keys_after_the_layers(tiny_ir):
    text = tiny_ir.read_text()
    tiny_ir.write_text(text.rstrip("\n") + "\n\nstray=1\n")
    number = len(tiny_ir.read_text().splitlines())
    with pytest.raises(IRError, match=rf"tiny\.txt:{number}: block has no layer_name/layer_type"):
        read_graph(str(tiny_ir))


def test_graph_file_not_utf8_names_the_line(tiny_ir):
    number = line_of(tiny_ir, "sig", "method")
    replace_line(tiny_ir, number, "method=SIGMOID")
    tiny_ir.write_bytes(tiny_ir.read_bytes().replace(b"method=SIGMOID", b"method=\xff\xfe"))
    with pytest.raises(IRError, match=rf"tiny\.txt:{number}: not UTF-8 text \(byte 0xff\)"):
        read_graph(str(tiny_ir))


def test_empty_graph_file_and_folder(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n# only a comment\n")
    with pytest.raises(IRError, match=r"empty\.txt: the graph file is empty"):
        read_graph(str(empty))
    with pytest.raises(IRError, match=r"graph file '.*' is a folder, not a file"):
        read_graph(str(tmp_path))


def test_utf8_bom_is_not_part_of_the_first_key(tiny_ir):
    tiny_ir.write_bytes(b"\xef\xbb\xbf" + tiny_ir.read_bytes())
    graph = read_graph(str(tiny_ir))
    assert graph.name == "tiny" and dict(graph.header) == {}


def test_every_message_is_an_npuopt_error_not_a_bare_exception(tiny_ir):
    """A sweep: every key of every block, set to junk, gives an NpuoptError or still loads."""
    blocks = [None, "x", "conv", "sig", "prob"]
    original = tiny_ir.read_text()
    for layer in blocks:
        text = original.split("\n\n")[blocks.index(layer)]
        for key in [line.split("=", 1)[0] for line in text.splitlines()]:
            for junk in ("", "[", "]", "[[1],2]", "-1", "1.5", "true", "[a,b]", "[[]]"):
                tiny_ir.write_text(original)
                edit_ir(tiny_ir, layer, key, junk)
                try:
                    read_graph(str(tiny_ir))
                except NpuoptError as e:
                    assert "\n" not in str(e)
