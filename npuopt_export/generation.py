"""Greedy generation with npuopt's forward of a decoder's prefill and decode-step IRs
(npuopt-export --llm), float or quantized: npuopt-run --generate computes the same tokens
from the quantized IRs with its own arithmetic (docs/npuopt-run.md, "Generating text").

The prefill takes the prompt's token ids [1, N] and gives the logits, then the caches; each
decode step takes the last token [1, 1] and the caches and gives the logits and the caches
one position longer. A token is the first of the highest logits at the last position. A
cache a step gives feeds the next step's input: its integers where both tensors share
dtype, scale and zero point, else its real values (dequantized in float32), which the
quantized graph's Input layer quantizes as it quantizes any float input.
"""
from typing import List, Sequence

import torch

from npuopt.graph import PyGraph
from npuopt.quant.compare import dequantized
from npuopt.tensor import PyTensor


def _grid(t: PyTensor):
    return t.dtype, float(t.scale), int(t.zerop)


def carried(value: torch.Tensor, src: PyTensor, dst: PyTensor) -> torch.Tensor:
    """An output's value as the input `dst` of the next step takes it."""
    quantized = not value.is_floating_point() and not src.qinvariant
    if quantized and dst.is_quantized and not dst.qinvariant and _grid(src) == _grid(dst):
        return value
    return dequantized(src, value) if quantized else value


def generate(prefill: PyGraph, decode: PyGraph, prompt: Sequence[int], steps: int) -> List[int]:
    """`steps` token ids after `prompt` (see the module docstring)."""
    ids = torch.tensor([list(prompt)], dtype=torch.int32)
    values = [v.clone() for v in prefill.forward([ids])]
    tokens: List[int] = []
    while True:
        logits = values[0].reshape(-1, values[0].shape[-1])[-1]
        tokens.append(int(torch.argmax(logits)))
        if len(tokens) == steps:
            return tokens
        caches = [carried(v, src, dst) for v, src, dst in
                  zip(values[1:], (prefill if len(tokens) == 1 else decode).output_tensors[1:],
                      decode.input_tensors[1:])]
        values = [v.clone() for v in decode.forward([torch.tensor([[tokens[-1]]], dtype=torch.int32)] + caches)]
