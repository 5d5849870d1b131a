"""A Llama-architecture decoder in plain PyTorch, and the two graphs npuopt-export writes of it.

The model (token embeddings, RMSNorm, rotary position embeddings in the rotate-half form,
grouped-query causal attention, a SiLU-gated MLP, a head tied to the embeddings or its own)
is written so that torch.export traces it into ops the exporter maps one by one onto the
layer types the tool chain's parser writes for such a decoder: Gather, RMSNorm,
FullyConnected, Slice/Negative/Concat and Eltwise for the rotation, Reshape/Tile/Reshape for
the shared K/V heads, MatMul, Softmax.

`Prefill` runs N prompt tokens (no cache); `Decode` one token after a cache of P positions.
Both return the logits and every layer's key and value cache (K after its rotation), so a
prefill's caches feed the first decode step and each step's caches the next one.
"""
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

NEG = torch.finfo(torch.float32).min  # the causal mask's "minus infinity", as Hugging Face writes it


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    rope_theta: float = 10000.0
    eps: float = 1e-5
    max_length: int = 256  # positions a prefill or a cache and its step may take
    tied: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rotate(x, cos, sin):
    """Rotary embedding in the rotate-half form: pairs (i, i + d/2) turn by their angle."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def repeat_kv(x, times: int):
    """Each K/V head for `times` query heads ([1, kv, n, d] -> [1, kv * times, n, d])."""
    if times == 1:
        return x
    b, kv, n, d = x.shape
    return x[:, :, None].expand(b, kv, times, n, d).reshape(b, kv * times, n, d)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.c = c
        d = c.head_dim
        self.q = nn.Linear(c.hidden, c.heads * d, bias=False)
        self.k = nn.Linear(c.hidden, c.kv_heads * d, bias=False)
        self.v = nn.Linear(c.hidden, c.kv_heads * d, bias=False)
        self.o = nn.Linear(c.heads * d, c.hidden, bias=False)

    def _heads(self, y, count: int):
        b, n, _ = y.shape
        return y.view(b, n, count, self.c.head_dim).transpose(1, 2)

    def forward(self, x, cos, sin, mask, past: Optional[Tuple[torch.Tensor, torch.Tensor]]):
        c = self.c
        q = rotate(self._heads(self.q(x), c.heads), cos, sin)
        k = rotate(self._heads(self.k(x), c.kv_heads), cos, sin)
        v = self._heads(self.v(x), c.kv_heads)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        times = c.heads // c.kv_heads
        scores = q @ repeat_kv(k, times).transpose(2, 3) * c.head_dim ** -0.5
        if mask is not None:
            scores = scores + mask
        out = torch.softmax(scores, dim=-1) @ repeat_kv(v, times)
        b, _, n, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(b, n, c.heads * c.head_dim)), (k, v)


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.norm1, self.attn = RMSNorm(c.hidden, c.eps), Attention(c)
        self.norm2, self.mlp = RMSNorm(c.hidden, c.eps), MLP(c)

    def forward(self, x, cos, sin, mask, past):
        h, present = self.attn(self.norm1(x), cos, sin, mask, past)
        x = x + h
        return x + self.mlp(self.norm2(x)), present


class Llama(nn.Module):
    """forward(ids [1, n], past) -> logits [1, n, vocab] and each layer's (K, V) cache
    [1, kv_heads, P + n, head_dim]. Without `past` the n tokens attend causally among
    themselves (the prefill); with it, one token attends to the cache and itself."""

    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.config = c
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps)
        self.head = None if c.tied else nn.Linear(c.hidden, c.vocab, bias=False)
        self.set_max_length(c.max_length)

    def set_max_length(self, max_length: int) -> None:
        """Rotary tables and causal mask for `max_length` positions."""
        c = self.config = replace(self.config, max_length=max_length)
        d, rows = c.head_dim, max_length + 1  # a row to spare: no slice of the tables takes them whole
        inverse = 1.0 / c.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.outer(torch.arange(rows, dtype=torch.float64), inverse)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        causal = torch.triu(torch.full((rows, rows), NEG), diagonal=1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, ids, past: Optional[Sequence[Tuple[torch.Tensor, torch.Tensor]]] = None):
        n = ids.shape[1]
        p = past[0][0].shape[2] if past else 0
        cos, sin = self.cos[p:p + n], self.sin[p:p + n]
        mask = None if past else self.causal[:n, :n]
        x = self.embed(ids)
        presents = []
        for i, block in enumerate(self.layers):
            x, present = block(x, cos, sin, mask, past[i] if past else None)
            presents.append(present)
        x = self.norm(x)
        logits = F.linear(x, self.embed.weight) if self.head is None else self.head(x)
        return logits, presents


def flat(presents: List[Tuple[torch.Tensor, torch.Tensor]]) -> List[torch.Tensor]:
    return [t for kv in presents for t in kv]


class Prefill(nn.Module):
    """ids [1, N] -> logits [1, N, vocab], key0, value0, key1, ... [1, kv_heads, N, head_dim]."""

    def __init__(self, model: Llama):
        super().__init__()
        self.model = model

    def forward(self, ids):
        logits, presents = self.model(ids)
        return (logits, *flat(presents))


class Decode(nn.Module):
    """ids [1, 1], key0, value0, ... [1, kv_heads, P, head_dim] -> logits [1, 1, vocab] and
    the caches with the new position, [1, kv_heads, P + 1, head_dim]."""

    def __init__(self, model: Llama):
        super().__init__()
        self.model = model

    def forward(self, ids, *caches):
        past = [(caches[2 * i], caches[2 * i + 1]) for i in range(len(caches) // 2)]
        logits, presents = self.model(ids, past)
        return (logits, *flat(presents))


@torch.no_grad()
def greedy(model: Llama, ids: Sequence[int], steps: int) -> List[int]:
    """`steps` tokens of greedy generation by the PyTorch model: a prefill of the prompt,
    then one decode step per token with the growing cache (the first of the highest
    logits, as torch.argmax picks)."""
    logits, presents = model(torch.tensor([list(ids)]))
    out = []
    for _ in range(steps):
        out.append(int(logits[0, -1].argmax()))
        logits, presents = model(torch.tensor([[out[-1]]]), presents)
    return out


def tiny_llama(seed: int = 0, layers: int = 2, tied: bool = True, max_length: int = 16) -> Llama:
    """A small random decoder for tests: hidden 32, 4 query heads sharing 2 K/V heads,
    vocabulary 64; weights from `seed`: norms' near one, the linear layers' three times
    torch's default (at its scale the embeddings dominate and greedy generation repeats
    one token)."""
    torch.manual_seed(seed)
    c = LlamaConfig(vocab=64, hidden=32, layers=layers, heads=4, kv_heads=2, intermediate=64,
                    max_length=max_length, tied=tied)
    model = Llama(c)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape))
            elif not name.startswith("embed"):
                p.mul_(3.0)
    return model.eval()
