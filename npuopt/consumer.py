"""Datasets that take each batch's outputs back: the Compass Optimizer's `consumer`.

A dataset plugin with a `consumer` attribute (OPT's llama2 dataset, its BEVFormer
datasets: `self.consumer = None` in `__init__`) reads, while a batch is loaded, the
outputs of the batch before it from `self.consumer.output_tensors[i].betensor`: a
decoder's present K/V become the next step's history. OPT sets `consumer` to the graph
its calibration and metric loops run, and batches are loaded one at a time, each after
the forward of the one before. npuopt does the same in every loop that reads such a
dataset (Feed.Shard.read): the consumer is a `PyGraph` whose output tensors hold the
outputs of the batch just run, as the metrics see them (a quantized graph's
dequantized: the history it fed back is what its integers stand for, not the
integers as if they were floats); batches are loaded in this process (no DataLoader
workers, which would hold copies of the dataset). The batches form a chain, which the
ranks of a data-parallel job cannot share: such a run is refused with one line."""
from typing import Iterator, Optional, Sequence, Tuple

import torch

from .errors import ConfigError
from .graph import PyGraph
from .tensor import PyTensor

_ABSENT = object()


def reads_outputs(dataset) -> bool:
    """Whether the dataset takes the outputs of each batch back (it has a `consumer`)."""
    return dataset is not None and hasattr(dataset, "consumer")


def refuse_in_job(dataset, where: str, ranks) -> None:
    """One line when a dataset that takes outputs back is read in a job of several ranks."""
    if ranks.parallel and reads_outputs(dataset):
        raise ConfigError(f"{where} takes each batch's outputs back (its 'consumer'): every batch depends on the "
                          f"outputs of the one before, so {ranks.world} ranks cannot share them; run it in one "
                          f"process (without torchrun)")


class StepOutputs(PyGraph):
    """The graph a dataset's `consumer` names: the model's name and output tensors (names,
    shapes and dtypes as the IR's), which hold the outputs of the batch just run; before
    the first batch has run (the other samples of the first batch load before it), zeros
    of the IR's shapes."""

    def __init__(self, graph: PyGraph):
        super().__init__(graph.name)
        self.output_tensors = [PyTensor(t.name, torch.zeros(tuple(t.ir_shape)), t.dtype, t.ir_shape)
                               for t in graph.output_tensors]

    def hold(self, outputs: Sequence[torch.Tensor]) -> None:
        for t, value in zip(self.output_tensors, outputs):
            t.betensor = value.detach()


class Reading:
    """(unit, batch) pairs of one read of a dataset, in order. For a dataset that takes
    outputs back, its `consumer` is this read's while a batch loads (batches load in this
    process, within `next`; reads of several graphs may take turns), and its own value
    again after, also when a caller stops early; `ran(outputs)` hands it the outputs of
    the batch just read (otherwise a no-op)."""

    def __init__(self, pairs: Iterator[Tuple[int, object]], dataset=None, consumer: Optional[StepOutputs] = None):
        self._pairs, self.dataset, self.consumer = iter(pairs), dataset, consumer

    def __iter__(self):
        return self

    def __next__(self) -> Tuple[int, object]:
        if self.consumer is None:
            return next(self._pairs)
        own = self.dataset.__dict__.get("consumer", _ABSENT)
        self.dataset.consumer = self.consumer
        try:
            return next(self._pairs)
        finally:
            if own is _ABSENT:
                del self.dataset.consumer
            else:
                self.dataset.consumer = own

    def ran(self, outputs: Sequence[torch.Tensor]) -> None:
        if self.consumer is not None:
            self.consumer.hold(outputs)
