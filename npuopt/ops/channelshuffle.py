"""ChannelShuffle: the last (channel) axis, seen as [group, C/group], is transposed to
[C/group, group] and flattened back; the result is split into `splits` equal parts,
one top each.

Quantized: the same code moves the integers; every top takes the input's quantization."""
from ..errors import IRError
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import divides, int_param


@op_register(OpType.ChannelShuffle, "1.0")
def channelshuffle_forward(self, *args):
    x = self.inputs[0].betensor
    group = int_param(self, "group", minimum=1)
    splits = int_param(self, "splits", 1, minimum=1)
    channels = x.shape[-1]
    divides(self, "the channel count", channels, group)
    divides(self, "the channel count", channels, splits)
    if splits != len(self.outputs):
        raise IRError(f"layer '{self.name}' (ChannelShuffle): splits {splits} must equal the number of tops "
                      f"({len(self.outputs)})")
    shuffled = x.reshape(*x.shape[:-1], group, channels // group).transpose(-1, -2).reshape(x.shape)
    parts = shuffled.split(channels // splits, dim=-1)
    for t, part in zip(self.outputs, parts):
        t.betensor = part
    return list(parts) if splits > 1 else parts[0]


@quant_register(OpType.ChannelShuffle, "1.0")
def channelshuffle_quantize(self, *args):
    QT.pass_through(self)
