"""Issue 12: easy_quant plans weight and activation ranges (the activation plan as
data: tensors.plan_activation_range, read where quantization takes a range), which
lower the 4-bit output error of the small model against the calibrated ranges; the
quantized IR then has the planned grids, whatever the thread count."""
import pytest
import torch

from npuopt.quant import qmath
from npuopt.quant import tensors as QT
from npuopt.tensor import PyTensor

from test_global_calibration import output_error, run, small_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("easy_quant")
    small_model(path)
    return path, run(path, "none")


def real_range(t):
    return qmath.dequantize(torch.tensor([t.qmin, t.qmax]), t.scale, t.zerop).tolist()


def test_easy_quant_plans_ranges_that_lower_the_4bit_error(model):
    path, nearest = model
    master = run(path, "easy_quant")
    assert output_error(master, path) < 0.8 * output_error(nearest, path)  # measured 0.047 vs 0.074
    assert not any("planned_integers" in n.attrs for n in master.graph.nodes)  # ranges only
    planned = [t for n in master.graph.nodes for t in n.outputs if t.planned_range is not None]
    assert planned, "no activation range planned"
    for t in planned:
        q, calibrated = master.qgraph.tensor(t.name), nearest.qgraph.tensor(t.name)
        lo, hi = t.planned_range
        got = real_range(q)
        assert abs(got[0] - min(lo, 0.0)) <= 1 / q.scale and abs(got[1] - hi) <= 1 / q.scale, (t.name, got, lo, hi)
        assert q.scale != calibrated.scale, t.name
    rows = {r["layer"]: r.get("planned", []) for r in master.report["layers"]}
    assert any(p.startswith("range of output") for p in sum(rows.values(), []))
    assert "range of 'weights'" in sum(rows.values(), [])


def test_an_activation_plan_is_the_tensors_min_and_max_as_in_opt():
    t = PyTensor("t", torch.linspace(-2.0, 5.0, 8))
    assert t.planned_range is None and (t.min, t.max) == (-2.0, 5.0)
    QT.plan_activation_range(t, -1.0, 3.0)
    assert t.planned_range == (-1.0, 3.0) and (t.min, t.max) == (-1.0, 3.0)
    t.min, t.max = -0.5, 0.25  # a Compass Optimizer plugin's way of choosing a range
    assert t.planned_range == (-0.5, 0.25)
    QT.plan_activation_range(t, None, None)
    assert t.planned_range is None and (t.min, t.max) == (-2.0, 5.0)


def test_each_channel_searched_alone_lowers_the_error_further(model):
    path, _ = model
    chunks = output_error(run(path, "easy_quant"), path)
    alone = output_error(run(path, "easy_quant[0,2,0.5,2,20,0]"), path)  # every batch, 2 epochs, 20 steps
    assert alone < chunks  # measured 0.031 vs 0.047


def test_the_ir_is_the_same_on_one_and_two_threads(model):
    path, _ = model
    written = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            master = run(path, "easy_quant")
            written.append(open(master.report["quantized_ir"], "rb").read())
            written.append(open(master.report["quantized_ir"][:-len(".txt")] + ".bin", "rb").read())
    finally:
        torch.set_num_threads(threads)
    one, two = written[0].decode().splitlines(), written[2].decode().splitlines()
    assert [a for a, b in zip(one, two) if a != b] == [] and written[1] == written[3]
