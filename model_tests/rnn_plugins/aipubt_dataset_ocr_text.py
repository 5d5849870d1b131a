"""OcrTextDataset: text-line images and their texts, for OPT's OcrMetric (which compares
the decoded text with the label as a string). data: one .npy of images in the IR's
layout, first axis the sample; label: a text file, one sample's text a line."""
import numpy as np
from torch.utils.data import Dataset

from npuopt.framework import PluginType, register_plugin


@register_plugin(PluginType.Dataset, "1.0")
class OcrTextDataset(Dataset):
    def __init__(self, data_file, label_file=None):
        self.data = np.load(data_file, mmap_mode="r")
        self.texts = None
        if label_file is not None:
            with open(label_file, encoding="utf-8") as f:
                self.texts = [line.rstrip("\n") for line in f]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return [[np.array(self.data[index])], self.texts[index] if self.texts is not None else float("-inf")]
