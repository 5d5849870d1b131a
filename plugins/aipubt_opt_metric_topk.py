"""TopKMetric(k): fraction of samples whose label is among the k highest scores of output 0.

Labels are class indices, one per sample (integers, or floats with integer
values); anything else is a DatasetError rather than a silently wrong accuracy."""
import torch

from npuopt.datasets_common import is_no_label
from npuopt.framework import *


@register_plugin(PluginType.Metric, "1.0")
class TopKMetric(OptBaseMetric):
    def __init__(self, k="1"):
        try:
            self.k = int(str(k).strip())
        except ValueError:
            raise PluginError(f"TopKMetric: k must be an integer, got '{k}'") from None
        if self.k < 1:
            raise PluginError(f"TopKMetric: k must be >= 1, got {self.k}")
        self.reset()

    def reset(self):
        self.correct = 0
        self.total = 0

    def class_indices(self, target, batch: int, classes: int) -> torch.Tensor:
        """The batch's labels as int64 (batch,), or a DatasetError saying what is wrong."""
        if target is None or is_no_label(target):
            raise DatasetError("TopKMetric: the dataset gave no labels; set the cfg field 'label' "
                               "(or give the dataset a label column)")
        if isinstance(target, (list, tuple)):
            raise DatasetError(f"TopKMetric: expected one class index per sample, got {len(target)} "
                               f"label arrays per sample")
        try:
            labels = torch.as_tensor(target)
        except Exception:
            raise DatasetError("TopKMetric: the labels are not numbers") from None
        if labels.dtype == torch.bool or labels.dtype.is_complex:
            raise DatasetError(f"TopKMetric: labels have dtype {labels.dtype}; expected integer class indices")
        if labels.numel() != batch:
            raise DatasetError(f"TopKMetric: expected one class index per sample; got labels of shape "
                               f"{list(labels.shape)} for a batch of {batch}")
        labels = labels.reshape(-1)
        if labels.dtype.is_floating_point:
            if not bool((labels == labels.round()).all()):
                raise DatasetError("TopKMetric: labels must be integer class indices; got non-integer values "
                                   f"such as {labels[labels != labels.round()][0].item()}")
        labels = labels.long()
        if labels.numel() and (labels.min() < 0 or labels.max() >= classes):
            raise DatasetError(f"TopKMetric: labels must be class indices in [0, {classes}), "
                               f"got values from {labels.min().item()} to {labels.max().item()}")
        return labels

    def __call__(self, pred, target):
        scores = pred[0].reshape(pred[0].shape[0], -1).float()
        labels = self.class_indices(target, scores.shape[0], scores.shape[1]).to(scores.device)
        top = scores.topk(min(self.k, scores.shape[1]), dim=1).indices
        self.correct += (top == labels[:, None]).any(dim=1).sum().item()
        self.total += labels.numel()

    def compute(self):
        return self.correct / self.total if self.total else 0.0
