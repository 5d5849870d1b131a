"""Greedy text generation from a decoder's quantized prefill and decode-step IRs, with the
runner's own KV cache (npuopt-run MODEL_prefill_o.txt --generate MODEL_decode_o.txt).

The IRs' convention (npuopt-export --llm writes it): the prefill takes the prompt's token ids
[1, N] and gives the logits [1, N, vocab] then the caches; a decode step takes one token id
[1, 1] then the caches [1, kv_heads, P, head_dim], as many and in the order the prefill gives
them, and gives the logits and the caches with one more position. Its cache length is a
dynamic symbol (symbols.py), so the step runs at every length up to the IR's.

Each token is the first of the highest logits at the last position (the integers of a
quantized output, whose order is the real values'). A cache a step writes is the next
step's input: its integers as they are where both tensors share dtype, scale and zero
point, else dequantized in float32 as a DeQuantize layer does it and quantized with the
input's scale and zero point, as a graph input's floats are.
"""
from typing import Dict, List, Sequence

import numpy as np

from .errors import RefrunError
from .intmath import dequantize, quantize
from .irfile import Model
from .runner import Runner, TensorInfo
from .symbols import bind


def _outputs(model: Model, inputs: Sequence[np.ndarray]) -> tuple:
    """The model's outputs on one sample of prepared inputs, and their TensorInfos."""
    runner = Runner(bind(model, [x.shape for x in inputs]))
    got: Dict[str, np.ndarray] = {}
    runner.stream(list(inputs), set(model.outputs), got.__setitem__)
    return [got[n] for n in model.outputs], [runner.infos[n] for n in model.outputs]


def carried(value: np.ndarray, src: TensorInfo, dst: TensorInfo) -> np.ndarray:
    """An output's value as the input `dst` takes it (see the module docstring)."""
    if not dst.is_int:
        return dequantize(value, *src.quant(src.producer)) if src.is_int else value.astype(np.float32)
    if src.is_int and (src.dtype.name, src.scale, src.zp) == (dst.dtype.name, dst.scale, dst.zp):
        return value
    real = dequantize(value, *src.quant(src.producer)) if src.is_int else value.astype(np.float32)
    scale, zp = dst.quant(dst.producer)
    return quantize(real, scale, zp, dst.qmin, dst.qmax)


def _next_token(logits: np.ndarray) -> int:
    return int(np.argmax(logits.reshape(-1, logits.shape[-1])[-1]))


def _token_input(model: Model, token_ids: np.ndarray, infos: Dict[str, TensorInfo]) -> np.ndarray:
    info = infos[model.inputs[0]]
    if not info.unscaled:
        raise RefrunError(f"{model.path}: input '{info.name}' ({info.dtype.name}, scale {info.scale}) does not "
                          f"take token ids as they are (an unscaled integer input)")
    return np.asarray(token_ids, np.int64).reshape(1, -1)


def generate(prefill: Model, decode: Model, prompt: Sequence[int], steps: int) -> List[int]:
    """`steps` token ids after `prompt` (see the module docstring)."""
    if len(prefill.outputs) != len(decode.inputs) or len(decode.outputs) != len(decode.inputs):
        raise RefrunError(f"{decode.path}: a decode step takes a token and the caches the prefill gives "
                          f"({len(prefill.outputs) - 1}) and gives logits and as many caches; it has "
                          f"{len(decode.inputs)} inputs and {len(decode.outputs)} outputs")
    pre_infos, dec_infos = Runner(prefill).infos, Runner(decode).infos
    values, infos = _outputs(prefill, [_token_input(prefill, prompt, pre_infos)])
    tokens = []
    while True:
        tokens.append(_next_token(values[0]))
        if len(tokens) == steps:
            return tokens
        caches = [carried(v, src, dec_infos[name]) for v, src, name in
                  zip(values[1:], infos[1:], decode.inputs[1:])]
        values, infos = _outputs(decode, [_token_input(decode, [tokens[-1]], dec_infos)] + caches)
