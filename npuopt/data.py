"""Datasets and metrics from the cfg: plugin lookup, batching, checks of what they yield."""
import re
from typing import Iterator, List, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from .errors import DatasetError, PluginError
from .registry import PLUGINS, PluginType
from .tensor import PyTensor


def make_dataset(name: str, data_file: str, label_file: str = None):
    cls = PLUGINS[PluginType.Dataset].get(name)
    if cls is None:
        known = ", ".join(PLUGINS[PluginType.Dataset].keys()) or "none"
        raise PluginError(f"dataset plugin '{name}' not found (known: {known})")
    try:
        dataset = cls(data_file, label_file) if label_file else cls(data_file)
    except (DatasetError, PluginError):
        raise
    except Exception as e:
        raise DatasetError(f"dataset '{name}' could not open '{data_file}': {type(e).__name__}: {e}") from None
    if len(dataset) == 0:
        raise DatasetError(f"dataset '{name}' on '{data_file}' is empty")
    return dataset


def parse_metric_spec(spec: str) -> Tuple[str, List[str]]:
    """'TopKMetric(5)' -> ('TopKMetric', ['5'])."""
    m = re.fullmatch(r"\s*([A-Za-z_][\w.]*)\s*(?:\((.*)\))?\s*", spec)
    args = [a.strip() for a in m.group(2).split(",") if a.strip()] if m.group(2) else []
    return m.group(1), args


def make_metrics(specs: Sequence[str]):
    metrics = []
    for spec in specs:
        name, args = parse_metric_spec(spec)
        cls = PLUGINS[PluginType.Metric].get(name)
        if cls is None:
            known = ", ".join(PLUGINS[PluginType.Metric].keys()) or "none"
            raise PluginError(f"metric plugin '{name}' not found (known: {known})")
        try:
            metrics.append((spec, cls(*args)))
        except Exception as e:
            raise PluginError(f"metric '{spec}' rejected its arguments {args}: {e}") from None
    return metrics


def _to_tensor(value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value))


def batches(dataset, name: str, batch_size: int, workers: int) -> Iterator:
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers)
    try:
        for batch in loader:
            yield batch
    except (DatasetError, PluginError):
        raise
    except Exception as e:
        raise DatasetError(f"dataset '{name}' failed while loading a batch: {type(e).__name__}: {e}") from None


def split_batch(batch, inputs: Sequence[PyTensor], name: str, device) -> Tuple[List[torch.Tensor], object]:
    """(samples, labels) of one batch, samples checked against the graph's inputs."""
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        samples, labels = batch
    else:
        samples, labels = batch, None
    if not isinstance(samples, (list, tuple)):
        samples = [samples]
    if len(samples) != len(inputs):
        raise DatasetError(f"dataset '{name}' yields {len(samples)} input(s) per sample; the graph takes "
                           f"{len(inputs)} ({', '.join(t.name for t in inputs)})")
    values = []
    for t, s in zip(inputs, samples):
        try:
            s = _to_tensor(s)
        except (TypeError, ValueError, RuntimeError):
            raise DatasetError(f"dataset '{name}' yields a {type(s).__name__} for input '{t.name}', "
                               f"not an array of numbers") from None
        if tuple(s.shape[1:]) != tuple(t.ir_shape[1:]):
            raise DatasetError(f"dataset '{name}' yields shape {list(s.shape[1:])} per sample for input "
                               f"'{t.name}'; the IR says {list(t.ir_shape[1:])} (without the batch axis)")
        if t.dtype.is_float and not s.dtype.is_floating_point:
            s = s.to(t.dtype.torch_dtype)
        elif t.dtype.is_float != s.dtype.is_floating_point:
            raise DatasetError(f"dataset '{name}' yields {s.dtype} for input '{t.name}', which is {t.dtype.value}")
        values.append(s.to(device=device, dtype=t.dtype.torch_dtype if t.dtype.is_float else s.dtype))
    return values, labels
