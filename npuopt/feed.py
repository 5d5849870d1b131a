"""Batches as the cfg says (without_batch_dim, data_batch_dim): read from a dataset,
split into graph inputs and labels, shared among the ranks of a job, and run through
a graph in chunks that fit memory."""
from typing import List

import torch
from tqdm import tqdm

from .consumer import Reading, StepOutputs, reads_outputs, refuse_in_job
from .data import batch_indices, batches, collate_of, dataset_named, split_batch
from .ranks import Ranks

FORWARD_BUDGET = 384 << 20  # bytes of working memory one forward of the evaluation may take


class Feed:
    """The cfg's batching for one graph's inputs, on one device."""

    def __init__(self, cfg, graph, device: torch.device, ranks: Ranks = None):
        self.cfg, self.graph, self.device = cfg, graph, device
        self.ranks = ranks or Ranks()

    def batch_size(self, size: int) -> int:
        """without_batch_dim: one sample a batch, as the Compass Optimizer does."""
        return 1 if self.cfg.without_batch_dim else size

    def shard(self, dataset, size: int, field: str, shuffle: bool = False, limit: int = None) -> "Shard":
        """The dataset's batches of `size` (the first `limit`) as units numbered in order;
        this rank reads only its own."""
        return Shard(self, dataset, batch_indices(len(dataset), self.batch_size(size), shuffle)[:limit], field)

    def split(self, batch):
        """(graph inputs, labels) of a batch, on the device."""
        cfg = self.cfg
        return split_batch(batch, self.graph.input_tensors, cfg.dataset, self.device,
                           batch_dim=cfg.data_batch_dim, without_batch_dim=cfg.without_batch_dim)

    def graph_inputs(self, inputs):
        """without_batch_dim: the graph takes (and its output tensors hold) the sample
        without the batch axis."""
        return [x[0] for x in inputs] if self.cfg.without_batch_dim else inputs

    def forward(self, graph, inputs, **kwargs):
        """The graph's outputs, batch first (without_batch_dim: a batch axis of 1 added back).
        A batch runs in chunks of graph.samples_within(FORWARD_BUDGET) samples, so memory
        follows the model, not metric_batch_size (outputs are per sample: the same values)."""
        inputs = self.graph_inputs(inputs)
        chunk = graph.samples_within(FORWARD_BUDGET)
        batch = inputs[0].shape[0] if inputs and inputs[0].dim() else 1
        if kwargs.get("keep_tensors") or self.cfg.without_batch_dim or batch <= chunk:
            outputs = graph.forward(inputs, **kwargs)
        else:
            parts = [[o.clone() for o in graph.forward([x[i:i + chunk] for x in inputs], **kwargs)]
                     for i in range(0, batch, chunk)]
            outputs = [torch.cat(p, dim=0) for p in zip(*parts)]
        return [o.unsqueeze(0) for o in outputs] if self.cfg.without_batch_dim else outputs


class Shard:
    """Units of a dataset (lists of its samples) in their order; iterating reads this
    rank's units only (unit i is rank i mod N's), as (unit number, batch)."""

    def __init__(self, feed: Feed, dataset, units: List[List[int]], field: str):
        self.feed, self.dataset, self.units, self.field = feed, dataset, units, field
        self.mine = [u for u in range(len(units)) if feed.ranks.owns(u)]

    def __len__(self) -> int:
        return len(self.units)

    def size(self, unit: int) -> int:
        return len(self.units[unit])

    def graph_inputs(self, batch) -> List[torch.Tensor]:
        """A batch's graph inputs, on the run's device."""
        return self.feed.graph_inputs(self.feed.split(batch)[0])

    def read(self, desc: str = None, fed_by=None) -> Reading:
        """(unit, batch) of this rank's units, with a progress bar on rank 0 when `desc`. A
        dataset that takes outputs back gets those of `fed_by` (a graph the caller runs on
        each batch, handing the outputs, dequantized where quantized, to `Reading.ran`), or,
        for a caller that runs no whole forward, those of the float graph, run here."""
        if not reads_outputs(self.dataset):
            return Reading(zip(self.mine, self._load(self.feed.cfg.dataloader_workers, desc)))
        refuse_in_job(self.dataset, dataset_named(self.feed.cfg.dataset, self.field), self.feed.ranks)
        consumer = StepOutputs(fed_by if fed_by is not None else self.feed.graph)
        reading = Reading(zip(self.mine, self._load(0, desc)), self.dataset, consumer)
        return reading if fed_by is not None else Reading(self._fed_by_float(reading), self.dataset)

    def _load(self, workers: int, desc: str = None):
        cfg = self.feed.cfg
        loaded = batches(self.dataset, cfg.dataset, 0, workers, collate_fn=collate_of(self.dataset),
                         field=self.field, batch_sampler=[self.units[u] for u in self.mine])
        if desc and self.feed.ranks.main:
            loaded = tqdm(loaded, total=len(self.mine), desc=desc, unit="batch")
        return loaded

    def _fed_by_float(self, reading: Reading):
        """The batches of `reading`, each run through the float graph before it is handed on."""
        for unit, batch in reading:
            reading.ran(self.feed.graph.forward(self.graph_inputs(batch)))
            yield unit, batch
