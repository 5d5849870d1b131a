"""The samples of a batch run through a graph layer by layer, each layer on every sample
before the next, where the graph cannot run them as one (PyGraph.keeps_samples_apart):
after each layer its tops and placeholders of the whole batch are at hand, as if the
batch had run as one (calibration's unit of statistics is the batch)."""
import contextlib
from typing import Dict, List, Sequence

import torch


class SamplesTogether:
    """Each sample's live tensors (by name), from the graph's inputs on. Between layers a
    layer's tensors hold the last sample's values, as a batch run one sample at a time
    leaves them; the forward releases a tensor here too once its last reader ran."""

    def __init__(self, input_tensors, samples: List[Sequence[torch.Tensor]]):
        self.live: List[Dict[str, torch.Tensor]] = [{t.name: x for t, x in zip(input_tensors, inputs)}
                                                    for inputs in samples]
        self.placeholders: List[List[torch.Tensor]] = []  # the present layer's, per sample

    def each_sample(self, node):
        """Yields once per sample, the layer's inputs holding that sample's values (an Input
        layer's top too: the fed value); what the layer then computed is the sample's."""
        held = list(node.inputs) + list(node.outputs)
        self.placeholders = []
        for values in self.live:
            for t in held:
                if t.name in values:
                    t.betensor = values[t.name]
            yield
            values.update((t.name, t.betensor) for t in node.outputs)
            self.placeholders.append([t.betensor for t in node.placeholders])

    @contextlib.contextmanager
    def whole_batch(self, node):
        """Within it, the layer's tops and placeholders hold the batch's values: the samples'
        concatenated along the first axis (0-d values as 1-d)."""
        tops = [[values[t.name] for values in self.live] for t in node.outputs]
        held = [list(p) for p in zip(*self.placeholders)]
        tensors = list(node.outputs) + list(node.placeholders)
        for t, parts in zip(tensors, tops + held):
            t.betensor = torch.cat([x if x.dim() else x.reshape(1) for x in parts])
        try:
            yield
        finally:
            for t, parts in zip(tensors, tops + held):
                t.betensor = parts[-1]
            self.placeholders = []

    def release(self, name: str) -> None:
        for values in self.live:
            values.pop(name, None)

    def outputs(self, output_tensors) -> List[torch.Tensor]:
        return [torch.cat([values[t.name] for values in self.live], dim=0) for t in output_tensors]
