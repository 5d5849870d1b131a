"""Compare npuopt's float forward of an exported IR with the PyTorch model (issue 3's
acceptance): worst cosine >= 0.99999 and max abs error <= 1e-4 x max |output| on
8 random inputs and 8 `val` sample images.

    python model_tests/float_check.py MODEL IR_PREFIX [--lively] [--count N]

MODEL is a name of npuopt_export/export_check.MODELS (resnet18, ..., efficientnet_lite0),
IR_PREFIX the IR that `npuopt-export` wrote (IR_PREFIX.txt/.bin) from that model
as loaded (torchvision: random weights from torch.manual_seed(0)). --lively also
exports and checks the model after lively() (BatchNorm statistics re-estimated,
zero weights filled, so that outputs depend on the input) into IR_PREFIX_lively.
Prints one line per comparison and `PASS`, or `FAIL` with exit status 1.
"""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("ir_prefix")
    parser.add_argument("--lively", action="store_true", help="also check the model after lively()")
    parser.add_argument("--count", type=int, default=8, help="random inputs and images (8)")
    args = parser.parse_args(argv)

    from npuopt.errors import NpuoptError
    from npuopt.ir import read_graph
    from npuopt_export.export import load_model, runs_batched
    from npuopt_export.export_check import (IMAGE_LABELS, INPUT_SHAPE, MODELS, compare_on_inputs, format_figures,
                                    model_figures, passes)

    if args.model not in MODELS:
        parser.error(f"unknown model '{args.model}' (one of {', '.join(MODELS)})")
    spec, preprocess = MODELS[args.model]
    if not IMAGE_LABELS.is_file():
        print(f"note: {IMAGE_LABELS} is absent: random inputs only")
    try:
        graph = read_graph(args.ir_prefix + ".txt", args.ir_prefix + ".bin")
        batched = runs_batched(graph, [list(INPUT_SHAPE)])
        results = {"plain": {"batched": batched, **compare_on_inputs(
            load_model(spec), graph, preprocess, batch=args.count if batched else 1, count=args.count)}}
        if args.lively:
            results["lively"] = model_figures(spec, preprocess, args.ir_prefix + "_lively", "lively", args.count)
    except NpuoptError as e:
        print(f"float_check: error: {e}", file=sys.stderr)
        return 1
    failed = False
    for variant, figures in results.items():
        title = {"plain": f"{args.model} as loaded ({args.ir_prefix}.txt)",
                 "lively": f"{args.model} after lively() ({args.ir_prefix}_lively.txt)"}[variant]
        batch = "any batch" if figures["batched"] else "batch 1 only"
        print(f"{title}, npuopt float IR vs PyTorch, IR runs at {batch}:")
        for kind in ("random", "images"):
            if kind in figures:
                print("  " + format_figures(kind, figures[kind]))
                failed |= not passes(figures[kind])
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
