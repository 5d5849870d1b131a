"""unify_scales_for_concat and unify_scales_for_multi_inputs_operators (issue 12's
shared parameters as plan entries): the layers that decide a Concat's branch grids get
the Concat's output range planned, through layers that pass their input's grid on (MAX
pooling), so the quantized Concat copies integers and writes no rescale; Concat layers
chained through another are unified together; a Concat whose branches differ in dtype,
or whose branch has no deciding layer within max_depth, is left alone, as in the
Compass Optimizer. The generalized field does the same for any listed layer type,
with the unified scale the branches' largest, smallest or mean, or the layer's output."""
import numpy as np
import pytest
import torch

from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder

from conftest import output_mse, run_cfg

C = 4


def conv(b, name, src, act, gen, k=1, scale=0.4):
    b.layer("Convolution", name, [src], dict(kernel_x=k, kernel_y=k, pad_left=k // 2, pad_right=k // 2,
                                             pad_top=k // 2, pad_bottom=k // 2, num_output=C, with_activation=act),
            {"weights": torch.randn(C, k, k, C, generator=gen) * scale, "biases": torch.randn(C, generator=gen) * 0.1})


def pool(b, name, src):
    b.layer("Pooling", name, [src], dict(method="MAX", kernel_y=3, kernel_x=3, stride_y=1, stride_x=1, pad_top=1,
                                         pad_bottom=1, pad_left=1, pad_right=1, ceil_mode=False,
                                         count_include_pad=False))


def model(path, second_branch_act="RELU", chained=False, pools=1, join="Concat"):
    """x -> conv 'stem' (RELU) -> conv 'a' (RELU) and conv 'b' -> MAX pooling 'b_pool'
    (`pools` of them, the last so named), Concat 'cat' of them (or with join="Eltwise",
    their sum 'cat') -> conv 'head'; with `chained`, also 'cat' -> MAX pooling
    'cat_pool' and conv 'c' (RELU) into Concat 'cat2' before the head."""
    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder("branches")
    b.input("x", [1, 6, 6, C])
    conv(b, "stem", "x", "RELU", gen, k=3)
    conv(b, "a", "stem", "RELU", gen)
    conv(b, "b", "stem", second_branch_act, gen, scale=2.0)  # a range several times a's
    src = "b"
    for i in range(pools - 1):
        pool(b, f"b_pool{i}", src)
        src = f"b_pool{i}"
    pool(b, "b_pool", src)
    b.layer(join, "cat", ["a", "b_pool"], dict(axis=3) if join == "Concat" else dict(method="ADD"))
    last = "cat"
    if chained:
        pool(b, "cat_pool", "cat")
        b.layer("Convolution", "c", ["stem"], dict(kernel_x=1, kernel_y=1, num_output=2 * C, with_activation="RELU"),
                {"weights": torch.randn(2 * C, 1, 1, C, generator=gen), "biases": torch.zeros(2 * C)})
        b.layer("Concat", "cat2", ["cat_pool", "c"], dict(axis=3))
        last = "cat2"
    b.layer("Convolution", "head", [last], dict(kernel_x=1, kernel_y=1, num_output=3),
            {"weights": torch.randn(3, 1, 1, 4 * C if chained else C if join == "Eltwise" else 2 * C,
                                    generator=gen) * 0.3,
             "biases": torch.zeros(3)})
    write_graph(b.build(["head"]), str(path / "branches.txt"))
    np.save(path / "data.npy", torch.randn(32, 6, 6, C, generator=gen).numpy())


def run(path, unify, **fields):
    name = f"run{len(list(path.glob('*.cfg')))}"  # one cfg and output folder per run
    return run_cfg(path / f"{name}.cfg", **{
        "graph": "branches.txt", "model_name": "branches", "output_dir": f"out_{name}", "dataset": "NumpyDataset",
        "calibration_data": "data.npy", "calibration_batch_size": "8", "unify_scales_for_concat": unify, **fields})


def rescales(master):
    """The Concat layers of the written IR that rescale their branches."""
    ir = read_graph(master.report["quantized_ir"])
    return sorted(n.name for n in ir.nodes if n.type == "Concat" and "scale_value" in n.params)


def output_error(master, path):
    return output_mse(master, path / "branches.txt", torch.from_numpy(np.load(path / "data.npy")))[0]


def test_the_branches_share_the_concats_grid_and_it_copies(tmp_path, caplog):
    model(tmp_path)
    plain = run(tmp_path, "false")
    assert rescales(plain) == ["cat"]
    with caplog.at_level("INFO", logger="npuopt"):
        unified = run(tmp_path, "true")
    assert "unify_scales_for_concat: the input branches of 1 of 1 layers planned to one grid" in caplog.text
    assert rescales(unified) == []
    q = unified.qgraph
    grids = {name: (q.tensor(name).scale, q.tensor(name).zerop, q.tensor(name).dtype) for name in ("a", "b_pool", "cat")}
    assert len(set(grids.values())) == 1, grids
    assert q.tensor("cat").scale == plain.qgraph.tensor("cat").scale  # the Concat's own grid, given to both branches
    assert unified.graph.tensor("b").planned_range is not None       # on the layer that decides the grid ...
    assert unified.graph.tensor("b_pool").planned_range is None     # ... not on the pooling that passes it on
    assert output_error(unified, tmp_path) < 1.5 * output_error(plain, tmp_path)  # measured 0.0220 against 0.0223


def test_concats_chained_through_another_are_unified_together(tmp_path):
    model(tmp_path, chained=True)
    assert rescales(run(tmp_path, "false")) == ["cat", "cat2"]
    unified = run(tmp_path, "true")
    assert rescales(unified) == []
    assert len({unified.qgraph.tensor(n).scale for n in ("a", "b_pool", "cat", "c", "cat2")}) == 1


def test_branches_of_different_dtypes_are_left_alone(tmp_path, caplog):
    model(tmp_path, second_branch_act="NONE")  # 'b' signed, 'a' unsigned
    with caplog.at_level("INFO", logger="npuopt"):
        unified = run(tmp_path, "true")
    assert "the input branches of 0 of 1 layers" in caplog.text
    assert rescales(unified) == ["cat"]


@pytest.mark.parametrize("depth, rescaled", [(1, ["cat"]), (2, [])])
def test_max_depth_bounds_the_search(tmp_path, depth, rescaled):
    """'b' is two layers back from the Concat's branch 'b_pool' (two poolings)."""
    model(tmp_path, pools=2)
    assert rescales(run(tmp_path, "true", unify_scales_for_concat_max_depth=str(depth))) == rescaled


MULTI = "unify_scales_for_multi_inputs_operators"


@pytest.mark.parametrize("method", ["max", "min", "avg", "out"])
def test_multi_inputs_operators_give_eltwise_branches_the_chosen_scale(tmp_path, caplog, method):
    model(tmp_path, join="Eltwise")
    plain = run(tmp_path, "false").qgraph
    branch_scales = [plain.tensor(n).scale for n in ("a", "b_pool")]
    assert branch_scales[0] > 2 * branch_scales[1]  # 'b' ranges several times wider
    with caplog.at_level("INFO", logger="npuopt"):
        q = run(tmp_path, "false", **{MULTI: f"[(Eltwise, 20, 1.05, {method})]"}).qgraph
    assert f"{MULTI}: the input branches of 1 of 1 layers planned to one grid" in caplog.text
    a, b = q.tensor("a"), q.tensor("b_pool")
    assert (a.scale, a.zerop, a.dtype) == (b.scale, b.zerop, b.dtype)
    want = {"max": max(branch_scales), "min": min(branch_scales),
            "avg": sum(branch_scales) / 2, "out": plain.tensor("cat").scale}[method]
    assert a.scale == pytest.approx(want, rel=1e-5)


def test_multi_inputs_operators_on_concat_copy_and_skip_per_layer(tmp_path):
    model(tmp_path)
    assert rescales(run(tmp_path, "false", **{MULTI: "[(Concat, 0, 1.0, min)]"})) == []
    assert rescales(run(tmp_path, "false", **{MULTI: "[(Concat, 0, 1.0, min)] & <{cat}:[(Concat, 0, 1.0, skip)]>"})) \
        == ["cat"]


def test_multi_inputs_operators_warn_about_types_the_graph_lacks(tmp_path, caplog):
    model(tmp_path)
    with caplog.at_level("WARNING", logger="npuopt"):
        run(tmp_path, "false", **{MULTI: "[(ScatterND, 20, 1.05, min)]"})
    assert f"{MULTI}: the graph has no layer of type(s) scatternd" in caplog.text


def test_a_kv_cache_concat_gives_its_cache_input_the_other_inputs_grid():
    """unify_scales_for_kvc_concat: Concat(cache Input, FullyConnected(x)): the cache input
    is quantized on the FullyConnected's output grid (its own range is 100 times smaller),
    so the Concat copies both; a Concat of two computed inputs is left alone."""
    from npuopt.ir.builder import GraphBuilder
    from npuopt.quant.calibration import Calibrator, attach_statistics
    from npuopt.quant.quantizer import build_quantized_graph, float_layers
    from npuopt.quant.settings import QuantSettings
    from npuopt.quant.unify_scales import kv_cache_inputs, unify_kv_cache_concats

    class Cfg:
        def of(self, field, node):
            return True
    b = GraphBuilder("kvc")
    cache, x = b.input("cache", [1, 3, 8]), b.input("x", [1, 1, 8])
    fc = b.layer("FullyConnected", "fc", [x], dict(num_output=8, with_activation="NONE"),
                 {"weights": torch.randn(8, 8) * 3, "biases": torch.zeros(8)})
    out = b.layer("Concat", "kv", [cache] + fc, dict(axis=1))
    graph = b.build(out)
    graph.mark_integer_tensors()
    data = [(torch.randn(2, 3, 8) * 0.05, torch.randn(2, 1, 8)) for _ in range(3)]
    attach_statistics(graph, Calibrator(graph, 512, 0.9).run([list(d) for d in data]))
    settings = {n.name: QuantSettings(calibration_strategy_for_activation="extrema") for n in graph.nodes}
    for node in graph.nodes:   # as the run's plan sets them
        node.attrs["qsettings"] = settings[node.name]
    assert [t.name for t in kv_cache_inputs(graph, graph.node("kv"))] == ["cache"]
    assert unify_kv_cache_concats(Cfg(), graph) == ["cache"]
    qg, _ = build_quantized_graph(graph, settings, float_layers(graph, settings))
    cache_t, fc_t = qg.node("kv").inputs
    assert (cache_t.scale, cache_t.zerop, cache_t.dtype) == (fc_t.scale, fc_t.zerop, fc_t.dtype)
    assert kv_cache_inputs(graph, graph.node("fc")) == []
