"""PerplexityMetric(index=0): a language model's perplexity over whole windows of text,
exp(total negative log-likelihood / tokens predicted), where output `index` holds the
logits [batch, positions, vocabulary] and the label the windows' own token ids [batch,
positions] (the model's input ids: the label file may be the data file itself). Each
position's logits predict the next token, so a window of N tokens scores N - 1 of them.

Where OPT's LMHeadMetric scores one next token per sample (a decode step's), this one
scores every position of a prefill's window, as perplexity over a text is usually
measured: split the text into windows, pass them as data and as labels."""
import math

import numpy as np
import torch

from npuopt.datasets_common import parse_output_index
from npuopt.errors import DatasetError, PluginError
from npuopt.framework import *


@register_plugin(PluginType.Metric, "1.0")
class PerplexityMetric(OptBaseMetric):
    def __init__(self, index="0"):
        self.who = type(self).__name__
        self.index = parse_output_index(self.who, index)
        self.reset()

    def reset(self):
        self.nll = 0.0
        self.tokens = 0

    def __call__(self, pred, target):
        if self.index >= len(pred):
            raise PluginError(f"{self.who}: output index {self.index} asked for, but the graph has {len(pred)} "
                              f"output(s)")
        logits = pred[self.index].double()
        try:
            ids = torch.as_tensor(np.asarray(target, dtype=np.int64))
        except (TypeError, ValueError):
            raise DatasetError(f"{self.who}: the labels must be the windows' token ids (integers)") from None
        if logits.dim() != 3 or ids.shape != logits.shape[:2]:
            raise DatasetError(f"{self.who}: output {self.index} has shape {list(logits.shape)} and the labels "
                               f"{list(ids.shape)}; expected logits [batch, positions, vocabulary] and the "
                               f"windows' token ids [batch, positions]")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= logits.shape[-1]):
            raise DatasetError(f"{self.who}: a label token id is outside the vocabulary of {logits.shape[-1]}")
        if logits.shape[1] < 2:
            return
        self.nll += float(torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"))
        self.tokens += ids[:, 1:].numel()

    def compute(self):
        return math.exp(self.nll / self.tokens) if self.tokens else float("nan")

    def report(self):
        return f"{self.who}: perplexity {self.compute():.4f} over {self.tokens} tokens"
