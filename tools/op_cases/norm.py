"""Normalization layers: GroupNorm, InstanceNorm and MVN (the mean/variance form shared
with LayerNorm) and RMSNorm, on rows of different offsets and spreads; 8-bit and 16-bit
activations, per-tensor and per-channel weights."""
import numpy as np

from op_cases.common import Case, act, uniform, weights

WIDE_PER_CHANNEL = dict(activation_bits="16", quantize_method_for_weight="per_channel_symmetric_restricted_range",
                        quantize_method_for_activation="per_tensor_asymmetric")
PER_CHANNEL = dict(quantize_method_for_weight="per_channel_symmetric_restricted_range")


def _spread_channels(rng, shapes, n, value_range, run):
    """Channels (the last axis) of different offsets and spreads; on the run one batch
    item's first channel constant (variance 0 in InstanceNorm)."""
    lo, hi = value_range
    shape = (n,) + shapes[0]
    x = uniform(rng, value_range, shape)
    x *= uniform(rng, (0.05, 1.0), (n,) + (1,) * (len(shape) - 2) + shape[-1:])
    x += uniform(rng, (lo / 2, hi / 2), (n,) + (1,) * (len(shape) - 2) + shape[-1:])
    if run:
        x[0, ..., 0] = 0.3
    return [x.astype(np.float32)]


def _groupnorm(b, rng, x):
    """4 groups of 2 channels over the last axis, and 2 groups of 2 along axis 2."""
    gn = b.layer("GroupNorm", "gn", [x[0]], dict(axis=3, group=4, epsilon=1e-5),
                 {"weights": weights(rng, 8) + 1.0, "biases": weights(rng, 8)})
    gn2 = b.layer("GroupNorm", "gn_axis2", [x[0]], dict(axis=2, group=2, epsilon=1e-3),
                  {"weights": weights(rng, 4) + 1.0, "biases": weights(rng, 4)})
    return gn + gn2 + [act(b, "relu", gn[0], "RELU")]


def _instancenorm(b, rng, x):
    inorm = b.layer("InstanceNorm", "in", [x[0]], dict(epsilon=1e-5),
                    {"weights": weights(rng, 8) + 1.0, "biases": weights(rng, 8)})
    return inorm + [act(b, "relu", inorm[0], "RELU")]


def _mvn(b, rng, x):
    return b.layer("MVN", "mvn", [x[0]], dict(axis=[1, 2], epsilon=1e-9)) + \
        b.layer("MVN", "mvn_all", [x[0]], dict(axis=[1, 2, 3], epsilon=1e-6))


def _rmsnorm(b, rng, x):
    """Over the channels, and over W and C (kept in float under per-channel weights)."""
    rms = b.layer("RMSNorm", "rms", [x[0]], dict(axis=[3], epsilon=1e-5), {"weights": weights(rng, 8) + 1.0})
    two = b.layer("RMSNorm", "rms_2d", [x[0]], dict(axis=[2, 3], epsilon=1e-6), {"weights": weights(rng, 4, 8) + 1.0})
    return rms + two


def _cases(name, doc, build):
    return [Case(name, doc, [(4, 4, 8)], build, data=_spread_channels),
            Case(name + "_pc", doc + ", per-channel weights", [(4, 4, 8)], build, PER_CHANNEL,
                 data=_spread_channels),
            Case(name + "_act16", doc + ", 16-bit asymmetric activations, per-channel weights", [(4, 4, 8)], build,
                 WIDE_PER_CHANNEL, data=_spread_channels)]


CASES = _cases("groupnorm", "GroupNorm: 4 groups over the channels (last axis) and 2 over axis 2", _groupnorm) + \
    _cases("instancenorm", "InstanceNorm over H and W per channel", _instancenorm) + \
    _cases("rmsnorm", "RMSNorm over C and over W, C", _rmsnorm) + \
    [Case("mvn", "MVN over H, W and over H, W, C", [(4, 4, 8)], _mvn, data=_spread_channels),
     Case("mvn_act16", "MVN on 16-bit asymmetric activations", [(4, 4, 8)], _mvn, WIDE_PER_CHANNEL,
          data=_spread_channels)]
