"""The plan's quantized graph as a torch module that can be trained (quantization-aware
fine-tuning of the IR itself, npuopt/fine_tuning.py).

Its forward is the exact integer forward of `plan.realised()`: every layer's outputs
are the integers npuopt writes and the chip computes, dequantized. Gradients flow
around them: each layer's float forward runs on the dequantized inputs, with its
learned weights rounded onto their grid (straight-through where rounding cuts the
gradient) and its outputs clamped to their grid's range, and the exact value takes
that surrogate's gradient (`_exact_with_gradient_of`). So what is trained is what the
chip computes (multiplier/shift rescales, lookup tables, Eltwise and Concat rescales,
bias rounding, clamps included), whatever the layer type, a plugin's too.

What is learned: the weights of the convolutions, direct and transposed, 2-D and 3-D,
and FullyConnected (_layers.has_tuned_weights; a MatMul's constant operand keeps its
planned rounding; integer or weight-only, integer or minifloat grids), in steps of
their grid, their biases, in steps of the output's grid, and where asked the weights'
ranges (LSQ); the activations' ranges stay the planned ones. Before a forward, the
layers whose parameters changed are planned again: their weights' range and integers
(tensors.plan_weight_range/_integers) and float biases (weight_plans.plan_biases),
then `plan.replan`, which quantizes those layers again through their own quantize
functions: the IR written after training is the plan of the last forward.
"""
import contextlib
import re
from typing import Dict, List, Optional

import torch

from ..errors import QuantizeError
from ..node import observing_placeholders
from ..registry import OpType
from . import tensors as QT
from .compare import dequantized
from .global_calibration._layers import has_tuned_weights
from .settings import settings_of
from .weight_plans import biases_of, plan_biases, planned


class _ExactWithGradientOf(torch.autograd.Function):
    """The exact value forward, the surrogate's gradient backward."""

    @staticmethod
    def forward(ctx, exact, surrogate):
        return exact

    @staticmethod
    def backward(ctx, grad):
        return None, grad


def learned_layers(graph) -> list:
    """The float graph's layers whose weights are learned: those of TUNED_TYPES whose
    weights are quantized."""
    return [n for n in graph.nodes if has_tuned_weights(n) and settings_of(n).weights_quantized]


class LearnedLayer(torch.nn.Module):
    """One layer's parameters: its float weights, in steps of the grid they started on
    (w = (units + zp0) / scale0); with `learn_range`, the log of the factor its weights'
    range is scaled by (per channel, block or tensor, as the grid's scale; LSQ's gradient);
    the biases' change, in steps of the output's grid."""

    def __init__(self, node, bias_step: float, learn_range: bool):
        super().__init__()
        self.node = node
        self.groups = node.get_param("group", 1) if node.type != OpType.FullyConnected else 1
        planned_range = planned(node, "planned_ranges", "weights")
        self.range = planned_range if planned_range is not None else QT.weight_range(node, "weights", 0, self.groups)
        QT.plan_weight_range(node, "weights", *self.range)  # the grid stays as it is (or as learned)
        w = node.get_constant("weights").betensor.detach().to(torch.float32)
        self.grid = QT.weight_grid(node, "weights", 0, self.groups)
        self.scale0, self.zp0 = self._along(self.grid, w.device)
        self.scale, self.zp = self.scale0, self.zp0  # the grid last planned
        integers = planned(node, "planned_integers", "weights")
        start = integers.to(torch.float32).to(w.device) if integers is not None and integers.shape == w.shape \
            else w * self.scale0 - self.zp0
        self.units = torch.nn.Parameter(start.clone())
        self.log_range = torch.nn.Parameter(torch.zeros_like(torch.as_tensor(self.grid.scale, dtype=torch.float32),
                                                             device=w.device)) if learn_range else None
        self.planned_log_range = None if self.log_range is None else self.log_range.detach().clone()
        b = biases_of(node)
        self.biases = None if b is None else b.detach().to(torch.float32).clone()
        self.bias_steps = None if b is None else torch.nn.Parameter(torch.zeros_like(self.biases))
        self.bias_step = bias_step
        self.versions = None

    def _along(self, grid, device) -> tuple:
        return tuple(torch.as_tensor(grid.along(v), dtype=torch.float32).to(device) for v in (grid.scale, grid.zp))

    def float_weights(self) -> torch.Tensor:
        return (self.units + self.zp0) / self.scale0

    def weights(self) -> torch.Tensor:
        """The float weights on the grid: rounded and clamped forward, straight through
        backward (none to a weight beyond the grid's ends); with a learned range, the
        grid's scale moves with it."""
        scale = self.scale
        if self.log_range is not None:  # exactly the planned grid's scale until the range moves
            scale = scale * self.grid.along(torch.exp(self.planned_log_range - self.log_range))
        v = self.float_weights() * scale - self.zp
        rounded = self.grid.to_grid(v.detach().clone())
        q = v + (rounded - v).detach()
        if not self.grid.fmt:
            q = torch.where((v.detach() - rounded).abs() <= 0.5, q, rounded)  # rounded, not clamped
        return (q + self.zp) / scale

    def float_biases(self) -> Optional[torch.Tensor]:
        return None if self.biases is None else self.biases + self.bias_steps * self.bias_step

    def changed(self) -> bool:
        versions = tuple(p._version for p in self.parameters())
        changed, self.versions = versions != self.versions, versions
        return changed

    def plan(self) -> None:
        """Put this layer's weight range, its weights rounded on that grid and its float
        biases into the plan."""
        node = self.node
        with torch.no_grad():
            if self.log_range is not None:
                factor = torch.exp(self.log_range.detach()).cpu()
                lo, hi = self.range
                QT.plan_weight_range(node, "weights", *((lo * factor, hi * factor) if isinstance(lo, torch.Tensor)
                                                        else (lo * float(factor), hi * float(factor))))
                self.grid = QT.weight_grid(node, "weights", 0, self.groups)
                self.scale, self.zp = self._along(self.grid, self.units.device)
                self.planned_log_range = self.log_range.detach().clone()
            v = self.float_weights() * self.scale - self.zp
            QT.plan_weight_integers(node, "weights", self.grid.to_grid(v))
            if self.biases is not None:
                plan_biases(node, self.float_biases())

    def finish(self) -> None:
        """The float graph's weights become the learned ones."""
        with torch.no_grad():
            self.plan()
            c = self.node.constants["weights"]
            c.betensor = self.float_weights().to(c.betensor.dtype)


class TrainableGraph(torch.nn.Module):
    """The plan's quantized graph: exact forward, straight-through gradients (module doc)."""

    def __init__(self, plan, learn_ranges: bool = False):
        super().__init__()
        self.plan = plan
        realised = plan.realised()
        self.layers = torch.nn.ModuleDict()
        self.by_name: Dict[str, LearnedLayer] = {}
        for node in learned_layers(plan.graph):
            qnode = realised.node(node.name)
            out = qnode.outputs[0] if qnode is not None else None
            step = 1.0 / float(out.scale) if out is not None and out.is_quantized and \
                not isinstance(out.scale, torch.Tensor) and float(out.scale) > 0 else _float_step(node)
            layer = LearnedLayer(node, step, learn_ranges)
            self.layers[_key(node.name, len(self.layers))] = layer
            self.by_name[node.name] = layer
        if not self.by_name:
            raise QuantizeError("fine-tuning: the graph has no layer whose weights can be learned "
                                "(a Convolution, DepthwiseConv, Convolution3D, ungrouped ConvTranspose(3D) or "
                                "FullyConnected)")
        self.sync()

    def sync(self) -> None:
        """Plan again the layers whose parameters changed since the last forward."""
        changed = [name for name, layer in self.by_name.items() if layer.changed()]
        for name in changed:
            self.by_name[name].plan()
        if changed:
            self.plan.replan(*changed)

    def finish(self) -> None:
        """The learned weights into the float graph, their integers and biases into the plan."""
        for layer in self.by_name.values():
            layer.finish()
        self.plan.forget()

    def forward(self, *inputs: torch.Tensor):
        """The quantized graph's output (dequantized), a tuple where it has several: what a
        Train plugin's loop gets from model(x)."""
        outputs = self.outputs(*inputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def outputs(self, *inputs: torch.Tensor) -> List[torch.Tensor]:
        """The quantized graph's outputs (dequantized) on float graph inputs."""
        self.sync()
        inputs = [x.to(self.plan.device) for x in inputs]
        qgraph = self.plan.realised()
        floats = {n.name: n for n in self.plan.graph.nodes}
        real: Dict[str, torch.Tensor] = {}
        for t, x in zip(qgraph.input_tensors, inputs):
            t.betensor, real[t.name] = x, x
        keep = {t.name for t in qgraph.output_tensors}
        last_use = {t.name: i for i, n in enumerate(qgraph.nodes) for t in n.inputs}
        try:
            for i, node in enumerate(qgraph.nodes):
                fed = [t.name for t in node.outputs if t.name in real]  # an Input layer's output is the fed value
                surrogates = [real[name] for name in fed] if fed else self._surrogate(node, floats.get(node.name),
                                                                                     real)
                with torch.no_grad():
                    node.forward()
                for t, s in zip(node.outputs, surrogates):
                    real[t.name] = _exact_with_gradient_of(t, s)
                for t in node.inputs:
                    if last_use.get(t.name) == i and t.name not in keep:
                        t.betensor = torch.zeros(())
                        real.pop(t.name, None)
            return [real[t.name] for t in qgraph.output_tensors]
        finally:
            for g in (qgraph, self.plan.graph):
                for t in g.tensors:
                    t.betensor = torch.zeros(())

    def _surrogate(self, qnode, fnode, real) -> list:
        """What carries the gradient of `qnode`'s outputs: the float layer of the same name
        on the dequantized inputs (learned weights rounded), the input itself through a
        layer the quantized graph added (Quantize, DeQuantize), else nothing."""
        inputs = [real.get(t.name) for t in qnode.inputs]
        if fnode is not None and fnode.type == qnode.type and len(fnode.inputs) == len(inputs) and \
                len(fnode.outputs) == len(qnode.outputs) and all(x is not None for x in inputs):
            for t, x in zip(fnode.inputs, inputs):
                t.betensor = x
            with self._learned_constants(fnode), observing_placeholders(False), torch.enable_grad():
                fnode.forward()
            return [t.betensor for t in fnode.outputs]
        if len(inputs) == 1 and len(qnode.outputs) == 1:
            return inputs
        return [None] * len(qnode.outputs)

    @contextlib.contextmanager
    def _learned_constants(self, fnode):
        layer = self.by_name.get(fnode.name)
        if layer is None:
            yield
            return
        kept = {k: c.betensor for k, c in fnode.constants.items()}
        fnode.constants["weights"].betensor = layer.weights()
        if layer.biases is not None:
            fnode.constants["biases"].betensor = layer.float_biases()
        try:
            yield
        finally:
            for k, value in kept.items():
                fnode.constants[k].betensor = value


def _exact_with_gradient_of(t, surrogate):
    """The exact real value of quantized-graph tensor t, with the gradient of `surrogate`
    clamped to t's grid (none where t holds integers that are not real values)."""
    exact = dequantized(t)
    if not exact.is_floating_point() or surrogate is None or not isinstance(surrogate, torch.Tensor) or \
            not surrogate.requires_grad or surrogate.shape != exact.shape:
        return exact
    if t.is_quantized and not t.dtype.is_minifloat and not isinstance(t.scale, torch.Tensor):
        lo, hi = ((q + float(t.zerop)) / float(t.scale) for q in (t.qmin, t.qmax))
        surrogate = surrogate.clamp(lo, hi)
    return _ExactWithGradientOf.apply(exact, surrogate.to(exact.dtype))


def _float_step(node) -> float:
    """The biases' step of a layer whose output stays float: 1/256 of its largest bias."""
    b = node.constants.get("biases")
    largest = float(b.betensor.detach().abs().max()) if b is not None and b.betensor.numel() else 0.0
    return largest / 256 if largest > 0 else 1e-3


def _key(name: str, index: int) -> str:
    """A ModuleDict key for a layer name (no dots)."""
    return f"{index}_{re.sub(r'[^0-9A-Za-z_]', '_', name)}"
