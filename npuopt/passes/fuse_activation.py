"""Fuse a RELU/RELU6/CLIP/LEAKYRELU Activation into the `with_activation` of the
Convolution, DepthwiseConv, FullyConnected or Eltwise that feeds it."""
from ..logger import OPT_DEBUG
from ..registry import OpType
from ._absorb import absorb_followers

# fusable methods and the params that travel with each
_FUSABLE = {
    "RELU": (),
    "RELU6": (),
    "CLIP": ("clip_min", "clip_max"),
    "LEAKYRELU": ("negative_slope_value",),
}
_PRODUCERS = (OpType.Convolution, OpType.DepthwiseConv, OpType.FullyConnected, OpType.Eltwise)


def _fuse(producer, act) -> bool:
    method = str(act.get_param("method")).upper()
    if producer.type not in _PRODUCERS or method not in _FUSABLE:
        return False
    if str(producer.get_param("with_activation", "NONE")).upper() != "NONE":
        return False
    producer.params["with_activation"] = method
    for key in _FUSABLE[method]:
        producer.params.pop(key, None)  # a stale value must not shadow the activation's default
        if key in act.params:
            producer.params[key] = act.params[key]
    OPT_DEBUG("fused Activation '%s' (%s) into %s '%s'", act.name, method, producer.type, producer.name)
    return True


def fuse_activation(graph) -> list:
    """Returns the Activation layers removed."""
    return absorb_followers(graph, OpType.Activation, _fuse)
