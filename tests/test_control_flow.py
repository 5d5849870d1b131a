"""Control flow (If, Loop, Dummy) and the IR's subgraph sections, on the op tests the
parser wrote (op_tests/parser_if_*, parser_loop*): the sections read into the layers
that run them and written back as they were; the layers kept in float with their
subgraphs in the cfg's float mode, as the tool chain keeps them; and bad IRs (a missing
section, counts that do not fit the sections) stopping `npuopt` and `npuopt-run` with
one error line naming the layer and the param, nothing written."""
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import npuopt.ops  # noqa: F401  (registers the forwards)
from npuopt.dtype import Dtype
from npuopt.errors import IRError
from npuopt.ir import read_graph, write_graph
from npuopt.ir import sections as ir_sections
from npuopt_run.cli import main as refrun_main

from conftest import REPO, run_in_process

OP_TESTS = REPO / "op_tests"


def case_copy(tmp_path: Path, case: str) -> Path:
    """The op test's folder copied (its work/ left out); returns the copy's graph file."""
    folder = tmp_path / case
    shutil.copytree(OP_TESTS / case, folder, ignore=shutil.ignore_patterns("work"))
    return folder / f"{case}.txt"


def sections(txt: Path):
    return [line.split("=", 1)[1] for line in txt.read_text().splitlines() if line.startswith("subgraph_name=")]


def test_sections_belong_to_the_layers_that_run_them():
    graph = read_graph(str(OP_TESTS / "parser_if_nested" / "parser_if_nested.txt"))
    outer = graph.node("y")
    then_g, else_g = outer.get_sub_graph("then_branch"), outer.get_sub_graph("else_branch")
    inner = then_g.node("t_out")  # an If in the then branch, its branches nested sections
    assert inner.type == "If" and set(inner.subgraphs) == {"then_branch", "else_branch"}
    assert list(graph.subgraph_map) == [then_g.name, inner.subgraphs["then_branch"].name,
                                        inner.subgraphs["else_branch"].name, else_g.name]
    assert [t.name for t in then_g.input_tensors] == ["in0_0"]  # its own names: the model's in0 too
    assert then_g.node("in0") is not graph.node("in0")


@pytest.mark.parametrize("case", ["parser_if_nested", "parser_loop_while"])
def test_a_float_ir_is_written_back_as_read(tmp_path, case):
    graph = read_graph(str(OP_TESTS / case / f"{case}.txt"))
    write_graph(graph, str(tmp_path / "a.txt"))
    again = read_graph(str(tmp_path / "a.txt"))
    write_graph(again, str(tmp_path / "b.txt"))
    assert sections(tmp_path / "a.txt") == list(graph.subgraph_map)
    assert (tmp_path / "a.txt").read_text().replace("a.bin", "b.bin") == (tmp_path / "b.txt").read_text()
    x = torch.from_numpy(np.load(OP_TESTS / case / "in0.npy"))
    for mine, back in zip(graph.forward([x]), again.forward([x])):
        assert torch.equal(mine, back)


def test_loop_of_no_iteration_gives_its_carried_inputs_and_empty_scans():
    graph = read_graph(str(OP_TESTS / "parser_loop" / "parser_loop.txt"))
    loop = graph.node("v_final")
    x = torch.rand(1, 4, 6)
    for t, value in zip(loop.inputs, [torch.tensor(0, dtype=torch.int32), torch.tensor(1, dtype=torch.uint8), x, x]):
        t.betensor = value
    carried, scans = loop.forward()
    assert torch.equal(carried, x) and scans.shape == (0, 4, 6)


def quantize(tmp_path: Path, case: str, *sets: str):
    txt = case_copy(tmp_path, case)
    args = [a for s in (f"output_dir={tmp_path / 'out'}",) + sets for a in ("--set", s)]
    result = run_in_process("--cfg", txt.parent / "opt.cfg", *args)
    return result, tmp_path / "out" / f"{case}_o.txt"


@pytest.mark.parametrize("trigger, dtype", [("disable", Dtype.FP16), ("bfloat16_preferred", Dtype.BFP16),
                                            ("disable & <[If]:float32_preferred>", Dtype.FP32)])
def test_control_flow_stays_in_the_cfgs_float_mode_with_its_subgraphs(tmp_path, trigger, dtype):
    """As the tool chain: If and its branches in float, in the cfg's float mode
    (float16 where it is disable, its own where the cfg names one), their integer
    tensors their own values."""
    result, written = quantize(tmp_path, "parser_if_nested", f"trigger_float_op={trigger}")
    assert result.exit_code == 0, result.output
    graph = read_graph(str(written))
    layer = graph.node("y")
    assert not layer.quantized and layer.outputs[0].dtype == dtype
    assert graph.node("out0").quantized == trigger.startswith("disable")  # the Add after it: through a Quantize
    inner = graph.subgraph_map["y_then_branch_subgraph"]
    assert not any(n.quantized for sg in graph.subgraph_map.values() for n in sg.nodes)
    assert inner.node("t_out").outputs[0].dtype == dtype and inner.node("half").constants["weights"].dtype == dtype
    cond = inner.node("inner_cond").outputs[0]
    assert cond.dtype == Dtype.UINT8 and (cond.scale, cond.zerop) == (1.0, 0)


def test_a_cast_kept_in_float16_casts_to_float16(tmp_path):
    result, written = quantize(tmp_path, "parser_loop")
    assert result.exit_code == 0, result.output
    body = read_graph(str(written)).subgraph_map["v_final_body_subgraph"]
    assert body.node("iterf").params["to_dtype"] == "float16"


# ---- bad IRs ------------------------------------------------------------------------------
def _replace(old: str, new: str, count: int = 1):
    def edit(txt: Path):
        text = txt.read_text()
        assert old in text, old
        txt.write_text(text.replace(old, new, count))
    return edit


def _drop_body_output(txt: Path):
    text = txt.read_text()
    txt.write_text(text.replace("output_tensors=[cond_out_0,v_out_0,scan_post_dummy_0]",
                                "output_tensors=[cond_out_0,v_out_0]"))


BAD_IRS = [
    ("parser_if_then", _replace("then_branch=y_then_branch_subgraph", "then_branch=y_then_branch"),
     ["layer 'y' (If)", "then_branch 'y_then_branch'", "names no subgraph section"]),
    ("parser_if_then", _replace("then_branch_inputs_num=1", "then_branch_inputs_num=2"),
     ["layer 'y' (If)", "then_branch_inputs_num 2", "take 4 inputs", "gives 3"]),
    ("parser_if_then", _replace("else_branch_inputs_num=1", "else_branch_inputs_num=0"),
     ["layer 'y' (If)", "else_branch_inputs_num 0"]),
    ("parser_if_nested", _replace("output_tensors=[it_0]", "output_tensors=[it_0,w_0]"),
     ["layer 't_out' (If)", "then_branch 't_out_then_branch_subgraph' has 2 outputs"]),
    ("parser_loop", _drop_body_output,
     ["layer 'v_final' (Loop)", "body 'v_final_body_subgraph' has 2 outputs", "scan_outputs_num give 3"]),
    ("parser_loop", _replace("dependency_inputs_num=1", "dependency_inputs_num=3"),
     ["layer 'v_final' (Loop)", "dependency_inputs_num 3"]),
    ("parser_loop", _replace("scan_outputs_num=1", "scan_outputs_num=-1"),
     ["layer 'v_final' (Loop)", "scan_outputs_num must be at least 0"]),
    ("parser_if_nested", _replace("subgraph_name=t_out_else_branch_subgraph", "subgraph_name=y_then_branch_subgraph"),
     ["subgraph section is named 'y_then_branch_subgraph'"]),
    ("parser_if_nested", _replace("else_branch=t_out_else_branch_subgraph", "else_branch=y_then_branch_subgraph"),
     ["layer 't_out' (If)", "else_branch 'y_then_branch_subgraph' runs itself"]),
    ("parser_loop_while", _replace("layer_bottom=[vmax_post_reshape_0,cond_in_0,iter_0,n_in_0]\n"
                                   "layer_bottom_shape=[[],[],[],[1]]\nlayer_bottom_type=[float32,uint8,int32,float32]",
                                   "layer_bottom=[vmax_post_reshape_0,cond_in_0,iter_0]\n"
                                   "layer_bottom_shape=[[],[],[]]\nlayer_bottom_type=[float32,uint8,int32]"),
     ["layer 'vmax_post_dummy' (Dummy)", "3 inputs for 4 tops"]),
]


@pytest.mark.parametrize("case, edit, fragments", BAD_IRS, ids=[f"{c}-{f[-1]}"[:60] for c, _, f in BAD_IRS])
def test_a_bad_ir_is_one_line_naming_the_layer_and_the_param(tmp_path, case, edit, fragments):
    txt = case_copy(tmp_path, case)
    edit(txt)
    before = sorted(os.listdir(txt.parent))
    result = run_in_process("--cfg", txt.parent / "opt.cfg", "--set", f"output_dir={tmp_path / 'out'}")
    report = f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.exit_code == 1 and "Traceback" not in result.stdout + result.stderr, report
    errors = [line for line in result.stderr.splitlines() if "npuopt: error:" in line]
    assert len(errors) == 1 and errors[0] == result.stderr.rstrip("\n").split("\n")[-1], report
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in the error line\n{report}"
    assert sorted(os.listdir(txt.parent)) == before and not (tmp_path / "out").exists(), "something was written"


def test_a_section_no_layer_runs_is_left_out_with_a_warning(tmp_path, monkeypatch):
    txt = case_copy(tmp_path, "parser_if_then")
    text = txt.read_text()
    start = text.index("subgraph_name=y_else_branch_subgraph")
    end = text.find("subgraph_name=", start + 1)
    extra = text[start:end if end > 0 else None].replace("y_else_branch_subgraph", "unused")
    txt.write_text(text.rstrip("\n") + "\n\n\n" + extra)
    warned = []
    monkeypatch.setattr(ir_sections, "OPT_WARN", warned.append)
    graph = read_graph(str(txt))
    assert "unused" not in graph.subgraph_map
    assert len(warned) == 1 and "'unused' are run by no layer" in warned[0]


def test_a_subgraph_header_needs_its_tensors(tmp_path):
    txt = case_copy(tmp_path, "parser_if_then")
    _replace("input_tensors=[in0_0]\noutput_tensors=[t0_0]", "output_tensors=[t0_0]")(txt)
    with pytest.raises(IRError, match="subgraph 'y_then_branch_subgraph': missing 'input_tensors'"):
        read_graph(str(txt))


def test_npuopt_run_names_the_layer_and_the_param(tmp_path, capsys):
    """npuopt-run, on a quantized IR whose If names a section it does not have."""
    result, written = quantize(tmp_path, "parser_if_then")
    assert result.exit_code == 0, result.output
    _replace("then_branch=y_then_branch_subgraph", "then_branch=nowhere")(written)
    with pytest.raises(SystemExit) as e:
        refrun_main([str(written), "--input", str(OP_TESTS / "parser_if_then" / "in0.npy"), "-o",
                     str(tmp_path / "ref.npz")])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layer 'y' (If)" in err[0] and "then_branch 'nowhere'" in err[0], err
    assert not (tmp_path / "ref.npz").exists()
