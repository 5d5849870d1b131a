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


def blocks(w: torch.Tensor, block: int):
    """w [channels, ...] as (full blocks [channels * n, block], the last shorter block
    [channels, rest % block] or None): what a per-block grid's statistics are taken over."""
    flat = w.reshape(w.shape[0], -1)
    full = (flat.shape[1] // block) * block
    tail = flat[:, full:] if full < flat.shape[1] else None
    return flat[:, :full].reshape(-1, block), tail
