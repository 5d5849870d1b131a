"""A graph run layer by layer over the calibration set, the inputs of each layer at hand
on the whole set before it runs: what global calibration methods measure layers on."""
import contextlib
from typing import List, Optional, Set

import torch

from ...memory import give_back_if_grown
from . import one_thread


class Stream:
    """A graph run layer by layer over every calibration batch at once, each live tensor
    kept as one value per batch (a layer without inputs, as a decoder's embedding table:
    one for all): a layer's inputs on the whole set are at hand before it runs, and a change
    to the layer reaches every layer after it. A float graph runs on one thread (`one_thread`);
    a quantized one computes exact integers on any number. `asked`: the layers the caller
    will ask about (until, around; None: any), so that values only other layers whose
    outputs nobody reads would read are dropped when last read by a layer that runs (a
    decoder's present K/V, read by the cache's layers at the graph's end: 380 MB over
    SmolLM2's 30 layers)."""

    def __init__(self, graph, data: List[List[torch.Tensor]], one_thread: bool,
                 asked: Optional[Set[str]] = None):
        self.graph = graph
        self.one_thread = one_thread
        _clear(graph)  # what a forward before left on its tensors (a decoder's logits: 48 MB)
        if not graph.keeps_samples_apart():
            data = [[x[i:i + 1] for x in b] for b in data for i in range(b[0].shape[0])]
        self.batches = len(data)
        self.values = {t.name: [b[i] for b in data] for i, t in enumerate(graph.input_tensors)}
        self.order = {n.name: i for i, n in enumerate(graph.nodes)}
        self.last_use, self.feeds = _liveness(graph.nodes, asked)
        self.done = 0
        self.large = graph.holds_large_weights()  # a large model's freed memory goes back layer by layer

    def until(self, name: str, through: bool = False):
        """Run the layers before layer `name` (and that layer too when `through`); that
        layer, or None when the graph has no layer of that name. A layer whose outputs no
        layer that runs or is asked about reads is passed over (a decoder's head: 16
        windows of its logits held 805 MB only to be dropped)."""
        i = self.order.get(name)
        if i is None:
            return None
        while self.done < i + through:
            node = self.graph.nodes[self.done]
            if self.done in self.feeds:
                self._run(node)
            else:  # its inputs may be read last here (a decoder's K and V, by the present cache's layers)
                self._release(node)
                self.done += 1
        return self.graph.nodes[i]

    def inputs(self, node, port: int = 0) -> List[torch.Tensor]:
        """Input `port` of layer `node`, its value per batch."""
        return self.values[node.inputs[port].name]

    def around(self, name: str) -> tuple:
        """(inputs, outputs) of layer `name`, each a list per tensor of its values per
        batch: the layers before it run, then it."""
        node = self.until(name)
        inputs = [self.values[t.name] for t in node.inputs]
        return inputs, self._run(node)

    def _run(self, node) -> List[List[torch.Tensor]]:
        outputs = [[] for _ in node.outputs]
        once = not node.inputs and not any(t.name in self.values for t in node.outputs)
        with torch.no_grad(), (one_thread() if self.one_thread else contextlib.nullcontext()):
            for b in range(1 if once else self.batches):
                for t in list(node.inputs) + list(node.outputs):
                    if t.name in self.values:  # an Input layer's output is the fed value
                        t.betensor = self.values[t.name][b]
                node.forward()
                for values, t in zip(outputs, node.outputs):
                    values.append(t.betensor)
        for t, values in zip(node.outputs, outputs):
            self.values[t.name] = values * self.batches if once else values
        for t in list(node.inputs) + list(node.outputs):
            t.betensor = torch.zeros(())
        self._release(node)
        if self.large:
            give_back_if_grown()
        self.done += 1
        return outputs

    def _release(self, node) -> None:
        """Drop the values of the layer's tensors that no later layer reads."""
        for t in list(node.inputs) + list(node.outputs):
            if self.last_use.get(t.name, -1) <= self.done:
                self.values.pop(t.name, None)

    def close(self) -> None:
        self.values.clear()
        _clear(self.graph)


def _clear(graph) -> None:
    for t in graph.tensors:
        t.betensor = torch.zeros(())


def _liveness(nodes, asked: Optional[Set[str]]) -> tuple:
    """({tensor name: index of the last layer that reads it and runs or is asked about},
    the indices of the layers whose outputs such a layer reads: the ones that run)."""
    last_use, feeds = {}, set()
    for i in reversed(range(len(nodes))):
        node = nodes[i]
        if any(t.name in last_use for t in node.outputs):
            feeds.add(i)
        if i in feeds or asked is None or node.name in asked:
            for t in node.inputs:
                last_use.setdefault(t.name, i)
    return last_use, feeds
