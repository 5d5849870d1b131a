"""Issue 24: the global calibration rounding methods (AdaRound, AdaQuant, GPTQ) round
the weights of every weighted layer type, not only the 2-D direct convolutions and
FullyConnected: Convolution3D, ConvTranspose and ConvTranspose3D, integer or
weight-only (per block too), which fine-tuning learns as well, and a weight-only
MatMul's constant operand. The convolutions' input patches reproduce each layer's
output; a grouped transposed layer, whose weight rows serve every group, is rounded
group by group where it is weight-only, and keeps the nearest rounding where it is
quantized to integers (from its rows repeated per group)."""
import numpy as np
import pytest
import torch

from npuopt.dtype import Dtype
from npuopt.ir import read_graph, write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.quant.compare import dequantized
from npuopt.quant.global_calibration import _grams
from npuopt.quant.trainable import TrainableGraph, learned_layers

from conftest import output_mse, run_cfg, write_cfg

# (layer type, input shape, params, weights' shape): strides, dilations, pads that crop
# and output_padding that extends, groups
PATCH_CASES = {
    "convtranspose": ("ConvTranspose", [1, 5, 4, 6], dict(kernel_x=3, kernel_y=2, stride_x=2, stride_y=3, pad_left=1,
                                                          pad_top=1, pad_bottom=2, output_padding_x=1, num_output=4),
                      (4, 2, 3, 6)),
    "convtranspose_dilated": ("ConvTranspose", [1, 4, 4, 3], dict(kernel_x=2, kernel_y=2, stride_y=2, dilation_x=2,
                                                                  num_output=5), (5, 2, 2, 3)),
    "convtranspose_grouped": ("ConvTranspose", [1, 4, 4, 6], dict(kernel_x=2, kernel_y=2, stride_x=2, stride_y=2,
                                                                  group=2, num_output=4), (2, 2, 2, 6)),
    "convolution3d_grouped": ("Convolution3D", [1, 4, 5, 6, 4], dict(kernel_x=3, kernel_y=2, kernel_z=2, stride_x=2,
                                                                     pad_x_begin=1, pad_x_end=1, pad_z_end=1,
                                                                     dilation_y=2, group=2, num_output=6),
                              (6, 2, 3, 2, 2)),
    "convtranspose3d": ("ConvTranspose3D", [1, 3, 4, 3, 2], dict(kernel_x=2, kernel_y=3, kernel_z=2, stride_x=2,
                                                                 stride_z=2, pad_y_begin=1, pad_x_end=1,
                                                                 num_output=3), (3, 3, 2, 2, 2)),
}


@pytest.mark.parametrize("case", sorted(PATCH_CASES))
def test_patches_reproduce_the_layer(case):
    """Patches times each group's weight matrix, plus the biases, are the layer's output:
    a direct layer's weights [O, *k, C/g] are g stacked matrices; a transposed layer's
    [O/g, *k, C] give group g the columns of its input channels."""
    kind, shape, params, wshape = PATCH_CASES[case]
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(*wshape, generator=gen)
    b = GraphBuilder("one")
    b.input("x", shape)
    b.layer(kind, "layer", ["x"], params, {"weights": w, "biases": torch.randn(params["num_output"], generator=gen)})
    graph = b.build(["layer"])
    graph.forward([torch.randn(2, *shape[1:], generator=gen)], keep_tensors=True)
    node = graph.node("layer")
    want = node.outputs[0].betensor.reshape(-1, params["num_output"])
    groups = params.get("group", 1)
    if kind.startswith("ConvTranspose"):
        matrices = w.reshape(w.shape[0], -1, groups, w.shape[-1] // groups).permute(2, 0, 1, 3) \
            .reshape(groups, w.shape[0], -1)
    else:
        matrices = w.reshape(groups, w.shape[0] // groups, -1)
    p = _grams.patches(node, node.inputs[0].betensor, torch.arange(want.shape[0]))
    got = (p @ matrices.transpose(1, 2)).transpose(0, 1).reshape(p.shape[1], -1) + node.get_constant("biases").betensor
    assert torch.allclose(got, want, atol=1e-4), float((got - want).abs().max())


def _layer(b, kind, name, inputs, params, wshape, gen):
    b.layer(kind, name, inputs, params, {"weights": torch.randn(*wshape, generator=gen) * 0.3,
                                         "biases": torch.randn(params["num_output"], generator=gen) * 0.1})


def decoder_2d(path, gen):
    """ConvTranspose (k2 s2, RELU) -> Convolution 3x3 -> ConvTranspose grouped (k3 s2,
    cropped) -> FullyConnected."""
    b = GraphBuilder("decoder")
    b.input("x", [1, 4, 4, 6])
    _layer(b, "ConvTranspose", "up1", ["x"], dict(kernel_x=2, kernel_y=2, stride_x=2, stride_y=2, num_output=8,
                                                  with_activation="RELU"), (8, 2, 2, 6), gen)
    _layer(b, "Convolution", "conv", ["up1"], dict(kernel_x=3, kernel_y=3, pad_left=1, pad_right=1, pad_top=1,
                                                   pad_bottom=1, num_output=8), (8, 3, 3, 8), gen)
    _layer(b, "ConvTranspose", "up2", ["conv"], dict(kernel_x=3, kernel_y=3, stride_x=2, stride_y=2, pad_right=1,
                                                     pad_bottom=1, group=2, num_output=4), (2, 3, 3, 8), gen)
    b.layer("Reshape", "flat", ["up2"], dict(shape=[1, 1024]))
    _layer(b, "FullyConnected", "fc", ["flat"], dict(num_output=10), (10, 1024), gen)
    return b.build(["fc"]), [4, 4, 6]


def decoder_3d(path, gen):
    """Convolution3D (3x3x3, RELU) -> ConvTranspose3D (k2 s2) -> FullyConnected."""
    b = GraphBuilder("decoder3d")
    b.input("x", [1, 3, 4, 4, 3])
    _layer(b, "Convolution3D", "conv3d", ["x"], dict(kernel_x=3, kernel_y=3, kernel_z=3, pad_x_begin=1, pad_x_end=1,
                                                     pad_y_begin=1, pad_y_end=1, pad_z_begin=1, pad_z_end=1,
                                                     num_output=8, with_activation="RELU"), (8, 3, 3, 3, 3), gen)
    _layer(b, "ConvTranspose3D", "up3d", ["conv3d"], dict(kernel_x=2, kernel_y=2, kernel_z=2, stride_x=2, stride_y=2,
                                                          stride_z=2, num_output=4), (4, 2, 2, 2, 8), gen)
    b.layer("Reshape", "flat", ["up3d"], dict(shape=[1, 1536]))
    _layer(b, "FullyConnected", "fc", ["flat"], dict(num_output=10), (10, 1536), gen)
    return b.build(["fc"]), [3, 4, 4, 3]


MODELS = {"2d": decoder_2d, "3d": decoder_3d}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"decoder_{request.param}")
    gen = torch.Generator().manual_seed(1)
    graph, shape = MODELS[request.param](path, gen)
    write_graph(graph, str(path / "model.txt"))
    np.save(path / "data.npy", torch.randn(48, *shape, generator=gen).numpy())
    return path


def run(path, method, **fields):
    name = method.split("[")[0] + "".join(f"_{v}" for v in fields.values())
    return run_cfg(path / f"{name}.cfg", **{
        "graph": "model.txt", "model_name": "m", "output_dir": f"out_{name}", "dataset": "NumpyDataset",
        "calibration_data": "data.npy", "calibration_batch_size": "16", "weight_bits": "4",
        "quantize_method_for_weight": "per_channel_asymmetric",
        "quantize_method_for_activation": "per_tensor_asymmetric", "global_calibration": method, **fields})


def error_of(master, path) -> float:
    return output_mse(master, path / "model.txt", torch.from_numpy(np.load(path / "data.npy")))[0]


ROUNDED = {"up1", "conv", "fc", "conv3d", "up3d"}  # up2, a grouped ConvTranspose, too where weight-only


@pytest.mark.parametrize("method", ["adaround[0,200]", "gptq_zy", "adaquant_zy[0,200]"])
def test_a_method_rounds_every_convolution_type(model, method):
    """Each method plans the integers of every layer but the grouped transposed one, on
    the grid, and lowers the 4-bit output error against the nearest rounding."""
    nearest = error_of(run(model, "none"), model)
    master = run(model, method)
    planned = {n.name for n in master.graph.nodes if "planned_integers" in n.attrs}
    assert planned == ROUNDED & {n.name for n in master.graph.nodes}
    for name in planned:
        c = master.qgraph.node(name).get_constant("weights")
        assert c.qmin <= int(c.betensor.min()) and int(c.betensor.max()) <= c.qmax
    error = error_of(master, model)
    assert error < 0.8 * nearest, (method, error, nearest)


WEIGHT_ONLY_ROUNDED = ROUNDED | {"up2"}


@pytest.mark.parametrize("method", ["gptq_zy", "adaround[0,200]", "adaquant_zy[0,200]"])
@pytest.mark.parametrize("grid", ["per_block_asymmetric", "per_channel_asymmetric", "per_tensor_asymmetric"])
def test_weight_only_layers_are_rounded_on_their_grids(model, grid, method):
    """Weight-only 4-bit weights (blocks of 5: a last, shorter block where a row does not
    divide): each method plans every layer's integers, the grouped transposed one's too,
    and lowers the error."""
    fields = dict(trigger_float_op="float16_act_int_wht", quantize_method_for_weight=grid, weight_block_size="5")
    nearest = error_of(run(model, "none", **fields), model)
    master = run(model, method, **fields)
    planned = {n.name for n in master.graph.nodes if "planned_integers" in n.attrs}
    assert planned == WEIGHT_ONLY_ROUNDED & {n.name for n in master.graph.nodes}
    for name in planned - {"fc"}:
        c = master.qgraph.node(name).get_constant("weights")
        assert (c.block_size == 5) == (grid == "per_block_asymmetric") and c.qbits == 4
        assert c.qmin <= int(c.betensor.min()) and int(c.betensor.max()) <= c.qmax
    assert error_of(master, model) < 0.8 * nearest, (error_of(master, model), nearest)


def test_a_grouped_transposed_layer_alone_is_rounded_better_than_nearest(tmp_path):
    """The grouped ConvTranspose of the 2-D decoder on its own, weight-only: its integers
    (planned group by group, as its stored rows) are what the IR holds, and its output
    error is below nearest rounding's."""
    gen = torch.Generator().manual_seed(3)
    b = GraphBuilder("up")
    b.input("x", [1, 4, 4, 8])
    _layer(b, "ConvTranspose", "up2", ["x"], dict(kernel_x=3, kernel_y=3, stride_x=2, stride_y=2, pad_right=1,
                                                  pad_bottom=1, group=2, num_output=4), (2, 3, 3, 8), gen)
    write_graph(b.build(["up2"]), str(tmp_path / "model.txt"))
    x = torch.randn(48, 4, 4, 8, generator=gen) @ (torch.randn(8, 8, generator=gen) + 2 * torch.eye(8))
    np.save(tmp_path / "data.npy", x.numpy())
    fields = dict(trigger_float_op="float16_act_int_wht", quantize_method_for_weight="per_block_asymmetric",
                  weight_block_size="5")
    nearest = error_of(run(tmp_path, "none", **fields), tmp_path)
    master = run(tmp_path, "gptq_zy", **fields)
    planned = master.graph.node("up2").attrs["planned_integers"]["weights"][1]
    written = read_graph(str(tmp_path / "out_gptq_zy_float16_act_int_wht_per_block_asymmetric_5" / "m_o.txt"))
    assert torch.equal(written.node("up2").get_constant("weights").betensor.to(torch.int32), planned.to(torch.int32))
    assert error_of(master, tmp_path) < 0.8 * nearest, (error_of(master, tmp_path), nearest)


def test_fine_tuning_learns_every_convolution_type_as_the_ir_computes_it(model):
    """Fine-tuning learns the layers the methods round; after training steps its forward is
    the plan's quantized forward, which the IR written computes."""
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    from npuopt.plugins import load_plugins
    load_plugins()
    cfg = write_cfg(model / "train.cfg", graph="model.txt", model_name="m", output_dir="out_train",
                    dataset="NumpyDataset", calibration_data="data.npy", calibration_batch_size="16", weight_bits="4",
                    quantize_method_for_weight="per_channel_asymmetric",
                    quantize_method_for_activation="per_tensor_asymmetric", global_calibration="none")
    master = OptMaster(load_config(str(cfg)))
    master.load()
    for stage in (master.stage1_passes, master.plan_settings, master.calibrate, master.after_calibration):
        stage()
    assert {n.name for n in learned_layers(master.graph)} == ROUNDED & {n.name for n in master.graph.nodes}
    trained = TrainableGraph(master.plan)
    x = torch.from_numpy(np.load(model / "data.npy")[:8])
    before = {name: layer.units.detach().clone() for name, layer in trained.by_name.items()}
    optimizer = torch.optim.Adam(trained.parameters(), lr=0.3)
    for _ in range(3):
        optimizer.zero_grad()
        sum(o.pow(2).mean() for o in trained.outputs(x)).backward()
        optimizer.step()
    with torch.no_grad():
        last = [o.clone() for o in trained.outputs(x)]
    assert all(not torch.equal(before[name], layer.units.detach()) for name, layer in trained.by_name.items())
    trained.finish()
    with master.outputs:
        master.quantize()
    written = read_graph(str(model / "out_train" / "m_o.txt"))
    got = [dequantized(t, v) for t, v in zip(written.output_tensors, written.forward([x]))]
    assert all(torch.equal(a, b) for a, b in zip(last, got))


def matmul_model(path, port: int):
    """x -> MatMul with a Constant operand [6, 8]: A (x [1, 8, 20]) or B with trans_b
    (x [1, 20, 8])."""
    gen = torch.Generator().manual_seed(2)
    b = GraphBuilder("mm")
    shape = [1, 8, 20] if port == 0 else [1, 20, 8]
    x = b.input("x", shape)
    w = b.layer("Constant", "w", [], {}, {"weights": torch.randn(6, 8, generator=gen)})
    first = b.layer("MatMul", "mm", [w[0], x] if port == 0 else [x, w[0]], {"trans_b": port == 1})
    write_graph(b.build(first), str(path / "model.txt"))
    # inputs correlated along K (H far from diagonal), where rounding with the data beats the nearest
    rows = torch.randn(48, 20, 8, generator=gen) @ (torch.randn(8, 8, generator=gen) + 2 * torch.eye(8))
    np.save(path / "data.npy", (rows.transpose(1, 2) if port == 0 else rows).contiguous().numpy())


@pytest.mark.parametrize("method", ["gptq_zy", "adaround[0,200]", "adaquant_zy[0,200]"])
@pytest.mark.parametrize("grid", ["per_channel_asymmetric", "per_block_asymmetric"])
@pytest.mark.parametrize("port", [0, 1], ids=["A", "B_trans_b"])
def test_a_matmuls_constant_operand_is_rounded(tmp_path, port, grid, method):
    """The Constant's integers are planned on the MatMul's grid and lower the output error
    against the nearest rounding."""
    matmul_model(tmp_path, port)
    fields = dict(trigger_float_op="float16_act_int_wht", quantize_method_for_weight=grid, weight_block_size="3")
    nearest = error_of(run(tmp_path, "none", **fields), tmp_path)
    master = run(tmp_path, method, **fields)
    assert [n.name for n in master.graph.nodes if "planned_integers" in n.attrs] == ["w"]
    c = master.qgraph.node("w").get_constant("weights")
    assert c.is_quantized and c.qbits == 4 and (c.block_size == 3) == (grid == "per_block_asymmetric")
    assert error_of(master, tmp_path) < 0.8 * nearest


def test_a_stream_runs_a_layer_without_inputs_once_for_all_batches(tmp_path):
    """_stream.Stream: a Constant's output is one tensor for every batch (a decoder's embedding
    table, fit to float16 in the quantized graph, was copied once per calibration window: 1.8 GB
    on SmolLM2-135M); the MatMul reading it still gets each batch's own output."""
    from npuopt.quant.global_calibration._stream import Stream
    matmul_model(tmp_path, 0)
    graph = read_graph(str(tmp_path / "model.txt"))
    graph.node("w").outputs[0].dtype = Dtype.FP16  # as kept in float16: each forward makes a new tensor
    data = [[torch.from_numpy(np.load(tmp_path / "data.npy")[i:i + 2])] for i in range(0, 6, 2)]
    stream = Stream(graph, data, one_thread=True)
    inputs, outputs = stream.around("mm")
    constants = inputs[0]
    assert len(constants) == 3 and all(v is constants[0] for v in constants)
    for batch, got in zip(data, outputs[0]):
        assert torch.allclose(got, graph.forward(batch)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [3, 40])
def test_grams_of_a_layer_with_more_rows_than_inputs(rows, monkeypatch):
    """_grams.grams: E[y_f x_q^T] and E[y_f] (y_f = W x_f) are summed as W E[x_f x_q^T] where
    the layer has more rows than inputs (a decoder's head; W's rows taken to float64 16 at a
    time here), else per patch: both equal the sums over the patches themselves, and the
    centred cross term (centred in the inputs' space first where W multiplies it) the
    cross-covariance."""
    monkeypatch.setattr(_grams, "ROWS", 16)
    from npuopt.quant.global_calibration._grams import Units, grams
    from npuopt.ranks import Ranks
    from test_quantize_ops import one_layer
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(rows, 8, generator=gen)
    node = one_layer("FullyConnected", [(8,)], dict(num_output=rows), {"weights": w, "biases": torch.zeros(rows)}).node("op")
    xf = [torch.randn(5, 8, generator=gen) for _ in range(3)]
    xq = [x + 0.1 * torch.randn(5, 8, generator=gen) for x in xf]
    units = Units(Ranks(), 3, [0, 1, 2])
    (h, low), mean_q, cross, mean_out = grams(node, xf, xq, None, w.unsqueeze(0), units)
    assert isinstance(cross, torch.Tensor) == (rows < 8)  # kept as W times the inputs' where W has more rows
    whole = lambda c: c if isinstance(c, torch.Tensor) else c.rows(0, rows)  # noqa: E731
    assert rows < 8 or torch.allclose(cross.rows(5, 9), whole(cross)[:, 5:9])
    cross = whole(cross)
    pf, pq = torch.cat(xf).double(), torch.cat(xq).double()
    yf = pf @ w.double().T
    assert torch.allclose(cross[0].double(), yf.T @ pq / 15, rtol=1e-5, atol=1e-5)
    assert torch.allclose(mean_out[0], yf.mean(0), rtol=1e-5, atol=1e-6)
    assert torch.allclose(mean_q[0], pq.mean(0), rtol=1e-5, atol=1e-6)
    centred = whole(grams(node, xf, xq, None, w.unsqueeze(0), units, centred=True)[2])
    covariance = (yf - yf.mean(0)).T @ (pq - pq.mean(0)) / 15
    assert torch.allclose(centred[0].double(), covariance, rtol=1e-5, atol=1e-5)


def test_a_stream_lets_go_of_what_only_a_passed_over_layer_reads():
    """_stream.Stream passes over a layer whose outputs no later layer reads (a prefill's present
    K/V Transposes, read by the graph's outputs only); a value it was the last to read goes then
    (SmolLM2-135M's K and V of every layer stayed: 380 MB of GPTQ's peak)."""
    from npuopt.quant.global_calibration._stream import Stream
    b = GraphBuilder("side")
    b.input("x", [2, 4])
    b.layer("FullyConnected", "fc", ["x"], dict(num_output=3), {"weights": torch.ones(3, 4), "biases": torch.zeros(3)})
    b.layer("Reshape", "side", ["x"], dict(shape=[8]))
    b.layer("FullyConnected", "fc2", ["fc"], dict(num_output=2), {"weights": torch.ones(2, 3), "biases": torch.zeros(2)})
    stream = Stream(b.build(["fc2", "side"]), [[torch.ones(2, 4)], [torch.zeros(2, 4)]], one_thread=True)
    stream.until("fc2", through=True)
    assert "x" not in stream.values


def test_a_stream_told_the_layers_asked_about_drops_what_only_a_later_passed_over_layer_reads():
    """With `asked`, a value whose last reader is a passed-over layer at the graph's end (a
    prefill's present-cache layers come after the head) goes once the layers that run have
    read it, not at the end: SmolLM2's K and V of every layer were held through GPTQ."""
    from npuopt.quant.global_calibration._stream import Stream
    b = GraphBuilder("late_side")
    b.input("x", [2, 4])
    b.layer("FullyConnected", "fc", ["x"], dict(num_output=3), {"weights": torch.ones(3, 4), "biases": torch.zeros(3)})
    b.layer("FullyConnected", "fc2", ["fc"], dict(num_output=2), {"weights": torch.ones(2, 3), "biases": torch.zeros(2)})
    b.layer("Reshape", "side", ["x"], dict(shape=[8]))
    graph = b.build(["fc2", "side"])
    data = [[torch.ones(2, 4)], [torch.zeros(2, 4)]]
    held, told = Stream(graph, data, one_thread=True), Stream(graph, data, one_thread=True, asked={"fc", "fc2"})
    for stream in (held, told):
        assert stream.until("fc2").name == "fc2"
        assert [float(v.sum()) for v in stream.inputs(graph.node("fc2"))] == [24.0, 0.0]
    assert "x" in held.values and "x" not in told.values
