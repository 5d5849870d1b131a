"""Write the data of a detector model test into OUT: calib.npy (the first CALIB images of
`calib`) and val.npy (the 500 `val` images) of ../shared/data/imagenet_sample, NHWC
(pixel - 127) / 128 stored as float16 (exact: multiples of 1/128), and labels.npy, the
float IR's own detections on val.npy, in the box label format of the Compass Optimizer's
VOC/COCO datasets ({sample: [classes, ymin, xmin, ymax, xmax]}): with them as labels,
BoxAgreementMetric is the share of the float boxes the quantized IR keeps, and the mAP
metrics measure the quantized detections against the float ones.

    python model_tests/detector_data.py IR.txt LAYOUT OUT [--calib N]

LAYOUT is BoxAgreementMetric's (ssd, yolo): which outputs hold the detections. Prints
the float detections' count per image and the time the float forward took. Files already
in OUT are kept (delete OUT to write them again), labels.npy while it is newer than the IR
(its .txt and .bin).
"""
import argparse
import csv
import os
import sys
import time

import numpy as np
import torch
from PIL import Image

IMAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "imagenet_sample")
BATCH = 25


def images(split: str, count: int = 0) -> np.ndarray:
    with open(os.path.join(IMAGES, "labels.tsv")) as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["split"] == split]
    rows = rows[:count] if count else rows
    pixels = np.stack([np.asarray(Image.open(os.path.join(IMAGES, r["file"])).convert("RGB")) for r in rows])
    return ((pixels.astype(np.float32) - 127) / 128).astype(np.float16)


def float_detections(ir: str, layout: str, val: np.ndarray) -> dict:
    """{sample: [classes, ymin, xmin, ymax, xmax]} of the float IR's detections (npuopt's forward)."""
    from npuopt.ir import read_graph
    from npuopt.plugins import load_plugins
    from npuopt.registry import PLUGINS, PluginType
    load_plugins()
    metric = PLUGINS[PluginType.Metric].get("BoxAgreementMetric")(layout)
    graph = read_graph(ir)
    labels = {}
    with torch.no_grad():
        for start in range(0, len(val), BATCH):
            outputs = graph.forward([torch.from_numpy(val[start:start + BATCH].astype(np.float32))])
            for i in range(outputs[0].shape[0]):
                classes, boxes = metric.detections(outputs, i)
                labels[start + i] = [classes.tolist()] + [boxes[:, k].tolist() for k in range(4)]
    return labels


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("ir")
    args.add_argument("layout", choices=["ssd", "yolo"])
    args.add_argument("out")
    args.add_argument("--calib", type=int, default=100, help="calibration images (the first N of `calib`)")
    opts = args.parse_args(argv)
    os.makedirs(opts.out, exist_ok=True)
    for name, make in (("calib", lambda: images("calib", opts.calib)), ("val", lambda: images("val"))):
        if not os.path.isfile(os.path.join(opts.out, f"{name}.npy")):
            np.save(os.path.join(opts.out, f"{name}.npy"), make())
    path = os.path.join(opts.out, "labels.npy")
    weights = os.path.splitext(opts.ir)[0] + ".bin"
    if not os.path.isfile(path) or os.path.getmtime(path) < max(os.path.getmtime(f) for f in (opts.ir, weights)
                                                               if os.path.isfile(f)):
        start = time.time()
        labels = float_detections(opts.ir, opts.layout, np.load(os.path.join(opts.out, "val.npy")))
        counts = [len(v[0]) for v in labels.values()]
        print(f"float detections on {len(counts)} val images: {sum(counts)} boxes, {np.mean(counts):.1f} per image "
              f"(min {min(counts)}, max {max(counts)}), {len({c for v in labels.values() for c in v[0]})} classes; "
              f"float forward {time.time() - start:.1f} s")
        np.save(path, labels, allow_pickle=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
