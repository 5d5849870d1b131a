"""How a tensor is put on an integer grid, as the cfg's quantize_method_* values name
it: per tensor, per channel or per block, symmetric or not, the full or the restricted range.
A value is taken apart once, where the cfg or an opt_config is read."""
import math

import torch


class SettingValue(str):
    """A setting's text together with what it says, taken apart once: an immutable
    value, which copies of a graph (and of its settings) share."""

    def __copy__(self):
        return self

    def __deepcopy__(self, _memo):
        return self


class QuantMethod(SettingValue):
    """A quantize_method_* value and what it says; it is its text, too (templates and
    the Compass Optimizer's q_mode_* attrs show it as such)."""
    per_channel: bool
    per_block: bool     # one scale per block of weight_block_size inputs of each output channel
    symmetric: bool
    full_range: bool

    def __new__(cls, text: str):
        if isinstance(text, QuantMethod):
            return text
        self = super().__new__(cls, str(text).strip().lower())
        self.per_channel = self.startswith("per_channel")
        self.per_block = self.startswith("per_block")
        self.symmetric = "_symmetric" in self
        self.full_range = "restricted" not in self
        return self

    def __getnewargs__(self):
        return (str(self),)

    def to_symmetric(self) -> "QuantMethod":
        """The symmetric method of the same granularity (restricted range), as the tool
        chain's QuantMode.to_symmetric names it."""
        if self.symmetric:
            return self
        return QuantMethod(self.split("_asymmetric")[0] + "_symmetric_restricted_range")


# ---- per-block grids ------------------------------------------------------------
def blocks_per_channel(shape, block: int) -> int:
    """Blocks of `block` values in each output channel (axis 0) of a tensor of `shape`,
    its other axes flattened in the IR's order; the last block is shorter where they do
    not divide (the tool chain needs them to divide)."""
    rest = math.prod(int(d) for d in shape[1:])
    return max(1, -(-rest // block))


def block_values(v: torch.Tensor, shape, block: int) -> torch.Tensor:
    """A per-block scale or zero point ([channels * blocks], channel-major) as one value
    per element of a tensor of `shape`."""
    rest = math.prod(int(d) for d in shape[1:])
    per_channel = v.reshape(int(shape[0]), -1)
    return per_channel.repeat_interleave(block, dim=1)[:, :rest].reshape(tuple(int(d) for d in shape))


# elements of a per-block tensor handled at once by by_channels: a large layer's scale and
# zero point expanded to one value per weight held a model's head several times over
# (SmolLM2-135M's 49,152 x 576 head: 113 MB per float32 copy)
ELEMENTS_AT_ONCE = 1 << 22


def by_channels(fn, t: torch.Tensor, scale, zp, block: int) -> torch.Tensor:
    """fn(t's channels, their scale, their zero point) over a few output channels (axis 0)
    at a time, each part's per-block scale and zero point ([channels * blocks], or numbers)
    expanded to its own elements only; the parts joined (the same values as fn over the
    whole tensor with block_values: fn is elementwise)."""
    n = int(t.shape[0])
    step = max(1, ELEMENTS_AT_ONCE // max(1, t[0].numel())) if n else 1

    def part(v, r0, r1):
        if not isinstance(v, torch.Tensor) or v.numel() <= 1:
            return v
        return block_values(v.reshape(n, -1)[r0:r1].reshape(-1), (r1 - r0,) + tuple(t.shape[1:]), block)

    out = None
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        y = fn(t[r0:r1], part(scale, r0, r1), part(zp, r0, r1))
        if out is None:
            out = torch.empty((n,) + tuple(y.shape[1:]), dtype=y.dtype, device=y.device)
        out[r0:r1] = y
    return out if out is not None else fn(t, scale, zp)


def blocks(w: torch.Tensor, block: int):
    """w [channels, ...] as (full blocks [channels * n, block], the last shorter block
    [channels, rest % block] or None): what a per-block grid's statistics are taken over."""
    flat = w.reshape(w.shape[0], -1)
    full = (flat.shape[1] // block) * block
    tail = flat[:, full:] if full < flat.shape[1] else None
    return flat[:, :full].reshape(-1, block), tail
