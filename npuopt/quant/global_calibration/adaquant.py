"""AdaQuant (Hubara et al., "Improving Post Training Neural Quantization: Layer-wise
Calibration and Integer Programming", 2020): a layer's weights are learned freely,
with the quantizer in the loop (rounded in the forward, the gradient passed straight
through), to minimize the layer's output error on the calibration data; then rounded.
The biases are the ones that minimize the error for the rounded weights (their
least-squares solution, exact where OPT learns them), planned with the rounding.
Before learning, the grid's range is chosen (Problem.choose_range), where OPT learns
the weights' scale (lr_quant_param_weight): on EfficientNet-Lite0 with 4-bit weights
top-1 0.812 without, 0.846 with it.

OPT's params: adaquant_zy[batches, epochs, batch_size, lr_weight, lr_bias,
lr_quant_param_weight, lr_quant_param_activation]; lr_weight is in steps of the
weights' grid, steps = epochs * ceil(samples / batch_size) as for adaround (every
step sees the whole calibration set). The last three have no effect in npuopt: the
biases are solved, the weights' range is chosen as above, and the activations'
scales stay the calibrated ones."""

import torch

from . import global_calibration
from ._layers import LayerData
from ._params import read_params

PARAMS = [  # name, default, minimum, integer
    ("batches", 0, 0, True),        # calibration batches used (0: all of them)
    ("epochs", 500, 1, True),
    ("batch_size", 0, 0, True),     # samples per step in OPT (0: all): sets the step count only
    ("lr_weight", 1e-3, 0, False),  # Adam's learning rate of the weights, in grid steps
    ("lr_bias", 1e-3, 0, False),
    ("lr_quant_param_weight", 1e-3, 0, False),
    ("lr_quant_param_activation", 0.1, 0, False),
]
DAMP = 0.01  # pull toward the float weights, relative to the mean input power


def learn_weights(problem, steps: int, lr: float) -> torch.Tensor:
    """The integers [groups, rows, K] AdaQuant chooses for one layer."""
    u = problem.units(problem.weights).requires_grad_(True)
    optimizer = torch.optim.Adam([u], lr=lr)
    for _ in range(steps):
        q = (u + (torch.round(u) - u).detach()).clamp(problem.qmin, problem.qmax)
        w = problem.dequantize(q)
        loss = (w * problem.gradient(w.detach())).sum()  # its gradient is the error's
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return torch.round(u.detach()).clamp(problem.qmin, problem.qmax)


@global_calibration("adaquant_zy", "after_calibration", edits_float=False, data_parallel=True)
def adaquant_zy(ctx, params):
    """AdaQuant: weights learned with the quantizer in the loop, then rounded; biases solved."""
    p = read_params("adaquant_zy", params, PARAMS)
    data = LayerData(ctx, p["batches"])
    steps = data.steps(p["epochs"], p["batch_size"])
    for problem in data.problems("adaquant_zy", free_bias=True, damp=DAMP, choose_range=True):
        q = learn_weights(problem, steps, p["lr_weight"])
        problem.plan_with_best_biases(q)
