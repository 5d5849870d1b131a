"""The reference runner against npuopt on whole models: resnet18, mobilenet_v2 and
EfficientNet-Lite0, exported with npuopt_export/export.py, quantized with npuopt, run
on the ImageNet sample images by npuopt's quantized forward and by npuopt-run.

    python model_tests/refrun_compare.py [MODEL ...] [--images N] [--calib-images N] [--work DIR]

For each model it prints both top-1s over the `val` images (500 unless
--images) and the elements that differ: integer tensors must be equal, float
tensors (layers npuopt keeps in float) equal up to float32 rounding. Exit
status 1 when anything differs. resnet18 and mobilenet_v2 have random weights
(torchvision ships none offline), so their top-1 is chance; Lite0 is pretrained.
`compare_model()` is what tests/test_refrun.py's slow test calls on 16 images.
"""
import argparse
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
IMAGES = os.path.join(REPO, "..", "shared", "data", "imagenet_sample", "labels.tsv")
IMAGENET_NORM = dict(image_mean="123.675,116.28,103.53", image_std="58.395,57.12,57.375")
MODELS = {
    "resnet18": ("torchvision:resnet18", IMAGENET_NORM),
    "mobilenet_v2": ("torchvision:mobilenet_v2", IMAGENET_NORM),
    "efficientnet_lite0": ("npuopt_export.models:efficientnet_lite0", dict(image_mean="127", image_std="128")),
}
FLOAT_RTOL = 1e-4


def prepare(model: str, work: str, calib_images: int) -> str:
    """Export the float IR (once) and quantize it with npuopt on the `calib` images;
    returns the cfg file, whose output_dir holds <model>_o.txt."""
    spec, norm = MODELS[model]
    folder = os.path.join(work, model)
    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, model)
    if not os.path.isfile(prefix + ".txt"):
        subprocess.run([sys.executable, "-m", "npuopt_export.export", spec, "--input-shape", "1,3,224,224", "-o", prefix],
                       cwd=REPO, check=True)
    cfg = os.path.join(folder, "opt.cfg")
    fields = dict(graph=model + ".txt", model_name=model, output_dir="quant", dataset="ImageFolderDataset",
                  calibration_data=os.path.abspath(IMAGES) + ":calib", image_limit=str(calib_images),
                  calibration_batch_size="16", device="cpu", **norm)
    with open(cfg, "w") as f:
        f.write("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items()))
    subprocess.run([sys.executable, "-m", "npuopt", "--cfg", cfg], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    return cfg


def _differ(want: np.ndarray, got: np.ndarray) -> int:
    if np.issubdtype(want.dtype, np.floating):
        tol = FLOAT_RTOL * max(float(np.abs(want).max(initial=0.0)), 1.0)
        return int((np.abs(want.astype(np.float64) - got.astype(np.float64)) > tol).sum())
    return int((want.astype(np.int64) != got.astype(np.int64)).sum())


def quantized_ir(cfg_path: str) -> str:
    """The quantized IR (graph file) that npuopt wrote for the cfg."""
    from npuopt.config import load_config

    cfg = load_config(cfg_path)
    return os.path.join(cfg.output_dir, f"{cfg.model_name}_o.txt")


def compare_model(cfg_path: str, images: int, batch: int = 16, all_tensors: bool = False) -> dict:
    """Run npuopt's quantized forward and npuopt-run on the first `images` val images.
    Returns top-1 of both (and of the float model) and {tensor: differing elements}."""
    import torch

    import npuopt.ops  # noqa: F401
    from npuopt.config import load_config
    from npuopt.data import make_dataset
    from npuopt.ir import read_graph
    from npuopt.plugins import load_plugins
    from npuopt_run.irfile import read_model
    from npuopt_run.runner import Runner

    load_plugins()
    cfg = load_config(cfg_path)
    ir = quantized_ir(cfg_path)
    dataset = make_dataset("ImageFolderDataset", f"{os.path.abspath(IMAGES)}:val:{images}")
    qgraph = read_graph(ir)
    fgraph = read_graph(cfg.graph)
    runner = Runner(read_model(ir))
    out = qgraph.output_tensors[0].name
    differ: Dict[str, int] = {}
    correct = {"float": 0, "npuopt": 0, "npuopt-run": 0}
    for start in range(0, len(dataset), batch):
        samples = [dataset[i] for i in range(start, min(start + batch, len(dataset)))]
        x = np.stack([s[0] for s in samples]).astype(np.float32)
        labels = np.array([int(s[1]) for s in samples])
        qgraph.forward([torch.from_numpy(x)], keep_tensors=all_tensors)
        ours = runner.run(runner.prepare_inputs([x], integer_input=False))
        names = [t.name for n in qgraph.nodes for t in n.outputs] if all_tensors else [out]
        for name in names:
            differ[name] = differ.get(name, 0) + _differ(qgraph.tensor(name).betensor.numpy(), ours[name])
        logits = {"float": fgraph.forward([torch.from_numpy(x)])[0].numpy(),
                  "npuopt": qgraph.tensor(out).betensor.numpy(), "npuopt-run": ours[out]}
        for kind, value in logits.items():
            correct[kind] += int((value.reshape(len(x), -1).argmax(axis=1) == labels).sum())
    n = len(dataset)
    return {"images": n, "top1": {k: v / n for k, v in correct.items()},
            "differ": {k: v for k, v in differ.items() if v}}


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default: all)")
    p.add_argument("--images", type=int, default=500, help="val images compared (default: all 500)")
    p.add_argument("--calib-images", type=int, default=500, help="calib images npuopt calibrates on")
    p.add_argument("--work", default=os.path.join(REPO, "model_tests", "refrun", "work"),
                   help="folder for the exported and quantized IRs (kept between runs)")
    p.add_argument("--all-tensors", action="store_true", help="compare every tensor, not only the output")
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    from npuopt_run.errors import RefrunError

    failed = 0
    for model in args.models or list(MODELS):
        try:
            result = compare_model(prepare(model, args.work, args.calib_images), args.images,
                                   all_tensors=args.all_tensors)
        except RefrunError as e:  # e.g. a layer npuopt-run has not ported yet
            print(f"{model}: npuopt-run: error: {e}")
            failed += 1
            continue
        top1 = result["top1"]
        print(f"{model}: {result['images']} val images; top-1 float {top1['float']:.4f}, npuopt "
              f"{top1['npuopt']:.4f}, npuopt-run {top1['npuopt-run']:.4f}; "
              + (f"differing elements: {result['differ']}" if result["differ"] else "identical outputs"))
        failed += bool(result["differ"]) or top1["npuopt"] != top1["npuopt-run"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
