"""GroupNorm: the channel axis `axis` split into `group` groups; each group of each batch
item normalized over all its elements (its channels and the other non-batch axes), then
weights * n + biases with one weight and bias per channel. Float and quantized as
LayerNorm (docs/integer-semantics.md "LayerNorm", _norm.py) with rows = groups;
per-channel values along the channel axis."""
from ..errors import IRError
from ..registry import OpType, op_register, quant_register
from . import _norm


def layout(node, shape) -> _norm.Layout:
    ndim = len(shape)
    axis, group = node.get_param("axis"), node.get_param("group")
    if not isinstance(axis, int) or not -ndim <= axis < ndim or axis % ndim == 0:
        raise IRError(f"layer '{node.name}' (GroupNorm): axis {axis} must name a non-batch axis of a {ndim}-D input")
    c = axis % ndim
    channels = int(shape[c])
    if not isinstance(group, int) or group <= 0 or channels % group:
        raise IRError(f"layer '{node.name}' (GroupNorm): group {group} must be a positive divisor of the "
                      f"{channels} channels")
    view = tuple(int(d) for d in shape[:c]) + (group, channels // group) + tuple(int(d) for d in shape[c + 1:])
    kept = _norm.kept_shape(shape, [c])
    return _norm.Layout(view, [d for d in range(len(view)) if d not in (0, c)], kept, kept)


@op_register(OpType.GroupNorm, "1.0")
def groupnorm_forward(self, *args):
    return _norm.forward(self, layout(self, self.inputs[0].betensor.shape))


@quant_register(OpType.GroupNorm, "1.0")
def groupnorm_quantize(self, *args):
    lay = layout(self, self.inputs[0].ir_shape)
    _norm.quantize_normalization(self, lay.count, [max(lay.const_shape)])
