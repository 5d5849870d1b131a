"""The helpers of the Compass Optimizer's op modules, for op plugins ported from it.

A Compass Optimizer op plugin (named as it recommends, `aipubt_opt_op_<name>.py`)
imports helpers of its built-in op modules: `ops.activation.apply_with_activation`,
`ops.cast.forward_with_clip`, `ops.conv.linear_op_quantize`, ... Ported with the
documented rule, such an import reads `npuopt.ops.<module>`, which is npuopt's own op
module (or none). While a plugin folder loads, npuopt/plugins.py makes
`npuopt.ops.<module>` name the adapter module ADAPTERS gives for it, unless a plugin
folder has its own `<module>.py`; npuopt's own code keeps its own modules.

Each adapter module has the names a plugin imports from OPT's module of that name,
with their meanings, written on npuopt's arithmetic (npuopt/ops, npuopt/quant): e.g.
`apply_with_activation` is npuopt's fused activation and rescale, `eltwise` npuopt's
Eltwise forward. OPT's activation method modules (relu, tanh, ...) all map to
`activation`, whose helpers OPT's activation module gathers too.

Not here, because npuopt has no arithmetic of theirs to stand on: the RNN/GRU helpers
(ops.rnn, ops.gruv3), ops.dilation2d, ops.upsamplebyindex, ops.multibox_transform_Loc,
ops.lpnormalization's isqrt_forward and ops.cosine's trigonometric_* (the chip's
fixed-point sine/cosine); a plugin importing them fails to import, naming the module
or the name.
"""
_ACTIVATION_METHODS = ("celu", "clip", "crelu", "elu", "gelu", "hardsigmoid", "hardswish", "leakyrelu", "mish",
                       "prelu", "relu", "relu6", "selu", "shrink", "sigmoid", "silu", "softplus", "softsign",
                       "swish", "tanh", "thresholdrelu")
_MODULES = ("activation", "bn", "cast", "conv", "convwinograd", "eltwise", "groupnorm", "inp", "interp", "pad",
            "permute", "pooling", "select", "sinh", "softmax", "stridedslice")

# OPT op module -> the module here that stands for it
ADAPTERS = {**{name: f"{__name__}.{name}" for name in _MODULES},
            **{name: f"{__name__}.activation" for name in _ACTIVATION_METHODS}}
