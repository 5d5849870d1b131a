"""Issue 12: the global calibration methods on small models. The ones that choose
weight grids and roundings (adaround, adaquant_zy, gptq_zy), with 4-bit weights:
each lowers the quantized output's error against rounding to nearest on the
calibrated grid, keeps its integers on the grid, and a cfg that names it runs end to
end to an IR that reads back. GPTQ's blocked rounding (dense or low-rank H) chooses
the integers of the paper's column-by-column algorithm (issue 23). Equalization keeps
the float function and lowers the error of per-tensor weights; bias correction lowers
the error of per-tensor weights."""
import types

import numpy as np
import pytest
import torch

from npuopt.errors import ConfigError
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.global_calibration import _grams, _layers, adaquant, adaround, gptq
from npuopt.quant.tensors import WeightGrid
from npuopt.quant.weight_plans import biases_of

from conftest import output_mse, run_cfg

FC = types.SimpleNamespace(type="FullyConnected")  # the layer a Problem built by hand stands for


def small_model(path):
    """Conv 3x3 (RELU6) -> DepthwiseConv 3x3 (RELU6) -> Conv 1x1 -> FullyConnected."""
    gen = torch.Generator().manual_seed(0)
    b = GraphBuilder("small")
    b.input("x", [1, 6, 6, 3])
    b.layer("Convolution", "conv", ["x"], dict(kernel_x=3, kernel_y=3, pad_left=1, pad_right=1, pad_top=1,
                                                pad_bottom=1, num_output=8, with_activation="RELU6"),
            {"weights": torch.randn(8, 3, 3, 3, generator=gen) * 0.4, "biases": torch.randn(8, generator=gen) * 0.1})
    b.layer("DepthwiseConv", "dw", ["conv"], dict(kernel_x=3, kernel_y=3, stride_x=2, stride_y=2, pad_right=1,
                                                  pad_bottom=1, group=8, num_output=8, with_activation="RELU6"),
            {"weights": torch.randn(8, 3, 3, 1, generator=gen) * 0.4, "biases": torch.randn(8, generator=gen) * 0.1})
    b.layer("Convolution", "project", ["dw"], dict(kernel_x=1, kernel_y=1, num_output=12),
            {"weights": torch.randn(12, 1, 1, 8, generator=gen) * 0.4, "biases": torch.randn(12, generator=gen) * 0.1})
    b.layer("Reshape", "flat", ["project"], dict(shape=[1, 108]))
    b.layer("FullyConnected", "fc", ["flat"], dict(num_output=10),
            {"weights": torch.randn(10, 108, generator=gen) * 0.1, "biases": torch.randn(10, generator=gen) * 0.1})
    write_graph(b.build(["fc"]), str(path / "small.txt"))
    np.save(path / "data.npy", torch.randn(64, 6, 6, 3, generator=gen).numpy())


def run(path, method, **fields):
    """The OptMaster of one run with 4-bit per-channel weights and `method`."""
    name = method.split("[")[0]
    return run_cfg(path / f"{name}.cfg", **{
        "graph": "small.txt", "model_name": "small", "output_dir": f"out_{name}", "dataset": "NumpyDataset",
        "calibration_data": "data.npy", "calibration_batch_size": "16", "weight_bits": "4",
        "quantize_method_for_weight": "per_channel_symmetric_restricted_range",
        "quantize_method_for_activation": "per_tensor_asymmetric", "global_calibration": method, **fields})


def output_error(master, path):
    """Mean squared error of the quantized output against the float model's (as read,
    before any method edited its biases) on the calibration data."""
    return output_mse(master, path / "small.txt", torch.from_numpy(np.load(path / "data.npy")))[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("rounding")
    small_model(path)
    return path, output_error(run(path, "none"), path)


@pytest.mark.parametrize("method", ["adaround[0,200]", "gptq_zy", "gptq_zy[1]", "adaquant_zy[0,200]"])
def test_a_method_lowers_the_4bit_output_error(model, method):
    """gptq_zy[1]: one batch of 16 samples, fewer than half of fc's 108 inputs (H's low-rank form)."""
    path, nearest = model
    master = run(path, method)
    error = output_error(master, path)
    assert error < 0.8 * nearest, (method, error, nearest)
    for node in master.qgraph.nodes:
        if node.type in _layers.TUNED_TYPES:
            c = node.get_constant("weights")
            assert c.qmin == -7 and c.qmax == 7
            assert int(c.betensor.min()) >= c.qmin and int(c.betensor.max()) <= c.qmax
            attrs = master.graph.node(node.name).attrs
            assert "planned_integers" in attrs
            assert ("planned_ranges" in attrs) == (not method.startswith("gptq_zy"))  # AdaRound/AdaQuant choose it


def textbook_gptq(problem, act_order: bool) -> torch.Tensor:
    """GPTQ as the paper's Algorithm 1 states it, one column at a time in float64: the
    float weights of least error T = (C + damp W)(H + damp I)^-1, each column rounded in
    turn and its error spread over the columns after it through the upper Cholesky factor
    of (H + damp I)^-1."""
    low = problem.low_rank
    h = low.double() @ low.double().transpose(1, 2) if low is not None else problem.H.double()
    g, rows, k = problem.weights.shape
    order = torch.argsort(h.diagonal(dim1=1, dim2=2), dim=1, descending=True, stable=True) if act_order else \
        torch.arange(k).expand(g, k)
    h = h + problem.damp.double() * torch.eye(k, dtype=torch.float64)
    w = torch.linalg.solve(h, (problem.C + problem.damp * problem.weights).double().transpose(1, 2)).transpose(1, 2)
    w = w.gather(2, order.unsqueeze(1).expand(g, rows, k))
    h = h.gather(1, order.unsqueeze(2).expand(g, k, k)).gather(2, order.unsqueeze(1).expand(g, k, k))
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    scale, zp = (v[..., 0].double() if isinstance(v, torch.Tensor) else v for v in problem.grid_values())
    q = torch.zeros_like(w)
    for i in range(k):
        q[..., i] = torch.round(w[..., i] * scale - zp).clamp(problem.qmin, problem.qmax)
        error = (w[..., i] - (q[..., i] + zp) / scale) / u[:, i, i].unsqueeze(1)
        w[..., i:] -= error.unsqueeze(2) * u[:, i, i:].unsqueeze(1)
    return q.gather(2, torch.argsort(order, dim=1).unsqueeze(1).expand(g, rows, k)).to(torch.float32)


@pytest.mark.parametrize("groups, rows, k, patches", [(1, 6, 40, 60), (3, 5, 37, 12), (1, 4, 300, 30)])
@pytest.mark.parametrize("per_row", [False, True])
def test_gptq_rounds_as_the_paper_s_column_by_column_algorithm(groups, rows, k, patches, per_row):
    """Issue 23: the blocked rounding from H's Cholesky factor (dense, or by blocks from the
    patches when they are fewer than half the inputs) chooses the same integers as the
    paper's algorithm, with and without act order, whatever the block size."""
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(groups, patches, k, generator=gen) + 0.5           # inputs with a mean, as after a ReLU
    low = x.transpose(1, 2) / patches ** 0.5                             # H = low low^T = E[x x^T]
    w = torch.randn(groups, rows, k, generator=gen) * 0.3
    h = low @ low.transpose(1, 2)
    c = w @ h + 0.01 * torch.randn(groups, rows, k, generator=gen)     # the quantized input differs a little
    damp = 0.01 * h.diagonal(dim1=1, dim2=2).mean(1).reshape(groups, 1, 1)
    scale, zp = (torch.rand(groups, rows, 1, generator=gen) * 10 + 5,
                 torch.randint(-3, 4, (groups, rows, 1), generator=gen).float()) if per_row else (9.0, 0.0)
    forms = [(h, None)] + ([(None, low)] if 2 * patches < k else [])
    for dense, factor in forms:
        grid = WeightGrid(*(v.reshape(-1) if per_row else v for v in (scale, zp)), -7, 7, 4, 0, (groups * rows, k))
        problem = _layers.Problem(FC, w, dense, factor, c, damp, grid, None, None)
        for act_order in (True, False):
            want = textbook_gptq(problem, act_order)
            for block in (1, 8, 128):
                got = gptq.round_columns(problem, act_order, block)
                assert torch.equal(got, want), (dense is None, act_order, block, int((got != want).sum()))
    nearest = torch.round(w * scale - zp).clamp(-7, 7)
    assert not torch.equal(want, nearest)  # the problem is one where GPTQ's feedback changes integers


ROUNDINGS = {  # a method's rounding of one Problem
    "gptq": lambda problem: gptq.round_columns(problem, True, 8),
    "adaquant": lambda problem: adaquant.learn_weights(problem, 40, 0.05),
    "adaround": lambda problem: adaround.learn_rounding(problem, 40, 0.05, 0.01, 20, 2, 0.2),
}


@pytest.mark.parametrize("method", sorted(ROUNDINGS))
@pytest.mark.parametrize("grid", ["tensor", "row", "block"])
def test_the_methods_round_a_few_rows_at_a_time_as_all_at_once(monkeypatch, grid, method):
    """The methods take ROWS_AT_ONCE weight rows at a time (Problem.parts: GPTQ's float64
    copies, AdaQuant's and AdaRound's Adam moments of a decoder's head): the same integers
    as all rows together, from H dense and from its patches, C whole or kept as factors
    (GPTQ's exactly; the learned ones up to float32's last bits in W H, whose sums BLAS
    orders by the rows it is given: an integer in a hundred may go the other way)."""
    gen = torch.Generator().manual_seed(5)
    groups, rows, k, patches = 2, 7, 24, 8
    x = torch.randn(groups, patches, k, generator=gen)
    low = x.transpose(1, 2) / patches ** 0.5
    h = low @ low.transpose(1, 2)
    w = torch.randn(groups, rows, k, generator=gen) * 0.3
    c = w @ h + 0.01 * torch.randn(groups, rows, k, generator=gen)
    damp = 0.01 * h.diagonal(dim1=1, dim2=2).mean(1).reshape(groups, 1, 1)
    block = 5 if grid == "block" else None  # 24 columns: four blocks of 5 and one of 4
    values = {"tensor": 0, "row": groups * rows, "block": groups * rows * 5}[grid]
    scale, zp = (torch.rand(values, generator=gen) * 10 + 5,
                 torch.randint(-3, 4, (values,), generator=gen).float()) if values else (9.0, 0.0)
    weight_grid = WeightGrid(scale, zp, -7, 7, 4, 0, (groups * rows, k), block)
    for dense, factor, cross in [(h, None, c), (None, low, c), (h, None, _grams.RowsTimes(w, h.double()))]:
        problem = _layers.Problem(FC, w, dense, factor, cross, damp, weight_grid, None, None)
        if block:  # the values per weight, made for a few rows, are those rows' of the whole
            whole_scale = weight_grid.along(scale).reshape(groups, rows, k)
            assert torch.equal(problem.grid_values()[0], whole_scale)
            assert torch.equal(problem.grid_values(2, 5)[0], whole_scale[:, 2:5])
        whole = ROUNDINGS[method](problem)
        assert not torch.equal(whole, problem.to_grid(w * problem.grid_values()[0] - problem.grid_values()[1]))
        monkeypatch.setattr(_layers, "ROWS_AT_ONCE", 3)
        parts = ROUNDINGS[method](problem)
        monkeypatch.undo()
        differ = parts != whole
        if method == "gptq":
            assert not differ.any(), (dense is None, type(cross))
        assert float(differ.float().mean()) <= 0.01 and float((parts - whole).abs().max()) <= 1, \
            (dense is None, type(cross), int(differ.sum()))


def test_adaquant_s_written_out_step_gives_autograd_s_integers():
    """AdaQuant's step (adaquant._learn_part) is the straight-through estimator written out:
    the integers of the same Adam on u with autograd through u + (round(u) - u).detach(),
    clamped to the grid (torch's clamp passes no gradient at its bounds), where weights
    sit at the grid's ends and learning moves many off nearest rounding."""
    gen = torch.Generator().manual_seed(8)
    rows, k, patches = 12, 48, 200
    x = torch.randn(1, patches, k, generator=gen) @ (torch.eye(k) + 0.3 * torch.randn(k, k, generator=gen))
    h = x.transpose(1, 2) @ x / patches
    w = torch.randn(1, rows, k, generator=gen) * 0.1
    c = w @ h + 0.01 * torch.randn(1, rows, k, generator=gen)
    scale = 7 / w.abs().amax(-1).reshape(-1)                      # each row's largest weight on an end
    grid = WeightGrid(scale, torch.zeros_like(scale), -7, 7, 4, 0, (rows, k))
    problem = _layers.Problem(FC, w, h, None, c, torch.full((1, 1, 1), 0.01), grid, None, None)
    part, = problem.parts()
    u = part.units(w).requires_grad_(True)
    optimizer = torch.optim.Adam([u], lr=0.01)
    for _ in range(60):
        wq = part.dequantize((u + (torch.round(u) - u).detach()).clamp(-7, 7))
        optimizer.zero_grad()
        (wq * part.gradient(wq.detach())).sum().backward()
        optimizer.step()
    want = torch.round(u.detach()).clamp(-7, 7)
    got = adaquant.learn_weights(problem, 60, 0.01)
    assert torch.equal(got, want), int((got != want).sum())
    assert int((got != torch.round(w * scale.reshape(1, -1, 1))).sum()) > rows * k // 20


def test_the_best_biases_are_made_a_few_rows_at_a_time_as_all_at_once(monkeypatch):
    """plan_with_best_biases dequantizes ROWS_AT_ONCE rows at a time (a decoder's head's
    per-block grid values at once were 450 MB): the biases are mean_out - W~ mean_q of the
    whole, per block of a few rows."""
    gen = torch.Generator().manual_seed(6)
    groups, rows, k, block = 1, 7, 10, 4
    w = torch.randn(groups, rows, k, generator=gen)
    values = groups * rows * 3
    grid = WeightGrid(torch.rand(values, generator=gen) * 10 + 5, torch.randint(-3, 4, (values,), generator=gen).float(),
                      -7, 7, 4, 0, (groups * rows, k), block)
    mean_q, mean_out = torch.randn(groups, k, generator=gen), torch.randn(groups, rows, generator=gen)
    problem = _layers.Problem(FC, w, torch.eye(k).unsqueeze(0), None, w, torch.ones(groups, 1, 1), grid, mean_q, mean_out)
    q = torch.randint(-7, 8, (groups, rows, k), generator=gen).float()
    planned = []
    monkeypatch.setattr(_layers.Problem, "plan", lambda self, q, biases=None: planned.append(biases))
    monkeypatch.setattr(_layers, "ROWS_AT_ONCE", 3)
    problem.plan_with_best_biases(q)
    scale, zp = problem.grid_values()
    want = mean_out - (((q + zp) / scale) @ mean_q.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(planned[0], want, rtol=1e-6, atol=1e-6)

def test_adaround_runs_end_to_end_and_the_ir_reads_back(model):
    path, _ = model
    master = run(path, "adaround[0,50]")
    assert master.report["global_calibration"] == ["adaround"]
    graph = read_graph(master.report["quantized_ir"])
    assert [n.name for n in graph.nodes] == [n.name for n in master.qgraph.nodes]
    written = graph.node("project").get_constant("weights").betensor
    assert torch.equal(written.to(torch.int32), master.qgraph.node("project").get_constant("weights").betensor.to(torch.int32))


def test_a_scope_limits_the_layers(model):
    path, _ = model
    master = run(path, "adaround[0,20][fullyconnected]")
    assert [n.name for n in master.graph.nodes if "planned_integers" in n.attrs] == ["fc"]
    # the report's per-layer plan says which layers the method decided for
    assert {r["layer"]: r.get("planned") for r in master.report["layers"] if r.get("planned")} == \
        {"fc": ["range of 'weights'", "rounding of 'weights'", "values of 'biases'"]}


def test_patches_reproduce_the_layer(model):
    """A layer's patches times its weight rows are its output before the activation."""
    path, _ = model
    graph = read_graph(str(path / "small.txt"))
    x = torch.randn(2, 6, 6, 3)
    graph.forward([x], keep_tensors=True)
    for name in ("conv", "dw", "project", "fc"):
        node = graph.node(name)
        node.params["with_activation"] = "NONE"
        want = node.forward().reshape(-1, node.outputs[0].betensor.shape[-1])
        groups = node.get_param("group", 1)
        w = node.get_constant("weights").betensor
        w = w.reshape(groups, w.shape[0] // groups, -1)
        x = node.inputs[0].betensor
        p = _grams.patches(node, x, torch.arange(want.shape[0]))          # [groups, patches, K]
        got = (p @ w.transpose(1, 2)).transpose(0, 1).reshape(p.shape[1], -1) + node.get_constant("biases").betensor
        assert torch.allclose(got, want, atol=1e-5), name


@pytest.mark.parametrize("method, said", [
    ("adaround[0,0]", "adaround's epochs must be an integer >= 1, got 0"),
    ("gptq_zy[1,1,0.01,128,1,5]", "gptq_zy takes at most 5 params"),
    ("gptq_zy[1,1,0.01,128,0.5]", "gptq_zy.s choose_range must be an integer >= 0, got 0.5"),
    ("adaquant_zy[1.5]", "adaquant_zy's batches must be an integer >= 0, got 1.5"),
    ("easy_quant[1,1,2,0.5]", r"easy_quant's beta \(0.5\) must be at least its alpha \(2\)"),
    ("easy_quant[1,1,0.5,2,0]", "easy_quant's nsteps must be an integer >= 1, got 0"),
    ("easy_quant[1,1,0,2]", "easy_quant's alpha must be a number >= 0.001, got 0"),
    ("mvn_correction[1]", r"mvn_correction's mode 1 \(the norm chain raised to 16-bit activations and 48-bit "
                          r"biases\) is not implemented in npuopt; mode 0"),
    ("mvn_correction[0,-1]", "mvn_correction's alpha must be a number >= 0, got -1"),
])
def test_bad_params_stop_with_one_line(model, method, said):
    path, _ = model
    with pytest.raises(ConfigError, match=said):
        run(path, method)


def unbalanced_model(path):
    """Conv 3x3 (RELU) -> Conv 1x1 (NONE) -> Conv 1x1, whose first layer's output channels
    differ in range by up to 100x (compensated by the next layer's inputs): on per-tensor
    weights the small channels round to a few levels."""
    gen = torch.Generator().manual_seed(1)
    spread = torch.logspace(-2, 0, 8)
    b = GraphBuilder("unbalanced")
    b.input("x", [1, 6, 6, 3])
    b.layer("Convolution", "conv1", ["x"], dict(kernel_x=3, kernel_y=3, pad_left=1, pad_right=1, pad_top=1,
                                                 pad_bottom=1, num_output=8, with_activation="RELU"),
            {"weights": torch.randn(8, 3, 3, 3, generator=gen) * spread.reshape(8, 1, 1, 1),
             "biases": torch.rand(8, generator=gen) * spread})
    b.layer("Convolution", "conv2", ["conv1"], dict(kernel_x=1, kernel_y=1, num_output=8),
            {"weights": torch.randn(8, 1, 1, 8, generator=gen) / spread.reshape(1, 1, 1, 8) * 0.1,
             "biases": torch.randn(8, generator=gen) * 0.1})
    b.layer("Convolution", "conv3", ["conv2"], dict(kernel_x=1, kernel_y=1, num_output=4),
            {"weights": torch.randn(4, 1, 1, 8, generator=gen) * 0.3, "biases": torch.randn(4, generator=gen) * 0.1})
    write_graph(b.build(["conv3"]), str(path / "small.txt"))
    np.save(path / "data.npy", torch.randn(64, 6, 6, 3, generator=gen).numpy())


PER_TENSOR = dict(weight_bits="8", quantize_method_for_weight="per_tensor_symmetric_restricted_range")


def test_equalization_keeps_the_float_function_and_lowers_the_per_tensor_error(tmp_path):
    unbalanced_model(tmp_path)
    nearest = output_error(run(tmp_path, "none", **PER_TENSOR), tmp_path)
    master = run(tmp_path, "equalization", **PER_TENSOR)
    x = torch.from_numpy(np.load(tmp_path / "data.npy"))
    want = read_graph(str(tmp_path / "small.txt")).forward([x])[0]
    assert torch.allclose(master.graph.forward([x])[0], want, rtol=1e-4, atol=1e-5)
    ranges = master.graph.node("conv1").get_constant("weights").betensor.abs().reshape(8, -1).amax(1)
    assert float(ranges.max() / ranges.min()) < 10  # was up to 100x
    assert output_error(master, tmp_path) < 0.5 * nearest


def test_bias_correction_lowers_the_per_tensor_error(tmp_path):
    unbalanced_model(tmp_path)
    fields = dict(PER_TENSOR, weight_bits="4")
    plain = run(tmp_path, "none", **fields)
    nearest = output_error(plain, tmp_path)
    master = run(tmp_path, "bias_correction", **fields)
    assert master.report["global_calibration"] == ["bias_correction"]
    assert output_error(master, tmp_path) < 0.8 * nearest
    # the float model keeps its biases (the metrics compare with the model as read); the
    # corrected ones are planned, and the quantized layer is made from them
    read = read_graph(str(tmp_path / "small.txt")).node("conv2").get_constant("biases").betensor
    node = master.graph.node("conv2")
    assert torch.equal(node.get_constant("biases").betensor, read)
    assert not torch.equal(biases_of(node), read)
    quantized = [m.qgraph.node("conv2").get_constant(k).betensor
                 for m in (plain, master) for k in ("weights", "biases")]
    assert torch.equal(quantized[0], quantized[2]) and not torch.equal(quantized[1], quantized[3])


@pytest.mark.parametrize("fields, rounded", [
    (dict(weight_bits="8", quantize_method_for_weight="per_tensor_symmetric_restricted_range"),
     ["conv", "dw", "project", "fc"]),
    (dict(weight_bits="8", quantize_method_for_weight="per_channel_symmetric_restricted_range & "
                                                      "<{^fc$}:per_tensor_symmetric_restricted_range>"), ["fc"]),
    (dict(weight_bits="8", quantize_method_for_weight="per_channel_symmetric_restricted_range"), []),
    ({}, ["conv", "dw", "project", "fc"]),  # 4-bit per-channel weights
    # fp8 weights (per channel) of the layers fp8 takes (Convolution/DepthwiseConv fusing NONE or RELU, FullyConnected)
    (dict(quant_type="wfp8afp8", quantize_method_for_weight="per_channel_symmetric_restricted_range"),
     ["project", "fc"]),
])
def test_the_default_runs_gptq_where_weights_are_per_tensor_below_8_bits_or_minifloat(model, fields, rounded):
    path, _ = model
    master = run(path, "auto", **fields)
    assert [n.name for n in master.graph.nodes if "planned_integers" in n.attrs] == rounded
    assert master.report["global_calibration"] == ["auto"]


def test_the_default_plans_the_best_biases_of_weight_only_layers_alone(model):
    """auto's GPTQ chooses a weight-only layer's rounding with the biases that fit it best and
    plans them: the float model keeps its biases, the quantized layer takes the planned ones;
    the integer layers keep the float biases."""
    path, _ = model
    read = read_graph(str(path / "small.txt"))
    master = run(path, "auto", trigger_float_op="disable & <[FullyConnected]:float16_act_int_wht>",
                 quantize_method_for_weight="per_channel_asymmetric")
    assert [n.name for n in master.graph.nodes if "planned_biases" in n.attrs] == ["fc"]
    for node in master.graph.nodes:
        if "biases" in node.constants:
            assert torch.equal(node.get_constant("biases").betensor,
                               read.node(node.name).get_constant("biases").betensor)
    planned = biases_of(master.graph.node("fc"))
    assert not torch.equal(planned, read.node("fc").get_constant("biases").betensor)
    assert torch.equal(master.qgraph.node("fc").get_constant("biases").betensor, planned)
    # kept in float with float weights, the layer has no rounding the planned biases fit: the float ones
    master.plan.change("fc", trigger_float_op="float16_preferred")
    assert torch.equal(master.plan.qgraph.node("fc").get_constant("biases").betensor,
                       read.node("fc").get_constant("biases").betensor)


def test_the_default_gptq_lowers_the_per_tensor_error(tmp_path):
    unbalanced_model(tmp_path)
    nearest = output_error(run(tmp_path, "none", **PER_TENSOR), tmp_path)
    assert output_error(run(tmp_path, "auto", **PER_TENSOR), tmp_path) < 0.8 * nearest


def test_the_default_without_calibration_data_keeps_nearest_rounding_and_says_so(tmp_path, caplog):
    unbalanced_model(tmp_path)
    stats = tmp_path / "small.statistics"
    run(tmp_path, "none", statistic_file=str(stats), **PER_TENSOR)  # saves the statistics
    nearest = run(tmp_path, "none", statistic_file=str(stats), **PER_TENSOR)
    master = run(tmp_path, "auto", statistic_file=str(stats), calibration_data="", **PER_TENSOR)
    assert "no calibration_data to run GPTQ on" in caplog.text
    assert not any("planned_integers" in n.attrs for n in master.graph.nodes)
    w = [n.get_constant("weights").betensor for n in master.qgraph.nodes if "weights" in n.constants]
    assert all(torch.equal(a, b.get_constant("weights").betensor)
               for a, b in zip(w, [n for n in nearest.qgraph.nodes if "weights" in n.constants]))
