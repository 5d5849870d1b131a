"""Batches as the cfg says (without_batch_dim, data_batch_dim): read from a dataset,
split into graph inputs and labels, and run through a graph in chunks that fit memory."""
import torch
from tqdm import tqdm

from .data import batches, collate_of, split_batch

FORWARD_BUDGET = 384 << 20  # bytes of working memory one forward of the evaluation may take


class Feed:
    """The cfg's batching for one graph's inputs, on one device."""

    def __init__(self, cfg, graph, device: torch.device):
        self.cfg, self.graph, self.device = cfg, graph, device

    def batch_size(self, size: int) -> int:
        """without_batch_dim: one sample a batch, as the Compass Optimizer does."""
        return 1 if self.cfg.without_batch_dim else size

    def batches(self, dataset, size: int, field: str, shuffle: bool = False, desc: str = None):
        """The batches of `size` samples (the cfg's batching) of the dataset read for the cfg
        field `field`, with a progress bar when `desc`."""
        size = self.batch_size(size)
        out = batches(dataset, self.cfg.dataset, size, self.cfg.dataloader_workers, shuffle=shuffle,
                      collate_fn=collate_of(dataset), field=field)
        return tqdm(out, total=-(-len(dataset) // size), desc=desc, unit="batch") if desc else out

    def split(self, batch):
        """(graph inputs, labels) of a batch, on the device."""
        cfg = self.cfg
        return split_batch(batch, self.graph.input_tensors, cfg.dataset, self.device,
                           batch_dim=cfg.data_batch_dim, without_batch_dim=cfg.without_batch_dim)

    def graph_inputs(self, inputs):
        """without_batch_dim: the graph takes the sample without the batch axis."""
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
