"""NumpyNHWC2NCHWDataset: like NumpyDataset for 4-D NHWC data, yielding NCHW
samples, for graphs whose input is NCHW (e.g. a leading Transpose)."""
import numpy as np

from npuopt.datasets_common import NumpyDatasetBase, transposing_inputs
from npuopt.framework import *


@register_plugin(PluginType.Dataset, "1.0")
class NumpyNHWC2NCHWDataset(NumpyDatasetBase):
    def read_inputs(self, data_file):
        return transposing_inputs(super().read_inputs(data_file), self.who, data_file, "NHWC")

    def transform(self, sample):
        return np.ascontiguousarray(sample.transpose(2, 0, 1))
