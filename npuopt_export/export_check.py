"""Compare an exported IR's float forward with its PyTorch model: the acceptance
figures of the exporter (tests, model_tests/ and bench/ share them).

Acceptance: on `count` (8) random inputs and 8 real images, the worst per-sample
cosine is at least MIN_COSINE and the max abs error at most MAX_REL_ERROR times
max |output| of PyTorch.
"""
import csv
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from PIL import Image

from .export import cosine, export_model, load_model, runs_batched, to_ir_layout

REPO = Path(__file__).resolve().parent.parent
IMAGE_LABELS = REPO.parent / "shared" / "data" / "imagenet_sample" / "labels.tsv"

# (mean, std) on 0..255 RGB pixels
PREPROCESS = {
    "imagenet": ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375)),  # torchvision models
    "lite": ((127.0,) * 3, (128.0,) * 3),                               # EfficientNet-Lite
}
MIN_COSINE = 0.99999
MAX_REL_ERROR = 1e-4
INPUT_SHAPE = (1, 3, 224, 224)

# the models of issue 3: name -> (npuopt-export MODEL, preprocessing of the images)
MODELS = {name: (f"torchvision:{name}", "imagenet") for name in (
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "squeezenet1_1", "shufflenet_v2_x1_0",
    "efficientnet_b0", "regnet_x_400mf", "googlenet", "vit_b_16")}
MODELS["efficientnet_lite0"] = ("npuopt_export.models:efficientnet_lite0", "lite")


def lively(model: torch.nn.Module, input_shape, seed: int = 0) -> torch.nn.Module:
    """A randomly initialized model whose output depends on its input, so that comparing
    outputs tests something: torchvision zero-initializes some weights (ViT's head and
    class token: all-zero output) and its BatchNorm statistics do not fit the random
    weights (GoogLeNet's features die, MobileNetV3's shrink to 1e-9). Zero weight
    tensors get N(0, 0.02) values and BatchNorm statistics are re-estimated on random
    inputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if norms:
            for m in norms:
                m.reset_running_stats()
                m.momentum = None  # a plain average over the batches below
            model.train()
            for _ in range(4):
                model(torch.randn((8,) + tuple(input_shape[1:]), generator=generator))
    return model.eval()


def load_images(preprocess: str, split: str = "val", limit: Optional[int] = None,
                labels: Path = IMAGE_LABELS) -> Tuple[torch.Tensor, torch.Tensor]:
    """NCHW float images of one split of the sample set, and their class indices."""
    with open(labels, newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["split"] == split][:limit]
    mean, std = (np.array(v, dtype=np.float32) for v in PREPROCESS[preprocess])
    images = [(np.asarray(Image.open(labels.parent / r["file"]).convert("RGB"), dtype=np.float32) - mean) / std
              for r in rows]
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
    return x, torch.tensor([int(r["label"]) for r in rows])


def run_ir(graph, x: torch.Tensor, batch: int) -> torch.Tensor:
    """Output 0 of the IR over NCHW inputs, `batch` samples per forward, in PyTorch's layout."""
    outs = [graph.forward([to_ir_layout(chunk)])[0].clone() for chunk in x.split(batch)]
    out = torch.cat(outs)
    return out.permute(0, 3, 1, 2) if out.dim() == 4 else out


def run_torch(model: torch.nn.Module, x: torch.Tensor, batch: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(chunk) for chunk in x.split(batch)])


def agreement(got: torch.Tensor, want: torch.Tensor) -> Dict[str, float]:
    """The worst per-sample cosine, and the max abs error relative to max |output|."""
    got, want = got.double().flatten(1), want.double().flatten(1)
    max_err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    return {"cosine": cosine(got, want).min().item(), "max_err": max_err,
            "rel_err": max_err / scale if scale else max_err}


def passes(figures: Dict[str, float]) -> bool:
    return figures["cosine"] >= MIN_COSINE and figures["rel_err"] <= MAX_REL_ERROR


def compare_on_inputs(model, graph, preprocess: str, batch: int = 8, count: int = 8,
                      seed: int = 0) -> Dict[str, Dict[str, float]]:
    """Figures on `count` random inputs and, when the sample images exist, `count` real ones."""
    shape = tuple(graph.input_tensors[0].ir_shape)
    nchw = (count, shape[3], shape[1], shape[2]) if len(shape) == 4 else (count,) + shape[1:]
    inputs = {"random": torch.randn(nchw, generator=torch.Generator().manual_seed(seed))}
    if IMAGE_LABELS.is_file():
        inputs["images"] = load_images(preprocess, limit=count)[0]
    return {kind: agreement(run_ir(graph, x, batch), run_torch(model, x, batch)) for kind, x in inputs.items()}


def export_to_files(module: torch.nn.Module, prefix: str, input_shape=INPUT_SHAPE):
    """Export `module`, write PREFIX.txt/.bin and read them back: the graph npuopt would load."""
    from npuopt.ir import read_graph, write_graph

    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    graph, _ = export_model(module, [list(input_shape)], os.path.basename(prefix))
    write_graph(graph, prefix + ".txt", prefix + ".bin")
    return read_graph(prefix + ".txt", prefix + ".bin")


def model_figures(spec: str, preprocess: str, prefix: str, variant: str = "plain", count: int = 8,
                  input_shape=INPUT_SHAPE) -> Dict[str, object]:
    """The acceptance figures of one model: `plain` is the model as loaded (torchvision:
    random weights from torch.manual_seed(0)), `lively` the same after lively(). Exported
    to PREFIX.txt/.bin, read back, compared on `count` random inputs and (when the sample
    set exists) `count` images; batches of `count` when the IR runs batched, else of 1."""
    module = load_model(spec)
    if variant == "lively":
        lively(module, input_shape)
    elif variant != "plain":
        raise ValueError(f"variant '{variant}': plain or lively")
    graph = export_to_files(module, prefix, input_shape)
    batched = runs_batched(graph, [list(input_shape)])
    figures = compare_on_inputs(module, graph, preprocess, batch=count if batched else 1, count=count)
    return {"batched": batched, "samples_apart": graph.keeps_samples_apart(), **figures}


def format_figures(kind: str, figures: Dict[str, float]) -> str:
    return (f"{kind:7s} cosine {figures['cosine']:.8f}  max abs error {figures['max_err']:.3g}  "
            f"rel error {figures['rel_err']:.2e}  {'PASS' if passes(figures) else 'FAIL'}")
