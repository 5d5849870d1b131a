"""The metric plugin interface, as the Compass Optimizer defines it."""
from abc import ABC, abstractmethod
from typing import List

import torch


class OptBaseMetric(ABC):
    """A metric accumulates over batches: `__call__(pred, target)` once per batch,
    where `pred` is the list of the graph's output tensors (batch first) and
    `target` the batch of labels; `compute()` returns one number."""

    @abstractmethod
    def __call__(self, pred: List[torch.Tensor], target) -> None: ...

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def compute(self) -> float: ...

    def report(self) -> str:
        return f"{type(self).__name__}: {self.compute():.6f}"
