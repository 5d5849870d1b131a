"""Datasets and metrics from the cfg: plugin lookup, batching, checks of what they yield.

What a dataset may yield for a graph input (split_batch): arrays or tensors of
numbers, one per sample, shaped as the IR's input without the batch axis. For a
float input, float data of any width is converted to the input's dtype
(float32) and integer data (int8/uint8/int16/int32/int64...) is accepted and
converted to float with its values unchanged (pixels 0..255 stay 0.0..255.0; no
scaling). Booleans, complex numbers, text and Python objects are errors. An
integer input (an index-like graph input) takes integer data only.
Every problem is a DatasetError of one line naming the dataset, and the input
where there is one; errors raised in DataLoader worker processes too.
"""
import operator
import re
import sys
from typing import Iterator, List, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from .dtype import Dtype
from .errors import DatasetError, NpuoptError, PluginError, one_line
from .registry import PLUGINS, PluginType, failed_imports, plugin_code
from .tensor import PyTensor


def make_dataset(name: str, data_file: str, label_file: str = None, field: str = "data"):
    """The dataset plugin `name` opened on `data_file`, the cfg field `field`, with its number
    of samples checked: whatever a user's plugin raises there (a sys.exit too), or a length
    that is not a count, is one line naming the field, the plugin's file and its class."""
    reg = PLUGINS[PluginType.Dataset].best(name)
    if reg is None:
        known = ", ".join(PLUGINS[PluginType.Dataset].keys()) or "none"
        raise PluginError(f"dataset plugin '{name}' not found (known: {known}){failed_imports()}")
    cls, where = reg.obj, dataset_named(name, field)
    try:
        dataset = cls(data_file, label_file) if label_file else cls(data_file)
    except (Exception, SystemExit) as e:
        if reg.builtin and isinstance(e, NpuoptError):  # a built-in dataset's own message names the file
            raise
        raise DatasetError(f"{where} could not open '{data_file}': {_raised(e)}") from None
    if _length(dataset, where, reg.builtin) == 0:
        raise DatasetError(f"{where} on '{data_file}' is empty")
    return dataset


class _ExitRaised(Dataset):
    """A dataset (or a collate function) whose sys.exit is raised as a RuntimeError saying
    so: in a DataLoader worker a SystemExit ends the worker, which torch reports later,
    anywhere in the main process, without a word of the dataset. A class, not a closure,
    so that worker processes can receive it."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        return self._run(self.inner.__getitem__, index)

    def __call__(self, samples):
        return self._run(self.inner, samples)

    @staticmethod
    def _run(fn, arg):
        try:
            return fn(arg)
        except SystemExit as e:
            raise RuntimeError(f"it called sys.exit({e.code!r})") from None


def dataset_named(name: str, field: str = None) -> str:
    """How a message names the dataset plugin `name`: the cfg field it reads (where known),
    the file of a user's plugin, and its class: "field 'data': plugin 'FILE': dataset 'CLASS'"."""
    reg = PLUGINS[PluginType.Dataset].best(name)
    return (f"field '{field}': " if field else "") + \
        (f"plugin '{reg.source}': " if reg is not None and not reg.builtin else "") + \
        f"dataset '{reg.key if reg is not None else name}'"


def _length(dataset, where: str, builtin: bool) -> int:
    """len(dataset), asked of its __len__ directly so that a value that is not a count of
    samples (negative, a float, text, beyond sys.maxsize) is said as such."""
    method = getattr(type(dataset), "__len__", None)
    if method is None:
        raise DatasetError(f"{where}: its class defines no __len__ (the number of samples)")
    try:
        value = method(dataset)
    except (Exception, SystemExit) as e:
        if builtin and isinstance(e, NpuoptError):
            raise
        raise DatasetError(f"{where}: __len__() failed: {_raised(e)}") from None
    try:
        count = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        count = None
    if count is None or not 0 <= count <= sys.maxsize:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise DatasetError(f"{where}: __len__() returned {shown} ({type(value).__name__}); expected the number "
                           f"of samples, an integer >= 0")
    return count


def _raised(e: BaseException) -> str:
    """What a dataset's code raised, for a message: its type and message on one line (an
    NpuoptError, e.g. OPT_FATAL's, its message alone), or the sys.exit it called."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r})"
    if isinstance(e, NpuoptError):
        return one_line(e)
    return f"{type(e).__name__}: {one_line(e)}"


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
            raise PluginError(f"metric plugin '{name}' not found (known: {known}){failed_imports()}")
        try:
            metrics.append((spec, cls(*args)))
        except Exception as e:
            raise PluginError(f"metric '{spec}' rejected its arguments {args}: {e}") from None
    return metrics


def call_metric(spec: str, metric, pred, target, labels_from: str) -> None:
    """metric(pred, target). Its DatasetError (labels that do not fit) names where the labels
    come from (`labels_from`); any other failure of a user's metric names its plugin file."""
    try:
        with plugin_code(_registration(spec), f"metric '{spec}' on {labels_from}"):
            metric(pred, target)
    except DatasetError as e:
        raise DatasetError(f"{labels_from}: {e}") from None


def metric_value(spec: str, metric):
    """metric.compute() as a number, or a list of numbers when it gives several (a tuple or an
    array, e.g. accuracy, FP, FN), as the Compass Optimizer reports them; a user's metric
    failing there names its plugin file."""
    with plugin_code(_registration(spec), f"metric '{spec}'.compute()"):
        numbers = _numbers(metric.compute())
    return numbers[0] if len(numbers) == 1 else numbers


def _numbers(value) -> List[float]:
    if isinstance(value, (tuple, list)):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
    return np.asarray(value, dtype=np.float64).reshape(-1).tolist()


def _registration(spec: str):
    return PLUGINS[PluginType.Metric].best(parse_metric_spec(spec)[0])


def label_batches(dataset, name: str, size: int) -> Iterator[Tuple[int, torch.Tensor]]:
    """(first sample, labels) for every `size` samples of a built-in dataset, from its label
    array (`labels`, one per sample) without reading the data: checked up front. Nothing for
    a user's dataset, whose labels are checked as they come."""
    reg = PLUGINS[PluginType.Dataset].best(name)
    labels = getattr(dataset, "labels", None)
    if reg is None or not reg.builtin or not isinstance(labels, np.ndarray) or len(labels) != len(dataset):
        return
    for start in range(0, len(labels), size):
        yield start, torch.as_tensor(native(np.array(labels[start:start + size])))


def native(value):
    """Arrays in the machine's byte order, within tuples, lists and dicts too (torch reads
    no other): a big-endian .npy is data like any other."""
    if isinstance(value, np.ndarray) and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    if isinstance(value, (tuple, list)):
        items = [native(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a namedtuple
    if isinstance(value, dict):
        return {k: native(v) for k, v in value.items()}
    return value


def _to_tensor(value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value))


class _Collate:
    """default_collate, with samples that cannot be stacked reported as a DatasetError
    (a class, not a closure, so that worker processes can receive it)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, samples):
        try:
            return default_collate(native(samples))
        except TypeError as e:
            found = re.search(r"found (\S+)$", str(e))
            what = f"values of type {found.group(1)}" if found else f"values that cannot be batched ({one_line(e)})"
            raise DatasetError(f"dataset '{self.name}' yields {what}; a sample must be arrays or tensors of "
                               f"numbers (integers or floats)") from None
        except RuntimeError as e:
            raise DatasetError(f"dataset '{self.name}' yields samples that cannot be stacked into a batch: "
                               f"{one_line(str(e))}") from None


_WORKER = re.compile(r"^Caught (\w+) in DataLoader (worker process \d+)\.\s*\nOriginal Traceback")


def worker_error(message: str):
    """(worker, exception type name, its message on one line) from the text of an exception
    that a DataLoader worker raised and the DataLoader re-raised in this process (the
    worker's whole traceback); None for other messages."""
    m = _WORKER.match(message)
    if m is None:
        return None
    lines = message.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    start = frames[-1] + 1 if frames else 1
    while start < len(lines) and lines[start].startswith(" "):  # the frame's source lines
        start += 1
    text = one_line("\n".join(lines[start:]))
    head = re.match(r"^([A-Za-z_][\w.]*?)(?::\s*|$)(.*)$", text)
    if head and head.group(1).rsplit(".", 1)[-1] == m.group(1):
        text = head.group(2)
    return m.group(2), m.group(1), text


def collate_of(dataset):
    """The dataset's own `collate_fn` when its plugin defines one (used as the Compass
    Optimizer does, e.g. for data whose batch axis is not the first), else None."""
    fn = getattr(dataset, "collate_fn", None)
    return fn if callable(fn) else None


def set_batch_dims(cfg) -> None:
    """data_batch_dim / label_batch_dim set on the dataset plugin class, where its
    collate_fn and __getitem__ read them, as the Compass Optimizer does."""
    cls = PLUGINS[PluginType.Dataset].get(cfg.dataset)
    if cls is None:
        return
    for key in ("data_batch_dim", "label_batch_dim"):
        try:
            setattr(cls, key, getattr(cfg, key))
        except (AttributeError, TypeError):
            pass
    if (cfg.data_batch_dim or cfg.label_batch_dim) and not callable(getattr(cls, "collate_fn", None)):
        from .logger import OPT_WARN
        OPT_WARN(f"data_batch_dim/label_batch_dim are not 0 but dataset '{cfg.dataset}' defines no collate_fn: "
                 f"batches are stacked on axis 0")


def metric_report(metric) -> str:
    """What a metric plugin's own report() says ('' when it keeps the interface's default)."""
    from .metric import OptBaseMetric
    report = getattr(type(metric), "report", None)
    if report is None or report is OptBaseMetric.report:
        return ""
    try:
        return one_line(str(metric.report()))
    except Exception as e:
        raise PluginError(f"metric '{type(metric).__name__}'.report() failed: {type(e).__name__}: {e}") from None


SHUFFLE_SEED = 0  # shuffled data comes in one order, the same in every run and on every rank


def batch_indices(length: int, size: int, shuffle: bool = False, seed: int = SHUFFLE_SEED) -> List[List[int]]:
    """The samples of each batch of `size` of a dataset of `length`, in order (shuffled
    with a fixed seed: runs are reproducible and every rank of a job agrees)."""
    order = torch.randperm(length, generator=torch.Generator().manual_seed(seed)).tolist() \
        if shuffle else list(range(length))
    return [order[i:i + size] for i in range(0, length, size)]


def batches(dataset, name: str, batch_size: int, workers: int, shuffle: bool = False, collate_fn=None,
            field: str = None, batch_sampler: List[List[int]] = None) -> Iterator:
    """The batches of dataset plugin `name` (read for the cfg field `field`): of
    `batch_size` in order, or the samples of each list of `batch_sampler`. What its code
    raises while loading one (a sys.exit too, in DataLoader workers too) is one DatasetError
    naming the field, a user's plugin file and the dataset."""
    collate_fn = collate_fn or _Collate(name)
    if workers:
        dataset, collate_fn = _ExitRaised(dataset), _ExitRaised(collate_fn)
    if batch_sampler is None:
        batch_sampler = batch_indices(len(dataset), batch_size, shuffle)
    loader = DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers, collate_fn=collate_fn)
    try:
        for batch in loader:
            yield batch
    except (Exception, SystemExit) as e:
        text = str(e)
        from_worker = worker_error(text)
        if from_worker is not None:
            worker, kind, text = from_worker
            if isinstance(e, (DatasetError, PluginError)):
                raise type(e)(text) from None
            raise DatasetError(f"{dataset_named(name, field)} failed while loading a batch ({worker}): "
                               f"{kind}: {text}") from None
        if isinstance(e, (DatasetError, PluginError)):
            raise
        raise DatasetError(f"{dataset_named(name, field)} failed while loading a batch: {_raised(e)}") from None


def split_batch(batch, inputs: Sequence[PyTensor], name: str, device, batch_dim: int = 0,
                without_batch_dim: bool = False) -> Tuple[List[torch.Tensor], object]:
    """(samples, labels) of one batch, samples checked against the graph's inputs: shaped
    as the IR's input but for the batch axis (`batch_dim`; without_batch_dim: the IR's
    shape has no batch axis and the data adds one in front)."""
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        samples, labels = batch
    else:
        samples, labels = batch, None
    if isinstance(samples, (list, tuple)) and samples and all(isinstance(s, (str, bytes)) for s in samples):
        raise DatasetError(f"dataset '{name}' yields text ({type(samples[0]).__name__}) as samples, "
                           f"not arrays of numbers")
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
        axis = 0 if without_batch_dim else batch_dim
        got = [d for i, d in enumerate(s.shape) if i != axis]
        want = list(t.ir_shape) if without_batch_dim else [d for i, d in enumerate(t.ir_shape) if i != axis]
        if got != want:
            raise DatasetError(f"dataset '{name}' yields shape {got} per sample for input "
                               f"'{t.name}'; the IR says {want} (without the batch axis)")
        if (s.dtype == torch.bool and t.dtype is not Dtype.BOOL) or s.dtype.is_complex:
            raise DatasetError(f"dataset '{name}' yields {s.dtype} values for input '{t.name}'; expected "
                               f"real numbers (integers or floats)")
        if t.dtype.is_float and not s.dtype.is_floating_point:
            s = s.to(t.dtype.torch_dtype)
        elif t.dtype.is_float != s.dtype.is_floating_point:
            raise DatasetError(f"dataset '{name}' yields {s.dtype} for input '{t.name}', which is {t.dtype.value}")
        values.append(s.to(device=device, dtype=t.dtype.torch_dtype if t.dtype.is_float else s.dtype))
    return values, labels
