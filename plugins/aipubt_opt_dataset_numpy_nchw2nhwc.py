"""NumpyNCHW2NHWCDataset: like NumpyDataset for 4-D NCHW data, yielding NHWC
samples, since the IR's activations are NHWC while many exporters save NCHW."""
import numpy as np

from npuopt.datasets_common import NumpyDatasetBase, transposing_inputs
from npuopt.framework import *


@register_plugin(PluginType.Dataset, "1.0")
class NumpyNCHW2NHWCDataset(NumpyDatasetBase):
    def read_inputs(self, data_file):
        return transposing_inputs(super().read_inputs(data_file), self.who, data_file, "NCHW")

    def transform(self, sample):
        return np.ascontiguousarray(sample.transpose(1, 2, 0))
