"""Llama-style decoders as the parser writes them from PyTorch's ONNX export (opset 14):
token ids in (the parser's int32 Input), an embedding Gather, RMSNorm, grouped-query
attention whose K/V heads repeat through Tile (repeat_kv), rotate-half RoPE (Slice, Neg,
Concat and Mul by cos/sin tables; or ONNX Runtime's fused com.microsoft RotaryEmbedding,
which the parser writes as a RotaryEmbedding layer), a causal mask of float32's lowest
value or -inf, a SiLU-gated MLP, and a head of its own or tied to the embeddings. Two
graphs of each decoder: the prefill of N tokens (logits and every layer's K/V out), and
the one-token decode step with a fixed-length KV cache: token id and float caches
[1, kv_heads, P, head] in, logits and caches out (the last P positions, or all P + 1),
with an attention-mask input of 0/1 ints (added as (1 - mask) * lowest, or filled in
with Where) and a position-id input in some. repeat_kv is torch's repeat or Hugging
Face's expand (the parser writes both as Tile). Their opt.cfg is npuopt's defaults.

The parser fixes batch 1 in the Reshapes, so the run data are one sample; the decode
caches are normal samples, the masks pad a few leading positions."""
import math

import numpy as np
import torch
from torch import nn

from op_cases.common import Case

NEG = torch.finfo(torch.float32).min  # the causal mask's "minus infinity", as Hugging Face writes it


class _RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(n))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _FusedRope(torch.autograd.Function):
    """ONNX Runtime's com.microsoft RotaryEmbedding on [B, S, heads * D] (rotate-half)."""

    @staticmethod
    def forward(ctx, x, positions, cos, sin, heads):
        b, s, hidden = x.shape
        xh = x.reshape(b, s, heads, hidden // heads)
        c, t = (torch.cat([v[positions]] * 2, -1)[:, :, None] for v in (cos, sin))
        return (xh * c + _rotate_half(xh) * t).reshape(b, s, hidden)

    @staticmethod
    def symbolic(g, x, positions, cos, sin, heads):
        return g.op("com.microsoft::RotaryEmbedding", x, positions, cos, sin, num_heads_i=heads)


class _Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c, d = c, c["hidden"] // c["heads"]
        self.d = d
        self.ln1, self.ln2 = _RMSNorm(c["hidden"]), _RMSNorm(c["hidden"])
        self.q = nn.Linear(c["hidden"], c["heads"] * d, bias=False)
        self.k = nn.Linear(c["hidden"], c["kv_heads"] * d, bias=False)
        self.v = nn.Linear(c["hidden"], c["kv_heads"] * d, bias=False)
        self.o = nn.Linear(c["heads"] * d, c["hidden"], bias=False)
        self.gate = nn.Linear(c["hidden"], c["inter"], bias=False)
        self.up = nn.Linear(c["hidden"], c["inter"], bias=False)
        self.down = nn.Linear(c["inter"], c["hidden"], bias=False)

    def _heads(self, y, count, rope):
        b, n, _ = y.shape
        if self.c["fused_rope"]:
            y = _FusedRope.apply(y, rope["positions"], rope["cos"], rope["sin"], count)
        y = y.view(b, n, count, self.d).transpose(1, 2)
        return y if self.c["fused_rope"] else y * rope["cos"] + _rotate_half(y) * rope["sin"]

    def _repeat(self, kv):
        """repeat_kv: each K/V head for heads // kv_heads query heads (Tile in the export)."""
        rep = self.c["heads"] // self.c["kv_heads"]
        if rep == 1:
            return kv
        b, h, n, d = kv.shape
        if self.c["expand"]:  # Hugging Face's repeat_kv
            return kv[:, :, None].expand(b, h, rep, n, d).reshape(b, h * rep, n, d)
        return kv[:, :, None].repeat(1, 1, rep, 1, 1).reshape(b, h * rep, n, d)

    def forward(self, x, rope, mask, past=None):
        c = self.c
        b, n, _ = x.shape
        h = self.ln1(x)
        q = self._heads(self.q(h), c["heads"], rope)
        k = self._heads(self.k(h), c["kv_heads"], rope)
        v = self.v(h).view(b, n, c["kv_heads"], self.d).transpose(1, 2)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scores = q @ self._repeat(k).transpose(2, 3) / math.sqrt(self.d) + mask
        a = torch.softmax(scores, dim=-1) @ self._repeat(v)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, c["heads"] * self.d))
        h = self.ln2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h)), (k, v)


class _Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.emb = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c["layers"]))
        self.norm = _RMSNorm(c["hidden"])
        self.head = None if c["tied"] else nn.Linear(c["hidden"], c["vocab"], bias=False)
        d = c["hidden"] // c["heads"]
        angles = torch.outer(torch.arange(c["max_pos"]).float(), 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))
        self.register_buffer("cos_half", angles.cos())
        self.register_buffer("sin_half", angles.sin())

    def rope(self, positions):
        """cos/sin at `positions` ([1, S] ints): the full-width tables broadcast over the heads,
        or the half-width tables the fused op reads with the positions."""
        if self.c["fused_rope"]:
            return dict(positions=positions, cos=self.cos_half, sin=self.sin_half)
        return {k: torch.cat([v[positions[0]]] * 2, -1) for k, v in (("cos", self.cos_half), ("sin", self.sin_half))}

    def run(self, ids, rope, mask, pasts):
        x = self.emb(ids)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, rope, mask, pasts[i] if pasts else None)
            presents.append(present)
        x = self.norm(x)
        return x @ self.emb.weight.t() if self.head is None else self.head(x), presents


class _Prefill(nn.Module):
    """ids [1, N] (and, with `mask_input`, a 0/1 attention mask [1, N]) -> logits, K/V of each layer."""

    def __init__(self, decoder, n):
        super().__init__()
        self.decoder, self.n = decoder, n

    def forward(self, ids, *attention):
        c = self.decoder.c
        mask = torch.triu(torch.full((self.n, self.n), c["neg"]), 1)
        if attention and c["mask_fill"]:  # Hugging Face's masked_fill of the padded positions
            mask = mask[None, None].masked_fill(attention[0][:, None, None, :] == 0, NEG)
        elif attention:
            mask = mask + (1.0 - attention[0].float())[:, None, None, :] * NEG
        logits, presents = self.decoder.run(ids, self.decoder.rope(torch.arange(self.n)[None]), mask, None)
        return (logits, *[t for kv in presents for t in kv])


class _Decode(nn.Module):
    """ids [1, 1], caches [1, kv_heads, P, head] per layer (K, V), then with `mask_input` a
    0/1 mask [1, P + 1] and with `position_input` the position [1, 1] -> logits, caches
    (the last P positions, or all P + 1 with `grow`)."""

    def __init__(self, decoder, p):
        super().__init__()
        self.decoder, self.p = decoder, p

    def forward(self, ids, *rest):
        c = self.decoder.c
        layers = c["layers"]
        pasts = [(rest[2 * i], rest[2 * i + 1]) for i in range(layers)]
        extra = list(rest[2 * layers:])
        mask = torch.zeros(1, self.p + 1)
        if c["mask_input"]:
            mask = (1.0 - extra.pop(0).float())[:, None, None, :] * NEG
        positions = extra.pop(0) if c["position_input"] else torch.tensor([[self.p]])
        logits, presents = self.decoder.run(ids, self.decoder.rope(positions), mask, pasts)
        keep = slice(None) if c["grow"] else slice(1, None)
        return (logits, *[t[:, :, keep] for kv in presents for t in kv])


BASE = dict(vocab=128, hidden=32, layers=2, heads=4, kv_heads=2, inter=64, max_pos=32, tied=False, neg=NEG,
            fused_rope=False, mask_input=False, position_input=False, grow=False, tokens=8, cache=15, expand=False,
            mask_fill=False)


def decoder_inputs(c: dict, step: str):
    """The graph's input shapes without the batch axis, and example tensors (batch 1)."""
    d = c["hidden"] // c["heads"]
    n = c["tokens"] if step == "prefill" else 1
    shapes, examples = [(n,)], [torch.zeros(1, n, dtype=torch.int64)]
    if step == "decode":
        shapes += [(c["kv_heads"], c["cache"], d)] * (2 * c["layers"])
        examples += [torch.zeros(1, c["kv_heads"], c["cache"], d)] * (2 * c["layers"])
    if c["mask_input"]:
        shapes.append((n if step == "prefill" else c["cache"] + 1,))
        examples.append(torch.ones((1,) + shapes[-1], dtype=torch.int64))
    if step == "decode" and c["position_input"]:
        shapes.append((1,))
        examples.append(torch.full((1, 1), c["cache"], dtype=torch.int64))
    return shapes, examples


def export_decoder(c: dict, step: str, path: str) -> None:
    """The decoder `c` (weights from torch's generator) as an ONNX model of `step`."""
    decoder = _Decoder(c).eval()
    module = _Prefill(decoder, c["tokens"]) if step == "prefill" else _Decode(decoder, c["cache"])
    _, examples = decoder_inputs(c, step)
    outputs = ["logits"] + [f"{kind}{i}" for i in range(c["layers"]) for kind in ("key", "value")]
    torch.onnx.export(module, tuple(examples), path, input_names=[f"in{i}" for i in range(len(examples))],
                      output_names=outputs, opset_version=14, dynamo=False,
                      custom_opsets={"com.microsoft": 1} if c["fused_rope"] else None)


def _data(c: dict, step: str):
    """Token ids of the vocabulary, normal caches, masks padding up to three leading
    positions, positions where the cache ends or before."""
    shapes, _ = decoder_inputs(c, step)

    def data(rng, _shapes, n, value_range, run):
        arrays = [rng.integers(0, c["vocab"], (n,) + shapes[0]).astype(np.int64)]
        if step == "decode":
            arrays += [rng.standard_normal((n,) + s).astype(np.float32) for s in shapes[1:1 + 2 * c["layers"]]]
        if c["mask_input"]:
            mask = np.ones((n,) + shapes[len(arrays)], np.int64)
            for row, pad in zip(mask, rng.integers(0, 4, n)):
                row[:pad] = 0
            arrays.append(mask)
        if step == "decode" and c["position_input"]:
            arrays.append(rng.integers(c["cache"] - 4, c["cache"] + 1, (n, 1)).astype(np.int64))
        return arrays
    return data


def _case(name: str, doc: str, step: str, **changes) -> Case:
    c = dict(BASE, **changes)
    shapes, _ = decoder_inputs(c, step)
    return Case(name, doc, shapes, lambda rng, path: export_decoder(c, step, path), data=_data(c, step),
                cfg=DEFAULTS, run_samples=1)


# npuopt's defaults (the op tests' template calibrates activations on their extrema)
DEFAULTS = dict(calibration_strategy_for_activation="mean")
GQA = "2 layers, hidden 32, 4 query heads sharing 2 K/V heads (Tile), untied head, causal mask of float32's lowest"
MHA = "1 layer, hidden 32, 2 heads, head tied to the embeddings, vocabulary 64"
SMALL = dict(layers=1, heads=2, kv_heads=2, vocab=64)
CASES = [
    _case("parser_llama_prefill", f"Llama-style decoder prefill of 8 tokens ({GQA})", "prefill"),
    _case("parser_llama_decode", f"its decode step: 15-position KV cache in, the last 15 out ({GQA})", "decode"),
    _case("parser_llama_tied_prefill", f"Llama-style prefill with an attention-mask input filled in (Where) over a "
          f"causal mask of -inf ({MHA})", "prefill", neg=float("-inf"), mask_input=True, mask_fill=True, tied=True,
          **SMALL),
    _case("parser_llama_tied_decode", f"its decode step with mask and position inputs, all 16 cache positions out "
          f"({MHA})", "decode", mask_input=True, position_input=True, grow=True, tied=True, **SMALL),
    _case("parser_llama_fused_rope_decode", "decode step of a decoder with ONNX Runtime's fused RotaryEmbedding, a "
          "position input and Hugging Face's repeat_kv (expand; 1 layer, 4 query heads sharing 1 K/V head, vocabulary "
          "64)", "decode", fused_rope=True, position_input=True, expand=True, layers=1, kv_heads=1, vocab=64),
]
