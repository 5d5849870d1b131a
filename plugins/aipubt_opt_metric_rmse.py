"""RMSEMetric(index=0): sqrt(mean((output - reference)^2)) over every element of every
sample, for output `index`; the reference is the label (e.g. the float model's
outputs saved as .npy). As all samples have one size, this is also the root of
the mean per-sample MSE. 0 is a perfect match."""
import math

from npuopt.datasets_common import ReferenceMetric
from npuopt.framework import *


@register_plugin(PluginType.Metric, "1.0")
class RMSEMetric(ReferenceMetric):
    def reset(self):
        self.squares = 0.0
        self.count = 0

    def update(self, out, ref):
        self.squares += (out - ref).pow(2).sum().item()
        self.count += out.numel()

    def compute(self):
        return math.sqrt(self.squares / self.count) if self.count else 0.0
