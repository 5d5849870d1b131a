"""NumpyDataset: one .npy of inputs, first axis the sample; optional .npy of labels."""
import numpy as np

from npuopt.framework import *


@register_plugin(PluginType.Dataset, "1.0")
class NumpyDataset(Dataset):
    def __init__(self, data_file, label_file=None):
        self.data = np.load(data_file, mmap_mode="r")
        if self.data.ndim < 1:
            raise DatasetError(f"'{data_file}' holds a scalar; expected samples along the first axis")
        self.labels = None
        if label_file:
            self.labels = np.load(label_file, mmap_mode="r")
            if len(self.labels) != len(self.data):
                raise DatasetError(f"'{label_file}' has {len(self.labels)} labels for "
                                   f"{len(self.data)} samples in '{data_file}'")

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        sample = np.array(self.data[index])
        label = np.array(self.labels[index]) if self.labels is not None else np.zeros((), np.int64)
        return sample, label
