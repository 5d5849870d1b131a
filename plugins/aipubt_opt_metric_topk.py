"""TopKMetric(k): fraction of samples whose label is among the k highest scores of output 0."""
import torch

from npuopt.framework import *


@register_plugin(PluginType.Metric, "1.0")
class TopKMetric(OptBaseMetric):
    def __init__(self, k="1"):
        try:
            self.k = int(k)
        except ValueError:
            raise PluginError(f"TopKMetric: k must be an integer, got '{k}'") from None
        if self.k < 1:
            raise PluginError(f"TopKMetric: k must be >= 1, got {self.k}")
        self.reset()

    def reset(self):
        self.correct = 0
        self.total = 0

    def __call__(self, pred, target):
        scores = pred[0].reshape(pred[0].shape[0], -1).float()
        labels = torch.as_tensor(target).reshape(-1).to(scores.device).long()
        if labels.numel() != scores.shape[0]:
            raise DatasetError(f"TopKMetric: {labels.numel()} labels for a batch of {scores.shape[0]} outputs")
        if labels.numel() and (labels.min() < 0 or labels.max() >= scores.shape[1]):
            raise DatasetError(f"TopKMetric: labels must be class indices in [0, {scores.shape[1]}), "
                               f"got values from {labels.min().item()} to {labels.max().item()}")
        top = scores.topk(min(self.k, scores.shape[1]), dim=1).indices
        self.correct += (top == labels[:, None]).any(dim=1).sum().item()
        self.total += labels.numel()

    def compute(self):
        return self.correct / self.total if self.total else 0.0
