"""BoxAgreementMetric(layout=ssd, iou=0.5): the share of the label boxes that the model's
detections find: a label box counts as found when a detection of the same class overlaps
it with IoU >= `iou`. With the float model's own detections as labels (in the box label
format of the Compass Optimizer's VOC/COCO datasets), it is the share of the float boxes
that a quantized model keeps.

The detections are those of the tool chain's detection post-processing layers, read from
the graph's outputs as the layout says:
  ssd:  DecodeBox (5 outputs) then NMS (4): total class count 2, class per group 4,
        boxes 5 and boxes per group 6 (the outputs SSDmAPMetric reads);
  yolo: Region or RegionFuse (5) then NMS (4): total class count 4, class per group 3,
        boxes 5 and boxes per group 6 (the outputs YOLOVOCmAPMetric reads).
Boxes are [ymin, xmin, ymax, xmax] in the same units in labels and outputs; the NMS boxes
come group by group, the groups' classes and counts in the class-per-group and
boxes-per-group outputs, the first `total` of them used.

Labels, per batch: {'label_index': [classes per sample], 'bbox': [boxes per sample]} as
VOCNHWCDataset, VOCNCHWDataset and CocoDataset collate them. With no label box at all the
share is 0: nothing to agree on is no evidence of agreement.
"""
import torch

from npuopt.datasets_common import is_no_label
from npuopt.framework import *

# layout -> positions of (total class count, class per group, boxes, boxes per group) among the outputs
LAYOUTS = {"ssd": (2, 4, 5, 6), "yolo": (4, 3, 5, 6)}


def box_iou(box: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """IoU of one [ymin, xmin, ymax, xmax] box with each row of `boxes` (0 where both are empty)."""
    lo = torch.maximum(box[:2], boxes[:, :2])
    hi = torch.minimum(box[2:], boxes[:, 2:])
    inter = (hi - lo).clamp_min(0).prod(dim=1)
    area = (box[2:] - box[:2]).clamp_min(0).prod()
    areas = (boxes[:, 2:] - boxes[:, :2]).clamp_min(0).prod(dim=1)
    union = area + areas - inter
    return torch.where(union > 0, inter / union.clamp_min(torch.finfo(union.dtype).tiny), torch.zeros_like(union))


@register_plugin(PluginType.Metric, "1.0")
class BoxAgreementMetric(OptBaseMetric):
    def __init__(self, layout="ssd", iou="0.5"):
        layout = str(layout).strip().lower()
        if layout not in LAYOUTS:
            raise PluginError(f"BoxAgreementMetric: layout must be one of {', '.join(LAYOUTS)}, got '{layout}'")
        self.positions = LAYOUTS[layout]
        try:
            self.iou = float(str(iou).strip())
        except ValueError:
            raise PluginError(f"BoxAgreementMetric: iou must be a number, got '{iou}'") from None
        if not 0 < self.iou <= 1:
            raise PluginError(f"BoxAgreementMetric: iou must be in (0, 1], got {self.iou}")
        self.reset()

    def reset(self):
        self.found = 0
        self.total = 0

    def detections(self, pred, sample: int):
        """(classes, boxes) of one sample's detections, one row per box."""
        at_total, at_labels, at_boxes, at_counts = self.positions
        if len(pred) <= max(self.positions):
            raise DatasetError(f"BoxAgreementMetric: the model has {len(pred)} outputs; this layout reads outputs "
                               f"up to {max(self.positions)} (DecodeBox/Region then NMS)")
        groups = int(round(float(pred[at_total][sample].reshape(-1)[0])))
        labels = pred[at_labels][sample].reshape(-1)[:groups].round().long()
        counts = pred[at_counts][sample].reshape(-1)[:groups].round().long().clamp_min(0)
        boxes = pred[at_boxes][sample].reshape(-1, 4).float()
        n = min(int(counts.sum()), boxes.shape[0])
        return torch.repeat_interleave(labels, counts)[:n], boxes[:n]

    @staticmethod
    def label_boxes(target, sample: int):
        """(classes, boxes) of one sample's labels."""
        if target is None or is_no_label(target) or not isinstance(target, dict) \
                or "label_index" not in target or "bbox" not in target:
            raise DatasetError("BoxAgreementMetric: expected box labels {'label_index': [...], 'bbox': [...]} "
                               "per sample, as the VOC and COCO datasets give them")
        classes = torch.as_tensor(target["label_index"][sample]).reshape(-1).round().long()
        boxes = torch.as_tensor(target["bbox"][sample]).reshape(-1, 4).float()
        if classes.numel() != boxes.shape[0]:
            raise DatasetError(f"BoxAgreementMetric: sample {sample} has {classes.numel()} label classes "
                               f"and {boxes.shape[0]} label boxes")
        return classes, boxes

    def __call__(self, pred, target):
        for sample in range(pred[0].shape[0]):
            classes, boxes = self.detections(pred, sample)
            want_classes, want_boxes = self.label_boxes(target, sample)
            for c, box in zip(want_classes.tolist(), want_boxes):
                same = boxes[classes == c]
                self.found += int(same.shape[0] > 0 and bool((box_iou(box, same) >= self.iou).any()))
            self.total += want_classes.numel()

    def compute(self):
        return self.found / self.total if self.total else 0.0

    def report(self):
        return f"BoxAgreementMetric: {self.found} of {self.total} label boxes found ({self.compute():.6f})"
