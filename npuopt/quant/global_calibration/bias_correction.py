"""Bias correction (Nagel et al. 2019, "Data-Free Quantization", sec. 4.2, empirical
form): rounding a layer's weights to their grid moves the mean of each output channel
by E[(W~ - W) x]. On a per-tensor grid the move is large on channels whose weights are
small next to the tensor's largest: their few integer steps round with a bias that the
channels after them add up. Measured on the calibration set (inputs from the float
graph, before the fused activation) and subtracted from the biases the quantized layer
takes (planned: weight_plans.plan_biases; the float model keeps its own), which the 32-bit
quantized biases keep almost exactly.

The weights' rounding is the one quantize will store (`tensors.weight_integers`): the
nearest, or the plan of a method that ran before this one.
"""
import torch

from ...errors import ConfigError
from ...logger import OPT_INFO
from .. import tensors as QT
from ..settings import settings_of
from ..weight_plans import biases_of, plan_biases
from . import global_calibration, one_thread
from ._layers import has_tuned_weights


def correctable(ctx) -> list:
    """The layers in scope with weights and biases that will be quantized."""
    return [n for n in ctx.graph.nodes if has_tuned_weights(n) and "biases" in n.constants
            and ctx.in_scope(n) and not settings_of(n).trigger_float_op]


def rounding_error(node) -> torch.Tensor:
    """W~ - W: the weights as the quantized layer will compute with them, minus the float ones."""
    grid = QT.weight_grid(node, "weights", axis=0, groups=node.get_param("group", 1))
    w = node.get_constant("weights").betensor
    return grid.dequantize(QT.weight_integers(node, "weights", grid)).to(w.device) - w.to(torch.float32)


def linear_output(node, weights: torch.Tensor) -> torch.Tensor:
    """The layer's output with `weights`, no biases and no fused activation, for the
    input it holds now; the layer and its output are left as they were (the layers
    after it read that output)."""
    c, biases, out = node.constants["weights"], node.constants.pop("biases"), node.outputs[0].betensor
    kept_weights, activation = c.betensor, node.params.get("with_activation")
    c.betensor, node.params["with_activation"] = weights, "NONE"
    try:
        return node.forward()
    finally:
        c.betensor, node.constants["biases"], node.outputs[0].betensor = kept_weights, biases, out
        if activation is None:
            del node.params["with_activation"]
        else:
            node.params["with_activation"] = activation


@global_calibration("bias_correction", "after_calibration", edits_float=False)
def bias_correction(ctx, params) -> None:
    """Correct the biases each quantized layer takes by the mean output shift its weight rounding causes."""
    if params:
        raise ConfigError("field 'global_calibration': bias_correction takes no params")
    errors = {n.name: rounding_error(n) for n in correctable(ctx)}
    sums, counts = {}, {}

    def measure(node):
        delta = errors.get(node.name)
        if delta is not None:
            y = linear_output(node, delta)
            y = y.reshape(-1, y.shape[-1])
            sums[node.name] = sums.get(node.name, 0.0) + y.sum(dim=0, dtype=torch.float64)
            counts[node.name] = counts.get(node.name, 0) + y.shape[0]

    for inputs in ctx.progress(ctx.batches(), "bias correction", unit="batch"):
        with one_thread():
            ctx.graph.forward(inputs, after_node=measure)
    largest = 0.0
    for node in ctx.graph.nodes:
        if node.name in sums:
            b = biases_of(node)
            shift = (sums[node.name] / counts[node.name]).to(b.device)
            plan_biases(node, (b.to(torch.float64) - shift.reshape(b.shape)).to(b.dtype))
            largest = max(largest, float(shift.abs().max()))
    OPT_INFO(f"bias_correction: biases of {len(sums)} layers corrected (largest shift {largest:.4g})")
