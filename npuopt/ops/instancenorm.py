"""InstanceNorm: each channel (the last axis) of each batch item normalized over `axis`
(default: every axis between batch and channel, as the tool chain), then weights * n +
biases with one weight and bias per channel. Float and quantized as LayerNorm
(docs/integer-semantics.md "LayerNorm", _norm.py); per-channel values along the last axis."""
from ..errors import IRError
from ..registry import OpType, op_register, quant_register
from . import _norm


def layout(node, shape) -> _norm.Layout:
    ndim = len(shape)
    if "axis" in node.params:
        axes = _norm.check_axes(node, node.params["axis"], ndim)
    elif ndim < 3:
        raise IRError(f"layer '{node.name}' (InstanceNorm): a {ndim}-D input has no axes between batch and "
                      f"channel to normalize over (give axis)")
    else:
        axes = list(range(1, ndim - 1))
    return _norm.plain_layout(shape, axes, [ndim - 1], ndim - 1)


@op_register(OpType.InstanceNorm, "1.0")
def instancenorm_forward(self, *args):
    return _norm.forward(self, layout(self, self.inputs[0].betensor.shape))


@quant_register(OpType.InstanceNorm, "1.0")
def instancenorm_quantize(self, *args):
    lay = layout(self, self.inputs[0].ir_shape)
    _norm.quantize_normalization(self, lay.count, [lay.const_shape[-1]])
