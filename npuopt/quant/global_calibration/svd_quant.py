"""SVD-based range search (the Compass Optimizer's svd_quant, an Arm China method with
no paper): the range of a layer's output grid is chosen from the output with its
noise removed, or by how well the quantized output keeps the float output's spectrum.
It plans ranges only (tensors.plan_activation_range, tensors.plan_weight_range).

OPT's params: svd_quant[mode, alpha, beta, nsteps, thresh]; the mode says what is done
to the layers in scope (all of them when no scope is given):

* 0: each output's calibrated range is scaled by the factor f from 1 (the range as
  it is) and nsteps factors from alpha to beta whose quantized output's spectrum
  (|FFT| along the last axis, on the last calibration batch) is nearest the float
  one's in mean squared error;
* 1: on every calibration batch, the output is denoised (the singular values of its
  last two axes below a threshold dropped, the threshold the `thresh` quantile of
  them, moved as OPT does into [1e-4, 1.56]), the range of the denoised output is
  scaled as in mode 0 on that batch, and the ranges of the batches are smoothed over
  the batches with the layer's running_statistic_momentum (OPT's third-order filter);
* 2: as mode 1 without the scaling: the smoothed range of the denoised outputs;
* 3: each FullyConnected layer's weight range (per channel or per tensor) is scaled
  by the factor from alpha to beta whose quantized layer, on a random input on its
  input grid shaped in frequency as OPT shapes it (`thresh` damps the weak half of
  the spectrum), is nearest the float layer, weighted by the worst cosine similarity
  of the weights' spectra seen so far (OPT's rule).

Where npuopt departs from OPT: OPT starts two of its filter's three states at 0, which
shrinks the smoothed range of a short calibration (to 0.56 of a steady range after one
batch at momentum 0.9); npuopt starts them at the first batch's value, so a steady
range stays as it is. OPT runs modes 0 and 3 only when the scope names layer
types (mode 3 also layer ids), and does nothing otherwise; npuopt runs every mode on
the layers in scope, all layers when none is given. A layer whose output grid is its
input's (a Reshape, a MAX pooling) is left out, since a range planned there would
not be used; layers with per-channel activations stop with one line, as in OPT.
Mode 3's random input comes from npuopt's generator (seeded per layer), not NumPy's."""
from typing import List

import torch
import torch.nn.functional as F

from ...errors import ConfigError
from ...logger import OPT_INFO
from ...registry import OpType
from .. import qmath
from .. import tensors as QT
from ..compare import dequantized
from ..settings import settings_of
from ..unify_scales import decides_own_grid
from . import global_calibration, one_thread
from ._layers import LayerData
from ._stream import Stream
from ._params import read_params

PARAMS = [  # name, default, minimum, integer
    ("mode", 0, 0, True),          # 0: scale search; 1: denoise and search; 2: denoise; 3: FullyConnected weights
    ("alpha", 0.5, 1e-6, False),   # factors tried: alpha to beta
    ("beta", 2.0, 1e-6, False),
    ("nsteps", 10, 1, True),
    ("thresh", 0.09, 0.0, False),  # modes 1-2: quantile of the singular values dropped; mode 3: spectrum damping
]
MAX_MODE = 3


def denoised_range(v: torch.Tensor, thresh: float) -> tuple:
    """(lo, hi) of v with the singular values of its last two axes below OPT's
    threshold dropped (the `thresh` quantile, moved into [1e-4, 1.56])."""
    v = torch.clamp(v.to(torch.float32), min=-32767)
    u, s, vh = torch.linalg.svd(v, full_matrices=False)
    ordered = s.flatten().sort()[0]
    pick = lambda share: float(ordered[min(int(len(ordered) * share), len(ordered) - 1)])  # noqa: E731
    share = thresh
    threshold = pick(share)
    while threshold > 1 and share > 0.01:
        threshold = pick(share)
        share -= 0.002
    threshold = min(threshold, 1.56)
    while threshold < 1e-4 and share < 0.2:
        threshold = pick(share)
        share += 0.015
    if threshold < 1e-4:
        threshold = 0.0018
    kept = s * (s.abs() > threshold)
    clean = v if not kept.any() else u @ torch.diag_embed(kept) @ vh
    lo, hi = float(clean.min()), float(clean.max())
    return (0.0 if float(v.min()) > 0 else lo), hi


class SpectrumFit:
    """How far a range's grid puts an output's spectrum (|FFT| along its last axis) from
    the float one's, in mean squared error."""

    def __init__(self, node, v: torch.Tensor):
        self.node, self.v = node, v.to(torch.float32)
        self.spectrum = torch.fft.fft(self.v, norm="forward").abs()

    def distance(self, lo: float, hi: float) -> float:
        q = QT.on_activation_grid(self.node, self.v, lo, hi)
        return float(((torch.fft.fft(q, norm="forward").abs() - self.spectrum) ** 2).mean())

    def best(self, lo: float, hi: float, factors: List[float]) -> tuple:
        """(lo, hi) scaled by 1 or the factor whose grid fits best."""
        best, least = 1.0, self.distance(lo, hi)
        for f in factors:
            d = self.distance(lo * f, hi * f)
            if d < least:
                best, least = f, d
        return lo * best, hi * best


def smoothed(values: List[float], momentum: float) -> float:
    """OPT's third-order smoothing of per-batch values, its states started at the first."""
    a1, a2, a3 = momentum * 1.53 / 3, momentum * 1.44 / 3, momentum * 0.03 / 3
    y1 = y2 = y3 = y = values[0]
    for x in values:
        y = a1 * y1 + a2 * y2 + a3 * y3 + (1 - a1 - a2 - a3) * x
        y1, y2, y3 = y, y1, y2
    return y


def _searched_layers(ctx, qgraph) -> list:
    """The float layers in scope whose output grid is their own, with it per tensor."""
    qnodes = {n.name: n for n in qgraph.nodes}
    layers = []
    for node in ctx.graph.nodes:
        qnode = qnodes.get(node.name)
        if qnode is None or not ctx.in_scope(node) or not decides_own_grid(qnode):
            continue
        if settings_of(node).quantize_method_for_activation.per_channel:
            raise ConfigError(f"field 'global_calibration': svd_quant: layer '{node.name}' has per-channel "
                              "activations; svd_quant searches per-tensor ranges only")
        layers.append(node)
    return layers


def search_output_ranges(ctx, p: dict, factors: List[float]) -> int:
    """Modes 0-2: plan each searched layer's output range; how many layers."""
    layers = {n.name for n in _searched_layers(ctx, ctx.plan.realised())}
    stream = Stream(ctx.graph, LayerData(ctx, 0).data, one_thread=True)
    planned = []
    try:
        for node in ctx.progress(ctx.graph.nodes, "svd_quant"):
            _, outputs = stream.around(node.name)
            t = node.outputs[0] if node.outputs else None
            if node.name not in layers or outputs[0][-1].dim() <= 1:
                continue
            if p["mode"] == 0:
                symmetric = settings_of(node).quantize_method_for_activation.symmetric
                rng = SpectrumFit(node, outputs[0][-1]).best(*QT.activation_range(node, t, symmetric), factors)
            else:
                ranges = [denoised_range(v, p["thresh"]) for v in outputs[0]]
                if p["mode"] == 1:
                    ranges = [SpectrumFit(node, v).best(lo, hi, factors) for v, (lo, hi) in zip(outputs[0], ranges)]
                momentum = float(ctx.field_of("running_statistic_momentum", node))
                rng = smoothed([r[0] for r in ranges], momentum), smoothed([r[1] for r in ranges], momentum)
            QT.plan_activation_range(t, *rng)
            planned.append(node.name)
    finally:
        stream.close()
    ctx.plan.replan(*planned)
    return len(planned)


def _random_input(qt, shape, thresh: float, seed: int) -> torch.Tensor:
    """Integers on input grid qt, uniform in [-qmax, qmax] with the weak half of their
    spectrum (below half the strongest bin of each column) damped by thresh and the
    rest raised by 1.15, truncated toward zero, as OPT draws them."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * qt.qmax
    spectrum = torch.fft.rfft(x)
    strong = spectrum.abs() >= spectrum.abs().max(dim=0).values * 0.5
    shaped = torch.fft.irfft(spectrum * torch.where(strong, 1.15, thresh), n=shape[-1])
    return torch.clamp(shaped, qt.qmin, qt.qmax).trunc().to(torch.float32)


def search_fc_weights(ctx, p: dict, factors: List[float]) -> int:
    """Mode 3: plan each FullyConnected layer's weight range; how many layers."""
    qgraph = ctx.plan.realised()
    layers = [n for n in ctx.graph.nodes if n.type == OpType.FullyConnected and ctx.in_scope(n)
              and getattr(qgraph.node(n.name), "quantized", False) and settings_of(n).activation_bits <= 8]
    for index, node in enumerate(ctx.progress(layers, "svd_quant")):
        qx = qgraph.node(node.name).inputs[0]
        w = node.get_constant("weights").betensor.to(torch.float32)
        x = _random_input(qx, list(qx.ir_shape), p["thresh"], 10000 + index).to(w.device)
        b = node.get_constant("biases").betensor.to(torch.float32) if "biases" in node.constants else None
        want = F.linear(qmath.dequantize(x, qx.scale, qx.zerop), w, b)
        spectrum = torch.fft.fft(w).abs().flatten()
        lo, hi = QT.weight_range(node, "weights", 0)
        best, best_error, worst_cosine = 1.0, 1000.0, 1.0
        for f in factors:
            QT.plan_weight_range(node, "weights", lo * f, hi * f)
            ctx.plan.replan(node.name)
            qnode = qgraph.node(node.name)
            qw = QT.integer_weights(qnode.constants["weights"]).to(torch.float32)
            worst_cosine = min(worst_cosine, float(F.cosine_similarity(torch.fft.fft(qw).abs().flatten(), spectrum,
                                                                       dim=0)))
            qx.betensor = x.to(qx.dtype.torch_dtype)
            with torch.no_grad(), one_thread():
                qnode.forward()
            error = float(((dequantized(qnode.outputs[0]) - want) ** 2).mean())
            if error < best_error * worst_cosine:
                best_error = error * worst_cosine + (1 - worst_cosine) * best_error
                best = f
        QT.plan_weight_range(node, "weights", lo * best, hi * best)
        ctx.plan.replan(node.name)
    return len(layers)


@global_calibration("svd_quant", "after_calibration", edits_float=False)
def svd_quant(ctx, params):
    """svd_quant: output ranges from denoised outputs or spectrum fits; mode 3 FullyConnected weight ranges."""
    p = read_params("svd_quant", params, PARAMS)
    if p["mode"] > MAX_MODE:
        raise ConfigError(f"field 'global_calibration': svd_quant's mode must be 0, 1, 2 or 3, got {p['mode']}")
    if p["beta"] < p["alpha"]:
        raise ConfigError(f"field 'global_calibration': svd_quant's beta ({p['beta']:g}) must be at least "
                          f"its alpha ({p['alpha']:g})")
    factors = torch.linspace(p["alpha"], p["beta"], p["nsteps"]).tolist()
    if p["mode"] == MAX_MODE:
        count = search_fc_weights(ctx, p, factors)
        OPT_INFO(f"svd_quant (mode 3): the weight ranges of {count} FullyConnected layers searched")
    else:
        count = search_output_ranges(ctx, p, factors)
        OPT_INFO(f"svd_quant (mode {p['mode']}): the output ranges of {count} layers planned")
