"""Print the figures of an npuopt report and check them against floors.

    python model_tests/check_report.py REPORT.json [--min METRIC=VALUE ...] [--min-agreement FRACTION]
                                               [--min-cosine COSINE] [--min-median-cosine COSINE]

Prints each metric's float and quantized value and the drop, each output's
top-1 agreement of the quantized with the float graph, and each output's cosine
similarity of the quantized with the float values; then `PASS` or `FAIL: ...`
naming every floor that was missed (exit status 1). Models with random weights
(top-1 is chance) are held to the output cosine floor, or, where their output does
not depend on the input (a zero-initialized head), to the median over every layer's
cosine.
"""
import argparse
import json
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--min", action="append", default=[], metavar="METRIC=VALUE",
                        help="the quantized metric must be at least VALUE")
    parser.add_argument("--min-agreement", type=float, metavar="FRACTION",
                        help="every output's top-1 agreement must be at least FRACTION")
    parser.add_argument("--min-cosine", type=float, metavar="COSINE",
                        help="every output's cosine (quantized vs float, similarity samples) must be at least COSINE")
    parser.add_argument("--min-median-cosine", type=float, metavar="COSINE",
                        help="the median of every layer's cosine (quantized vs float) must be at least COSINE")
    args = parser.parse_args(argv)
    with open(args.report) as f:
        report = json.load(f)
    metrics = report["metrics"]
    for name, quant in metrics["quant"].items():
        print(f"{name}: float {metrics['float'][name]:.4f}  quant {quant:.4f}  drop {metrics['drop'][name]:+.4f}")
    for output, fraction in report.get("agreement", {}).items():
        print(f"output '{output}': top-1 agreement quant vs float {fraction:.4f}")
    outputs = set(report.get("agreement", {})) | set(report.get("outputs", {}))
    cosines = {r["tensor"]: r["cosine"] for r in report.get("layer_similarity", []) if r["tensor"] in outputs}
    for output, cosine in cosines.items():
        print(f"output '{output}': cosine quant vs float {cosine:.6f}")
    missed = []
    for floor in args.min:
        name, _, value = floor.rpartition("=")
        if name not in metrics["quant"]:
            missed.append(f"no metric '{name}' in the report")
        elif metrics["quant"][name] < float(value):
            missed.append(f"{name} {metrics['quant'][name]:.4f} < {value}")
    if args.min_agreement is not None:
        missed += [f"agreement of '{o}' {a:.4f} < {args.min_agreement}"
                   for o, a in report.get("agreement", {}).items() if a < args.min_agreement]
        if not report.get("agreement"):
            missed.append("the report has no agreement figures")
    if args.min_cosine is not None:
        missed += [f"cosine of '{o}' {c:.6f} < {args.min_cosine}" for o, c in cosines.items() if c < args.min_cosine]
        if not cosines:
            missed.append("the report has no output cosine figures")
    if args.min_median_cosine is not None:
        layers = sorted(r["cosine"] for r in report.get("layer_similarity", []))
        median = layers[len(layers) // 2] if layers else float("nan")
        print(f"median layer cosine quant vs float {median:.6f} ({len(layers)} tensors)")
        if not median >= args.min_median_cosine:
            missed.append(f"median layer cosine {median:.6f} < {args.min_median_cosine}")
    print("PASS" if not missed else "FAIL: " + "; ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
