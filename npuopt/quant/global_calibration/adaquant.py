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
    """The integers [groups, rows, K] AdaQuant chooses for one layer, its rows a part at a
    time (Adam is elementwise and rows are independent in the error: the same integers)."""
    return problem.integers_by_parts(lambda part: _learn_part(part, steps, lr, problem.qmin, problem.qmax))


def _learn_part(part, steps: int, lr: float, qmin: int, qmax: int) -> torch.Tensor:
    """Adam on the weights in grid steps u, the error's gradient taken at their rounding and
    passed straight through it, zero where the rounding is at or past the grid's ends (as
    torch's clamp passes none at its bounds: the integers autograd gave, checked equal);
    written out, not by autograd, whose graphs left a decoder's head a few hundred MB more."""
    u = part.units(part.weights)
    scale = part.grid_values[0]
    optimizer = torch.optim.Adam([u], lr=lr)
    for _ in range(steps):
        q = torch.round(u)
        inside = (q > qmin) & (q < qmax)
        u.grad = part.gradient(part.dequantize(q.clamp_(qmin, qmax))).div_(scale).mul_(inside)
        optimizer.step()
    return torch.round(u).clamp_(qmin, qmax)


@global_calibration("adaquant_zy", "after_calibration", edits_float=False, data_parallel=True)
def adaquant_zy(ctx, params):
    """AdaQuant: weights learned with the quantizer in the loop, then rounded; biases solved."""
    p = read_params("adaquant_zy", params, PARAMS)
    data = LayerData(ctx, p["batches"])
    steps = data.steps(p["epochs"], p["batch_size"])
    for problem in data.problems("adaquant_zy", free_bias=True, damp=DAMP, choose_range=True):
        problem.plan_with_best_biases(learn_weights(problem, steps, p["lr_weight"]))
        del problem  # its weights, before the plan is made real (a decoder's head's: 113 MB)
