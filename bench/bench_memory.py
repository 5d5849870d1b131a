"""Peak resident memory and wall time of the EfficientNet-Lite0 model test.

    python bench/bench_memory.py [--repeat 1] [-- extra npuopt arguments]

Runs `npuopt --cfg model_tests/efficientnet_lite0/opt.cfg` (100 calibration
images, 500 val images: calibration, quantization, float and quantized forward,
per-layer similarity) in a subprocess, exporting the model first if
model_tests/efficientnet_lite0/work/lite0.txt is absent, and prints the child's
peak resident set size (ru_maxrss of that process) next to its wall time. The target
of issue 13 is below 1.2 GB. Needs ../shared beside the checkout and the Lite0
weight packages.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL_TEST = REPO / "model_tests" / "efficientnet_lite0"


def run_once(extra):
    """(wall seconds, peak resident MB, metric lines) of one npuopt run."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-m", "npuopt", "--cfg", str(MODEL_TEST / "opt.cfg"), *extra],
                                 cwd=MODEL_TEST, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        err.seek(0)
        lines = err.read().splitlines()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_memory: npuopt failed: {lines[-1] if lines else status}")
    top1 = [line.split("] ", 1)[1] for line in lines if "TopKMetric:" in line]
    return seconds, usage.ru_maxrss / 1024, top1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1, help="runs (the peak is over all of them; time: the best)")
    p.add_argument("extra", nargs="*", help="more npuopt arguments, e.g. --set metric_batch_size=100")
    args = p.parse_args()
    if not (REPO.parent / "shared" / "data" / "imagenet_sample").is_dir():
        sys.exit("bench_memory: ../shared/data/imagenet_sample is not beside the checkout")
    if not (MODEL_TEST / "work" / "lite0.txt").is_file():
        subprocess.run([sys.executable, "-c", "from npuopt_export.export import main; main()", "npuopt_export.models:efficientnet_lite0",
                        "--input-shape", "1,3,224,224", "-o", str(MODEL_TEST / "work" / "lite0")], check=True)
    times, peaks = [], []
    for _ in range(args.repeat):
        seconds, peak_mb, top1 = run_once(args.extra)
        times.append(seconds)
        peaks.append(peak_mb)
    print(f"EfficientNet-Lite0 model test: peak resident {max(peaks):.0f} MB, wall time {min(times):.1f} s "
          f"(best of {len(times)}); {'; '.join(top1)}")


if __name__ == "__main__":
    main()
