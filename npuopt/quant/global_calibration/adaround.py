"""AdaRound (Nagel et al., "Up or Down? Adaptive Rounding for Post-Training
Quantization", 2020): each weight is rounded down or up as a learned soft choice
h(V) in [0, 1] decides, layer by layer, to minimize the layer's output error on the
calibration data (its input taken from the quantized graph, so a layer makes up for
the errors before it). A regularizer with an annealed exponent beta pushes every h
to 0 or 1, so that the soft weights the error is learned on end up on the grid.
Then the biases are set to those that minimize the error for the rounded weights (a
least-squares solution; OPT's adaround keeps the float biases): on EfficientNet-Lite0
with 4-bit weights top-1 0.800 without, 0.832 with it. Before learning, the grid's
range is chosen as for AdaQuant (Problem.choose_range), and the learning rate is ten
times OPT's: the output's mean squared error against the float model's there fell
from 0.172 to 0.132 with the range and to 0.098 with both (top-1 stayed within
0.826-0.836, which 500 images cannot tell apart).

OPT's params: adaround[batches, epochs, batch_size, lr, reg_param, beta_start,
beta_end, warm_start]. Each step of npuopt's learning sees every patch of the
calibration set at once (the layer's error from its Gram matrices, _layers.py), so
a step is as good as a whole epoch of OPT's batches: steps = epochs *
ceil(samples / batch_size), batch_size 0 meaning all samples."""
import math

import torch

from . import global_calibration
from ._layers import LayerData
from ._params import read_params

PARAMS = [  # name, default, minimum, integer
    ("batches", 0, 0, True),        # calibration batches used (0: all of them)
    ("epochs", 500, 1, True),
    ("batch_size", 0, 0, True),     # samples per step in OPT (0: all): sets the step count only
    ("lr", 1e-2, 0, False),         # Adam's learning rate of V (OPT: 0.001)
    ("reg_param", 0.01, 0, False),  # weight of the rounding regularizer
    ("beta_start", 20, 0, False),   # its exponent, annealed from beta_start to beta_end
    ("beta_end", 2, 0, False),
    ("warm_start", 0.2, 0, False),  # share of the steps before the regularizer starts
]
ZETA, GAMMA = 1.1, -0.1   # the rectified sigmoid's stretch: h reaches 0 and 1 exactly
# the pull toward the float weights, relative to the mean input power: it keeps weights where the
# calibration data pin them down too little (as GPTQ's damping does, auto.py). 0.01 until 2026-12-01;
# on Lite0's 400 held-out calib images (100 calibration ones; top-1 / agreement / mean output cosine)
# 0.1 gave 4-bit per-channel asymmetric weights 0.8375 / 91.75% / 0.94262 -> 0.860 / 93.5% / 0.94576,
# 4-bit weight-only blocks of 32 0.8575 / 94.25% / 0.96434 -> 0.860 / 96.0% / 0.96642, the 8-bit
# per-tensor defaults 0.870 / 98.25% / 0.99582 -> 0.8675 / 98.0% / 0.99580 (4-bit per-channel, other
# values: 0.3 0.8425 / 91.5% / 0.94732, 1.0 0.8375 / 90.75% / 0.94916, 3.0 0.8325 / 90.75% / 0.93789)
DAMP = 0.1


def rectified_sigmoid(v: torch.Tensor) -> torch.Tensor:
    return (torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA).clamp(0, 1)


def learn_rounding(problem, steps: int, lr: float, reg_param: float, beta_start: float, beta_end: float,
                   warm_start: float) -> torch.Tensor:
    """The integers [groups, rows, K] AdaRound chooses for one layer, its rows a part at a
    time (Adam and the regularizer are elementwise, rows independent in the error)."""
    return problem.integers_by_parts(lambda part: _learn_part(part, problem.qmin, problem.qmax, steps, lr, reg_param,
                                                              beta_start, beta_end, warm_start))


def _learn_part(part, qmin: int, qmax: int, steps: int, lr: float, reg_param: float, beta_start: float,
                beta_end: float, warm_start: float) -> torch.Tensor:
    u = part.units(part.weights)
    low = torch.floor(u)
    rest = (u - low).clamp(0, 1)
    v = (-torch.log((ZETA - GAMMA) / (rest - GAMMA) - 1)).requires_grad_(True)
    optimizer = torch.optim.Adam([v], lr=lr)
    warm = int(warm_start * steps)
    for step in range(steps):
        h = rectified_sigmoid(v)
        w = part.dequantize((low + h).clamp(qmin, qmax))
        loss = (w * part.gradient(w.detach())).sum()  # its gradient is the error's
        if step >= warm:
            ratio = (step - warm) / max(steps - warm, 1)
            beta = beta_end + 0.5 * (beta_start - beta_end) * (1 + math.cos(ratio * math.pi))
            loss = loss + reg_param * (1 - (2 * h - 1).abs().pow(beta)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return (low + (v.detach() >= 0)).clamp(qmin, qmax)


@global_calibration("adaround", "after_calibration", edits_float=False, data_parallel=True)
def adaround(ctx, params):
    """AdaRound: learned up/down rounding of the convolutions' (direct, transposed, 3-D) and FullyConnected weights."""
    p = read_params("adaround", params, PARAMS)
    data = LayerData(ctx, p["batches"])
    steps = data.steps(p["epochs"], p["batch_size"])
    for problem in data.problems("adaround", free_bias=True, damp=DAMP, choose_range=True):
        problem.plan_with_best_biases(learn_rounding(problem, steps, p["lr"], p["reg_param"], p["beta_start"],
                                                     p["beta_end"], p["warm_start"]))
        del problem  # its weights, before the plan is made real (a decoder's head's: 113 MB)
