"""RotaryEmbedding (RoPE, as the parser writes ONNX's RotaryEmbedding and ONNX Runtime's
com.microsoft one): inputs x, cos, sin and optionally position_ids. x is [B, S, hidden]
(split into `num_heads` heads) or [B, H, S, D]; the first `rotary_embedding_dim` values
of each head (0: all of them) are rotated, the rest pass through. cos/sin are tables
[P, W] (or [B, P, W]) read at position_ids [B, S] (default 0..S-1), their first half-dim
columns used. Pairs (x1, x2) are the two halves of the rotated part, or its even and odd
values with `interleaved`: real = cos x1 - sin x2, imag = sin x1 + cos x2, put back where
the pair came from.

Quantized (the tool chain's form: zero points 0 for x, cos, sin and the output, which is
signed): the float32 params rotate_rescale_cos = s_out / (s_x s_cos), rotate_rescale_sin
and not_rotate_rescale = s_out / s_x; real = fl32(fl32(c x1) r_cos) - fl32(fl32(s x2) r_sin)
in float32 (imag likewise), rounded half to even and clamped, and the passed values
round(fl32(x r_not)). Other zero points keep the layer in float."""
import torch

from ..dtype import computing_float
from ..errors import IRError
from ..quant import qmath
from ..quant import tensors as QT
from ..registry import OpType, op_register, quant_register
from ._movement import bool_param, check_indices, int_param
from ._symmetric import symmetric_output

RESCALES = ("rotate_rescale_cos", "rotate_rescale_sin", "not_rotate_rescale")


def _fail(node, what: str) -> IRError:
    return IRError(f"layer '{node.name}' (RotaryEmbedding): {what}")


def _as_heads(node, x: torch.Tensor):
    """x as [B, H, S, D], and the function that puts a result of that layout back."""
    if x.dim() == 4:
        return x, lambda y: y
    if x.dim() != 3:
        raise _fail(node, f"needs a 3-D [batch, sequence, hidden] or 4-D [batch, heads, sequence, head] "
                          f"input, got {x.dim()}-D")
    batch, seq, hidden = x.shape
    heads = int_param(node, "num_heads", minimum=1)
    if hidden % heads:
        raise _fail(node, f"num_heads {heads} does not divide the hidden size {hidden}")
    heads_first = x.reshape(batch, seq, heads, hidden // heads).permute(0, 2, 1, 3)
    return heads_first, lambda y: y.permute(0, 2, 1, 3).reshape(batch, seq, hidden)


def _rotary_dim(node, head: int) -> int:
    dim = int_param(node, "rotary_embedding_dim", 0)
    dim = head if dim < 1 else dim
    if dim > head or dim % 2:
        raise _fail(node, f"rotary_embedding_dim {dim} must be even and at most the head size {head}")
    return dim


def _tables(node, batch: int, seq: int, half: int):
    """cos and sin at the positions, [B, 1, S, half] (the values as they are: floats or integers)."""
    if len(node.inputs) not in (3, 4):
        raise _fail(node, f"takes 3 or 4 inputs (x, cos, sin[, position_ids]), got {len(node.inputs)}")
    cos, sin = node.inputs[1].betensor, node.inputs[2].betensor
    if cos.shape != sin.shape or cos.dim() not in (2, 3) or cos.shape[-1] < half:
        raise _fail(node, f"cos {list(cos.shape)} and sin {list(sin.shape)} must be alike, [positions, width] or "
                          f"[batch, positions, width] with width at least {half}")
    if len(node.inputs) == 4:
        positions = node.inputs[3].betensor
        if positions.dim() != 2 or positions.shape[1] != seq or positions.shape[0] not in (1, batch):
            raise _fail(node, f"position_ids {list(positions.shape)} must be [batch, sequence] = [{batch}, {seq}]")
        positions = check_indices(node, positions, cos.shape[-2], "position_ids").expand(batch, seq)
    else:
        positions = torch.arange(seq).expand(batch, seq)
    picked = []
    for table in (cos, sin):
        table = table.unsqueeze(0) if table.dim() == 2 else table
        if table.shape[0] not in (1, batch):
            raise _fail(node, f"cos/sin of batch {table.shape[0]} for an input of batch {batch}")
        rows = torch.arange(batch).reshape(-1, 1) if table.shape[0] == batch else torch.zeros(batch, 1, dtype=torch.long)
        picked.append(table[rows, positions.to(table.device)][..., :half].unsqueeze(1))
    return picked


def _rotate(node, x: torch.Tensor, turn, keep):
    """The layer on x with turn(x1, x2, cos, sin) -> (real, imag) and keep(rest)."""
    heads, back = _as_heads(node, x)
    batch, _, seq, head = heads.shape
    dim = _rotary_dim(node, head)
    cos, sin = _tables(node, batch, seq, dim // 2)
    rotated, rest = heads[..., :dim], heads[..., dim:]
    interleaved = bool_param(node, "interleaved", False)
    x1, x2 = (rotated[..., 0::2], rotated[..., 1::2]) if interleaved else rotated.split(dim // 2, dim=-1)
    real, imag = turn(x1, x2, cos, sin)
    pairs = torch.stack([real, imag], dim=-1).flatten(-2) if interleaved else torch.cat([real, imag], dim=-1)
    return back(torch.cat([pairs, keep(rest)], dim=-1))


def _float_turn(x1, x2, cos, sin):
    cos, sin = cos.to(x1.dtype), sin.to(x1.dtype)
    return cos * x1 - sin * x2, sin * x1 + cos * x2


def _integer_turn(node):
    r_cos, r_sin = (torch.tensor(float(node.get_param(k)), dtype=torch.float32) for k in RESCALES[:2])
    out = node.outputs[0]

    def scaled(a, b, r):
        return (a.to(torch.int64) * b.to(torch.int64)).to(torch.float32) * r

    def turn(x1, x2, cos, sin):
        real = scaled(cos, x1, r_cos) - scaled(sin, x2, r_sin)
        imag = scaled(sin, x1, r_sin) + scaled(cos, x2, r_cos)
        return (qmath.quantize(v, 1.0, 0, out.qmin, out.qmax) for v in (real, imag))
    return turn


@op_register(OpType.RotaryEmbedding, "1.0")
def rotary_embedding_forward(self, *args):
    out = self.outputs[0]
    x = self.inputs[0].betensor
    if self.quantized:
        r_not = float(self.get_param(RESCALES[2]))
        y = _rotate(self, x, _integer_turn(self), lambda rest: qmath.quantize(rest, r_not, 0, out.qmin, out.qmax))
        return QT.store_output(self, y, out)
    out.betensor = _rotate(self, computing_float(x), _float_turn, lambda rest: rest)
    return out.betensor


@quant_register(OpType.RotaryEmbedding, "1.0")
def rotary_embedding_quantize(self, *args):
    QT.check_quantized_inputs(self)
    x, cos, sin = self.inputs[:3]
    for t in (x, cos, sin):
        if t.qinvariant or float(torch.as_tensor(t.zerop).abs().max()) != 0:
            raise QT.Unsupported(f"layer '{self.name}' (RotaryEmbedding): input '{t.name}' has a zero point or is "
                                 f"an integer tensor; the tool chain's integer form multiplies x, cos and sin as "
                                 f"they are")
    if len(self.inputs) == 4 and not self.inputs[3].qinvariant:
        raise QT.Unsupported(f"layer '{self.name}' (RotaryEmbedding): position_ids are not integers")
    out = self.outputs[0]
    symmetric_output(self, out)
    ratios = (out.scale / (x.scale * cos.scale), out.scale / (x.scale * sin.scale), out.scale / x.scale)
    for key, ratio in zip(RESCALES, ratios):
        self.params[key] = float(torch.tensor(float(ratio), dtype=torch.float32))
