"""MVN correction (the Compass Optimizer's mvn_correction): a normalization layer
(MVN, LayerNorm, InstanceNorm, GroupNorm, RMSNorm) divides its input by the input's
spread, so the error of the input's grid comes out magnified by the ratio of the
output's scale to the input's. Where the input's calibrated range is much wider than
the normalized output needs (a residual stream with rare large values), the input
gets a finer grid: with si and so the scales of the input and output (quantized
units per real unit), the input's scale becomes

    s = max(alpha * sqrt(si * so), si)

the geometric mean of the two, weighted by alpha, and never coarser than before. The
input is the output of the norm's nearest ancestor that computes (a Convolution,
FullyConnected, MatMul, Eltwise, BatchNorm, norm, recurrent, Input or Constant
layer), found through the layers that only move data (Reshape, Transpose, ...) as
OPT does, since those layers keep their input's grid. The method plans that tensor's
range (tensors.plan_activation_range) and changes nothing else.

OPT's params: mvn_correction[mode, alpha, beta, gamma, act_bits, wgt_bits, bias_bits,
lut_bits, multiplier_bits]. Mode 0 (OPT's default, "care more about performance") is
the range correction above; alpha 0 leaves every range as it is. Mode 1 also raises
the layers from the ancestor to the norm (widened by beta layers before, gamma after)
to act_bits activations, wgt_bits weights and bias_bits biases; it is not implemented
in npuopt yet and stops with one line, and beta to multiplier_bits, which only mode 1
reads, are checked but unused.

Where npuopt departs from OPT: OPT sets the corrected range to [-r/2, r/2] (signed)
or [0, r] around zero whatever the calibrated range's shape; npuopt scales the
calibrated range toward zero by si / s, which gives the same scale and keeps an
asymmetric range's zero point where calibration put it. OPT takes the ancestor's
first output; npuopt the output the norm actually reads."""
import math

from ...errors import ConfigError
from ...logger import OPT_INFO
from ...registry import OpType
from .. import tensors as QT
from ..settings import settings_of
from . import global_calibration
from ._params import read_params

PARAMS = [  # name, default, minimum, integer
    ("mode", 0, -math.inf, True),   # 0 and below: correct the input's range; above: also raise the bits (refused)
    ("alpha", 0.5, 0.0, False),     # weight of the geometric mean (0: no correction)
    ("beta", 0, 0, True),           # mode 1: layers before the ancestor also raised
    ("gamma", 0, 0, True),          # mode 1: layers after the norm also raised
    ("act_bits", 16, 1, True),      # mode 1's bits
    ("wgt_bits", 16, 1, True),
    ("bias_bits", 48, 1, True),
    ("lut_bits", 10, 1, True),
    ("multiplier_bits", 0, 0, True),  # mode 1; 0: act_bits
]
NORMS = (OpType.MVN, OpType.LayerNorm, OpType.InstanceNorm, OpType.GroupNorm, OpType.RMSNorm)
# layers whose output grid is their own choice, where the search for a norm's input stops
ANCESTORS = NORMS + (OpType.Convolution, OpType.ConvTranspose, OpType.Convolution3D, OpType.ConvTranspose3D,
                     OpType.DepthwiseConv, OpType.FullyConnected, OpType.RNN, OpType.BasicLSTM, OpType.GRUv1,
                     OpType.GRUv3, OpType.BatchNorm, OpType.MatMul, OpType.Eltwise, OpType.Input, OpType.Constant)


def corrected_scale(si: float, so: float, alpha: float) -> float:
    """The norm input's new scale from the input's (si) and output's (so) scales."""
    return max(alpha * math.sqrt(si * so), si)


def norm_input(norm, producers: dict):
    """(the layer that decides the grid of the norm's input, its output the norm reads
    through data-moving layers), or None where the input has no producing layer;
    `producers` maps a tensor name to the layer that writes it."""
    t = norm.inputs[0] if norm.inputs else None
    node = producers.get(t.name) if t is not None else None
    while node is not None and node.type not in ANCESTORS and node.inputs and node.inputs[0].name in producers:
        t = node.inputs[0]
        node = producers[t.name]
    return (node, t) if node is not None else None


def _scale(t):
    """A per-tensor activation scale, or None (not quantized, invariant, per-channel)."""
    if t is None or not t.is_quantized or t.qinvariant:
        return None
    scale = t.scale
    if hasattr(scale, "numel"):
        if scale.numel() != 1:
            return None
        scale = scale.item()
    return float(scale) if scale > 0 else None


@global_calibration("mvn_correction", "after_calibration", edits_float=False)
def mvn_correction(ctx, params):
    """MVN correction: a norm layer's input gets a finer grid, between its own and its output's."""
    p = read_params("mvn_correction", params, PARAMS)
    if p["mode"] > 0:
        raise ConfigError(f"field 'global_calibration': mvn_correction's mode {p['mode']} (the norm chain raised to "
                          f"{p['act_bits']}-bit activations and {p['bias_bits']}-bit biases) is not implemented in "
                          "npuopt; mode 0 (correct the norm input's range) is")
    if p["alpha"] == 0:
        return
    norms = [n for n in ctx.graph.nodes if n.type in NORMS and ctx.in_scope(n)]
    if not norms:
        return
    qgraph = ctx.plan.realised()
    producers = {t.name: n for n in ctx.graph.nodes for t in n.outputs}
    calibrated = {}  # each input's range before this method: two norms reading one input do not compound
    for norm in ctx.progress(norms, "mvn_correction"):
        found = norm_input(norm, producers)
        if found is None:
            continue
        producer, t = found
        si, so = _scale(qgraph.tensor(t.name)), _scale(qgraph.tensor(norm.outputs[0].name))
        if si is None or so is None:
            continue
        s = corrected_scale(si, so, p["alpha"])
        if s <= si:
            continue
        symmetric = settings_of(producer).quantize_method_for_activation.symmetric
        if t.name not in calibrated:
            calibrated[t.name] = QT.activation_range(producer, t, symmetric)
        lo, hi = calibrated[t.name]
        QT.plan_activation_range(t, lo * si / s, hi * si / s)
        OPT_INFO(f"mvn_correction: layer '{norm.name}': input '{t.name}' (of '{producer.name}') scale "
                 f"{si:.6g} -> {s:.6g} (output scale {so:.6g})")
    ctx.plan.replan(*(producers[t].name for t in calibrated))  # after all: each norm reads the grids as calibrated
