"""LRN, Normalization (L1, L2), Moments and LogSoftmax: channels of different offsets and
spreads (op_cases.norm's data); 8-bit symmetric, 8-bit asymmetric and 16-bit activations."""
from op_cases.common import Case, act
from op_cases.norm import _spread_channels

ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
ACT16 = dict(activation_bits="16", quantize_method_for_activation="per_tensor_asymmetric")


def _lrn(b, rng, x):
    """ACROSS_CHANNELS of an odd and an even size; WITHIN_CHANNEL (kept in float)."""
    five = b.layer("LRN", "lrn5", [x[0]], dict(method="ACROSS_CHANNELS", size=5, bias=1.0, alpha=0.4, beta=0.75))
    two = b.layer("LRN", "lrn2", [x[0]], dict(method="ACROSS_CHANNELS", size=2, bias=2.0, alpha=1.5, beta=0.5))
    within = b.layer("LRN", "lrn_within", [x[0]], dict(method="WITHIN_CHANNEL", size=3, bias=1.0, alpha=0.3,
                                                       beta=0.75))
    return five + two + within


def _normalization(b, rng, x):
    """L2 over the channels and over H, W; L1 over the channels; L2 after a RELU (unsigned)."""
    l2 = b.layer("Normalization", "l2", [x[0]], dict(method="L2", axis=[3], epsilon=1e-12))
    l2_hw = b.layer("Normalization", "l2_hw", [x[0]], dict(method="L2", axis=[1, 2], epsilon=0.0))
    l1 = b.layer("Normalization", "l1", [x[0]], dict(method="L1", axis=[3], epsilon=1e-12))
    relu = act(b, "relu", x[0], "RELU")
    l2_pos = b.layer("Normalization", "l2_pos", [relu], dict(method="L2", axis=[2, 3], epsilon=1e-12))
    return l2 + l2_hw + l1 + l2_pos


def _moments(b, rng, x):
    """Over H, W keeping the axes; over the channels without them."""
    hw = b.layer("Moments", "moments_hw", [x[0]], dict(axis=[1, 2], keepdims=True), n_tops=2)
    c = b.layer("Moments", "moments_c", [x[0]], dict(axis=[3], keepdims=False), n_tops=2)
    return hw + c


def _logsoftmax(b, rng, x):
    """Along the channels (8) and along axis 1 (4: the short-axis form on 128-row batches)."""
    return b.layer("LogSoftmax", "logsoftmax", [x[0]], dict(axis=-1)) + \
        b.layer("LogSoftmax", "logsoftmax_h", [x[0]], dict(axis=1))


def _cases(name, doc, build):
    return [Case(name, doc, [(4, 4, 8)], build, data=_spread_channels),
            Case(name + "_asym", doc + ", asymmetric activations", [(4, 4, 8)], build, ASYM, data=_spread_channels),
            Case(name + "_act16", doc + ", 16-bit asymmetric activations", [(4, 4, 8)], build, ACT16,
                 data=_spread_channels)]


CASES = _cases("lrn", "LRN across channels (sizes 5 and 2) and within channels", _lrn) + \
    _cases("normalization", "Normalization L2 over C and over H, W, L1 over C, L2 of a RELU", _normalization) + \
    _cases("moments", "Moments over H, W (kept) and over C (dropped)", _moments) + \
    _cases("logsoftmax", "LogSoftmax along C and along H", _logsoftmax)
