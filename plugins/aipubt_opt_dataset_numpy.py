"""NumpyDataset: one .npy of inputs, first axis the sample; optional .npy of labels
(one per sample). Without labels each sample's label is -1 (no label)."""
from npuopt.datasets_common import NumpyDatasetBase
from npuopt.framework import *


@register_plugin(PluginType.Dataset, "1.0")
class NumpyDataset(NumpyDatasetBase):
    """Samples are the rows of the array as stored; see NumpyDatasetBase."""
