"""CosDistanceMetric(index=0): mean cosine similarity between output `index` and a
reference (the label: e.g. the float model's outputs saved as .npy), computed per
sample over all its elements, then averaged over samples. 1 is a perfect match;
two all-zero vectors count as 1, one all-zero vector against another as 0."""
import torch

from npuopt.datasets_common import ReferenceMetric
from npuopt.framework import *


@register_plugin(PluginType.Metric, "1.0")
class CosDistanceMetric(ReferenceMetric):
    def reset(self):
        self.total = 0.0
        self.count = 0

    def update(self, out, ref):
        dot = (out * ref).sum(dim=1)
        norms = out.norm(dim=1) * ref.norm(dim=1)
        both_zero = (out.abs().sum(dim=1) == 0) & (ref.abs().sum(dim=1) == 0)
        cos = torch.where(norms > 0, dot / norms.clamp_min(torch.finfo(norms.dtype).tiny), both_zero.to(dot.dtype))
        self.total += cos.sum().item()
        self.count += cos.numel()

    def compute(self):
        return self.total / self.count if self.count else 0.0
