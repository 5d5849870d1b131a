"""Fold a BatchNorm into the Convolution or FullyConnected before it: scale the
weights per output channel and shift the biases (created when absent)."""
from ..logger import OPT_DEBUG
from ..ops._layout import along_axis
from ..registry import OpType
from ..tensor import PyTensor
from ._absorb import absorb_followers


def _fold(producer, bn) -> bool:
    if producer.type not in (OpType.Convolution, OpType.FullyConnected):
        return False
    if str(producer.get_param("with_activation", "NONE")).upper() != "NONE":
        return False  # the scale would land before the activation instead of after it
    ndim = len(bn.inputs[0].ir_shape)
    weights = producer.get_constant("weights")
    scale = bn.get_constant("weights").betensor
    shift = bn.get_constant("biases")
    if ndim == 0 or int(bn.get_param("axis", -1)) % ndim != ndim - 1 or scale.numel() != weights.betensor.shape[0]:
        return False  # not along the producer's output channels
    w = weights.betensor
    weights.betensor = (w * along_axis(scale, 0, w.dim())).to(w.dtype)
    if "biases" in producer.constants:
        b = producer.constants["biases"].betensor
        producer.constants["biases"].betensor = (b * scale + shift.betensor).to(b.dtype)
    else:
        producer.constants["biases"] = PyTensor("biases", shift.betensor.clone(), shift.dtype, shift.ir_shape)
    OPT_DEBUG("folded BatchNorm '%s' into %s '%s'", bn.name, producer.type, producer.name)
    return True


def fold_batchnorm(graph) -> list:
    """Returns the BatchNorm layers removed."""
    return absorb_followers(graph, OpType.BatchNorm, _fold)
