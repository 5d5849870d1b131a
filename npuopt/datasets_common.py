"""Shared code of the built-in dataset and metric plugins.

Plugin files are imported one by one by path, so what several of them share
must live in an importable module: this one. User plugins may use it too.
"""
import os
from typing import List, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from .errors import DatasetError, PluginError
from .metric import OptBaseMetric

# The label of a sample when the dataset has none. A collated batch of it is an
# integer tensor of -1s, which the metrics recognise and report as "no labels".
NO_LABEL = -1


def no_label() -> np.ndarray:
    return np.array(NO_LABEL, dtype=np.int64)


def is_no_label(target) -> bool:
    """True for a batch of NO_LABEL markers, i.e. the dataset was given no labels."""
    if not isinstance(target, (torch.Tensor, np.ndarray)):
        return False
    t = torch.as_tensor(target)
    return t.ndim <= 1 and not t.dtype.is_floating_point and t.numel() > 0 and bool((t == NO_LABEL).all())


def require_file(path, who: str, what: str) -> str:
    if not path:
        raise DatasetError(f"{who}: no {what} given")
    path = str(path)
    if os.path.isdir(path):
        raise DatasetError(f"{who}: {what} '{path}' is a folder, not a file")
    if not os.path.isfile(path):
        raise DatasetError(f"{who}: {what} '{path}' not found")
    return path


def load_npy(path, who: str, what: str, allow_objects: bool = False):
    """np.load with one-line errors. An .npz comes back as {name: array} in stored
    order. Object arrays are pickles: loaded only when `allow_objects`, and only
    from a real .npy file (never from a bare pickle)."""
    path = require_file(path, who, what)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY" and magic[:4] != b"PK\x03\x04":
        raise DatasetError(f"{who}: {what} '{path}' is not an .npy or .npz file")
    try:
        loaded = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "Python objects" not in str(e):
            raise DatasetError(f"{who}: {what} '{path}' is not a readable .npy file: {e}") from None
        if not allow_objects:
            hint = "; for several inputs use NumpyMultiInputDataset" if what == "data file" else ""
            raise DatasetError(f"{who}: {what} '{path}' holds Python objects, not one numeric array{hint}") from None
        try:
            loaded = np.load(path, allow_pickle=True)
        except Exception as e:
            raise DatasetError(f"{who}: {what} '{path}' is not a readable .npy file: "
                               f"{type(e).__name__}: {e}") from None
    except Exception as e:
        raise DatasetError(f"{who}: {what} '{path}' is not a readable .npy/.npz file: "
                           f"{type(e).__name__}: {e}") from None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            try:
                return {name: loaded[name] for name in loaded.files}
            except Exception as e:
                raise DatasetError(f"{who}: {what} '{path}' cannot be read as numeric arrays: "
                                   f"{type(e).__name__}: {e}") from None
    return loaded


def load_label_array(label_file, count: int, who: str) -> np.ndarray:
    """Labels from an .npy, one per sample along the first axis."""
    labels = load_npy(label_file, who, "label file")
    if isinstance(labels, dict):
        raise DatasetError(f"{who}: label file '{label_file}' is an .npz archive; give one .npy array "
                           f"with one label per sample along the first axis")
    if labels.ndim < 1:
        raise DatasetError(f"{who}: label file '{label_file}' holds a scalar; expected one label per sample "
                           f"along the first axis")
    if labels.dtype.kind not in "biuf":
        raise DatasetError(f"{who}: label file '{label_file}' holds {labels.dtype} values; expected numbers "
                           f"(class indices or reference outputs)")
    if len(labels) != count:
        raise DatasetError(f"{who}: label file '{label_file}' has {len(labels)} labels for {count} samples")
    return labels


def numeric_array(arr, who: str, where: str) -> np.ndarray:
    """An input's array; an object array of per-sample arrays is stacked."""
    arr = np.asarray(arr) if not isinstance(arr, np.ndarray) else arr
    if arr.dtype == object:
        try:
            arr = np.stack([np.asarray(e) for e in arr])
        except Exception:
            arr = None
        if arr is None or arr.dtype == object:
            raise DatasetError(f"{who}: {where} is not a numeric array (or a list of equally shaped arrays)")
    if arr.dtype.kind not in "biuf":
        raise DatasetError(f"{who}: {where} has dtype {arr.dtype}; expected numbers")
    if arr.ndim < 1:
        raise DatasetError(f"{who}: {where} is a scalar; expected samples along the first axis")
    return arr


class NumpyDatasetBase(Dataset):
    """Arrays with samples along the first axis (one per graph input), optional .npy
    labels. Subclasses choose how the file maps to inputs (`read_inputs`) and may
    reshape each sample (`transform`)."""

    def __init__(self, data_file, label_file=None):
        self.who = type(self).__name__
        inputs = self.read_inputs(data_file)
        if not inputs:
            raise DatasetError(f"{self.who}: data file '{data_file}' holds no arrays")
        counts = [len(a) for a in inputs]
        if len(set(counts)) > 1:
            raise DatasetError(f"{self.who}: the inputs in '{data_file}' have different sample counts {counts}; "
                               f"every input needs one entry per sample")
        self.inputs: List[np.ndarray] = inputs
        self.count = counts[0]
        self.labels = load_label_array(label_file, self.count, self.who) if label_file else None

    def read_inputs(self, data_file) -> List[np.ndarray]:
        data = load_npy(data_file, self.who, "data file")
        if isinstance(data, dict):
            raise DatasetError(f"{self.who}: data file '{data_file}' is an .npz archive; {self.who} reads one "
                               f".npy array (use NumpyMultiInputDataset for several inputs)")
        return [numeric_array(data, self.who, f"data file '{data_file}'")]

    def transform(self, sample: np.ndarray) -> np.ndarray:
        return sample

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        samples = tuple(self.transform(np.array(a[index])) for a in self.inputs)
        label = np.array(self.labels[index]) if self.labels is not None else no_label()
        return (samples[0] if len(samples) == 1 else samples), label


def transposing_inputs(inputs: Sequence[np.ndarray], who: str, data_file, layout: str) -> List[np.ndarray]:
    """Checks that every input is 4-D (N + three sample axes) before a layout change."""
    for i, a in enumerate(inputs):
        if a.ndim != 4:
            raise DatasetError(f"{who}: data file '{data_file}' has shape {list(a.shape)}; expected 4-D "
                               f"{layout} data (samples along the first axis)")
    return list(inputs)


def parse_output_index(who: str, index) -> int:
    try:
        value = int(str(index).strip())
    except ValueError:
        raise PluginError(f"{who}: the output index must be an integer, got '{index}'") from None
    if value < 0:
        raise PluginError(f"{who}: the output index must be >= 0, got {value}")
    return value


class ReferenceMetric(OptBaseMetric):
    """A metric comparing output `index` with a reference output given as the label
    (e.g. the float model's outputs saved as .npy). `update` gets both as float64
    (batch, elements) tensors."""

    def __init__(self, index="0"):
        self.who = type(self).__name__
        self.index = parse_output_index(self.who, index)
        self.reset()

    def pair(self, pred, target):
        """(output, reference) as float64 (batch, -1), after checking they fit."""
        if self.index >= len(pred):
            raise PluginError(f"{self.who}: output index {self.index} asked for, but the graph has "
                              f"{len(pred)} output(s)")
        out = pred[self.index]
        if target is None or is_no_label(target):
            raise DatasetError(f"{self.who}: the dataset gave no reference outputs; set the cfg field "
                               f"'label' to an .npy of the expected outputs (one per sample)")
        if isinstance(target, (list, tuple)):
            raise DatasetError(f"{self.who}: expected one reference array per sample as the label, got "
                               f"{len(target)} arrays per sample")
        try:
            ref = torch.as_tensor(np.asarray(target) if not isinstance(target, torch.Tensor) else target)
        except Exception:
            raise DatasetError(f"{self.who}: the labels are not numeric arrays") from None
        if ref.dtype == torch.bool or ref.dtype.is_complex:
            raise DatasetError(f"{self.who}: the reference outputs have dtype {ref.dtype}; expected numbers")
        # size-1 axes are ignored, so (N, 1000) references fit a (N, 1, 1, 1000) output
        got = [d for d in ref.shape[1:] if d != 1]
        want = [d for d in out.shape[1:] if d != 1]
        if ref.ndim == 0 or ref.shape[0] != out.shape[0] or got != want:
            hint = ("; these look like class indices: set the cfg field 'label' to an .npy of the expected "
                    "outputs" if ref.ndim == 1 and not ref.dtype.is_floating_point else "")
            raise DatasetError(f"{self.who}: reference outputs of shape {list(ref.shape)} do not fit output "
                               f"{self.index} of shape {list(out.shape)} (batch first){hint}")
        out = out.detach().reshape(out.shape[0], -1).to(torch.float64)
        return out, ref.to(device=out.device, dtype=torch.float64).reshape(out.shape)

    def __call__(self, pred, target):
        self.update(*self.pair(pred, target))

    def update(self, out: torch.Tensor, ref: torch.Tensor) -> None:
        raise NotImplementedError
