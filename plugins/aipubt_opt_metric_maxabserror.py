"""MaxAbsErrorMetric(index=0): the largest |output - reference| over every element of
every sample, for output `index`; the reference is the label (e.g. the float
model's outputs saved as .npy). 0 is a perfect match; NaN if any difference is NaN."""
import math

from npuopt.datasets_common import ReferenceMetric
from npuopt.framework import *


@register_plugin(PluginType.Metric, "1.0")
class MaxAbsErrorMetric(ReferenceMetric):
    def reset(self):
        self.value = 0.0

    def update(self, out, ref):
        if out.numel():
            v = (out - ref).abs().max().item()
            if math.isnan(v) or v > self.value:  # a NaN stays visible
                self.value = v

    def compute(self):
        return self.value
