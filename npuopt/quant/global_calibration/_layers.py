"""What AdaRound, AdaQuant and GPTQ share: the layers they round (TUNED_TYPES: the
convolutions, direct and transposed, in 2-D and 3-D, and FullyConnected; a weight-only
MatMul's constant operand, _operands.py), each layer's output error on the calibration
data as a quadratic function of its weights, and the weights' integer grid.

A layer computes y = W x + b per output channel (then its fused activation); x is a
patch of the input for a convolution. Its quantized form sees x_q, its input in the
quantized graph with the roundings of the layers before it already chosen, and should
still give the float output W x_f + b. Over the P patches of the calibration set,

    (1/P) sum ||W x_f + b - (W~ x_q + b~)||^2 = tr(W~ H W~^T) - 2 <W~, C> + const

with H = E[x_q x_q^T] and C = E[W x_f x_q^T] (`grams`, `Problem`): the error
of any rounding costs one small matrix product, whatever the number of patches, and
the best biases b~ for given weights have a closed form (`free_bias`). From fewer
patches than half the inputs (few samples, or a late layer's few positions), H is
kept as its factor, the patches themselves, and no K x K matrix is made. The fused
activation is left out of the error, as in the layer-wise losses of AdaRound and GPTQ.
"""
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Optional

import torch

from ...errors import QuantizeError
from ...memory import give_back_if_grown
from ...registry import OpType
from .. import tensors as QT
from ..settings import settings_of
from ..weight_plans import plan_biases
from . import _operands
from ._grams import Units, grams
from ._stream import Stream

TUNED_TYPES = (OpType.Convolution, OpType.DepthwiseConv, OpType.FullyConnected, OpType.Convolution3D,
               OpType.ConvTranspose, OpType.ConvTranspose3D)  # (fine-tuning's too)
TRANSPOSED_TYPES = (OpType.ConvTranspose, OpType.ConvTranspose3D)
ROWS_AT_ONCE = 2048  # weight rows a method takes at once (Problem.parts; GPTQ makes float64 copies of them)
CLIP_RATIOS = torch.linspace(0.5, 1.0, 21)  # shares of the calibrated weight range tried (choose_range)


# ---- one layer's problem ---------------------------------------------------------------
@dataclass
class Problem:
    """Choose W~ [groups, rows, K] on the grid to minimize the layer's output error
    tr(W~ H W~^T) - 2 <W~, C> + damp * ||W~ - W||^2 (+ a constant). `damp`
    (per group) pulls weights the data does not pin down (inputs that are always zero)
    toward the float ones. With `free_bias`, H and C already account for the best
    biases (`best_biases`), else the biases stay the float ones."""
    node: object
    weights: torch.Tensor     # W [groups, rows, K], float32
    H: Optional[torch.Tensor]         # [groups, K, K], float32; None when low_rank gives it
    low_rank: Optional[torch.Tensor]  # L [groups, K, P] with L L^T = H, from P patches, fewer than K / 2
    C: object                 # [groups, rows, K], float32, or a _grams.RowsTimes giving it (`cross`)
    damp: torch.Tensor        # [groups, 1, 1], float32
    grid: object              # the layer's tensors.WeightGrid (its scale, zero point and rounding)
    mean_q: Optional[torch.Tensor]   # E[x_q] [groups, K] and E[W x_f + b] [groups, rows] when free_bias
    mean_out: Optional[torch.Tensor]

    @classmethod
    def of(cls, node, xf, xq, qt, free_bias: bool, damp: float, units: Units) -> "Problem":
        c = node.get_constant("weights")
        groups = node.get_param("group", 1)
        w = as_matrices(node, c.betensor.detach().to(torch.float32))
        biases = node.constants["biases"].betensor.detach().to(torch.float32).reshape(groups, -1) \
            if "biases" in node.constants else torch.zeros(w.shape[:2], device=w.device)
        (h, x), mean_q, cross, mean_out = grams(node, xf, xq, qt, w, units, centred=free_bias)
        low_rank = None
        if x is not None:  # H = X^T X / P, or the centred patches' with the best biases
            low_rank = ((x - mean_q.unsqueeze(1).float()) if free_bias else x).transpose(1, 2) / math.sqrt(x.shape[1])
        elif free_bias:  # the covariances (in place: h is K x K)
            h.baddbmm_(mean_q.unsqueeze(2).float(), mean_q.unsqueeze(1).float(), alpha=-1)
        diag = _power(h, low_rank).mean(dim=1)
        lam = damp * torch.where(diag > 0, diag, torch.ones_like(diag))
        grid = QT.weight_grid(node, "weights", axis=0, groups=_grid_groups(node))
        return cls(node, w, h, low_rank, cross, lam.reshape(-1, 1, 1), grid,
                   mean_q.to(torch.float32) if free_bias else None,
                   (mean_out + biases).to(torch.float32) if free_bias else None)

    def cross(self, r0: int, r1: int) -> torch.Tensor:
        """C's rows [r0, r1), made from its factors where it is kept so."""
        return self.C[:, r0:r1] if isinstance(self.C, torch.Tensor) else self.C.rows(r0, r1)

    def input_power(self) -> torch.Tensor:
        """H's diagonal [groups, K]: the mean square of each input."""
        return _power(self.H, self.low_rank)

    def parts(self) -> Iterator["Rows"]:
        """The layer's rows ROWS_AT_ONCE at a time: the error is a sum over rows, so a method
        takes them part by part with the result it would get at once (a decoder's head at
        once, with AdaQuant's Adam moments, held 3.6 GB). The C heap's freed memory goes
        back after each part (the head's learning had left up to 500 MB more resident)."""
        rows = self.weights.shape[1]
        for r0 in range(0, rows, ROWS_AT_ONCE):
            yield Rows(self, r0, min(rows, r0 + ROWS_AT_ONCE))
            give_back_if_grown()

    def integers_by_parts(self, choose) -> torch.Tensor:
        """The integers [groups, rows, K] that `choose(part)` gives each of `parts()`."""
        q = torch.empty_like(self.weights)
        for part in self.parts():
            q[:, part.r0:part.r1] = choose(part)
        return q

    # ---- the grid ----
    def grid_values(self, r0: int = 0, r1: Optional[int] = None, grid=None) -> tuple:
        """The grid's (scale, zero point) beside weight rows [r0, r1) of every group:
        numbers, [groups, rows, 1] per channel, [groups, rows, K] per block. Made when asked
        for: per block they are a value per weight (kept, a decoder's head held 226 MB).
        `grid`: another grid of the layer's in place of its own (choose_range's candidates)."""
        grid = self.grid if grid is None else grid
        return tuple(_grouped(self.node, grid, v, self.weights, r0, r1) for v in (grid.scale, grid.zp))

    @property
    def qmin(self) -> int:
        return self.grid.qmin

    @property
    def qmax(self) -> int:
        return self.grid.qmax

    def to_grid(self, v: torch.Tensor) -> torch.Tensor:
        """Values in steps of the grid rounded to its nearest (integers, or a minifloat format's values)."""
        return self.grid.to_grid(v)

    def choose_range(self, per_block: bool = False) -> None:
        """Shrink the grid's calibrated range by the share of CLIP_RATIOS whose nearest
        rounding gives the least output error: per channel (per-block weights: for all its
        blocks, or each block's with `per_block`: Rows.block_errors), per group where per-tensor
        settings give each group a grid, else for the whole tensor; planned and used."""
        node, groups = self.node, _grid_groups(self.node)
        lo, hi = QT.weight_range(node, "weights", 0, groups)
        block = self.grid.block if per_block and not _rows_serve_every_group(node) else None
        grids = [QT.weight_grid(node, "weights", 0, groups, (lo * r, hi * r)) for r in CLIP_RATIOS.tolist()]
        errors = []
        for part in self.parts():
            gradient = part.gradient(part.weights) if block else None
            per_ratio = []
            for grid in grids:
                scale, zp = self.grid_values(part.r0, part.r1, grid)
                w = (self.to_grid(part.weights * scale - zp) + zp) / scale
                per_ratio.append(part.block_errors(w, block, gradient) if block else part.row_errors(w))
            errors.append(torch.stack(per_ratio, dim=-1))
        errors = torch.cat(errors, dim=1)               # [groups, rows, (blocks,) ratios]
        if _rows_serve_every_group(node):               # a row's range serves each group's matrix
            errors = errors.sum(dim=0, keepdim=True)
        method = settings_of(node).quantize_method_for_weight
        if not isinstance(lo, torch.Tensor):
            best = CLIP_RATIOS[int(errors.sum(dim=(0, 1)).argmin())]
        elif method.per_channel or method.per_block:  # per channel (or block), channel-major as lo
            best = CLIP_RATIOS[errors.argmin(dim=-1).reshape(-1).cpu()]
            best = best.repeat_interleave(lo.numel() // best.numel())
        else:
            best = CLIP_RATIOS[errors.sum(dim=1).argmin(dim=-1).cpu()].repeat_interleave(errors.shape[1])
        QT.plan_weight_range(node, "weights", lo * best, hi * best)
        self.grid = QT.weight_grid(node, "weights", 0, groups)

    def times_h(self, w: torch.Tensor) -> torch.Tensor:
        if self.low_rank is not None:
            return (w @ self.low_rank) @ self.low_rank.transpose(1, 2)
        return w @ self.H

    def best_biases(self, w: torch.Tensor, r0: int = 0) -> torch.Tensor:
        """free_bias: the biases that minimize the error of weights w (rows r0 on), [groups, rows]."""
        return self.mean_out[:, r0:r0 + w.shape[1]] - (w @ self.mean_q.unsqueeze(-1)).squeeze(-1)

    # ---- the result ----
    def plan_with_best_biases(self, q: torch.Tensor) -> None:
        """Use integers q and, with free_bias, the biases that fit them best (their weights
        made part by part: a decoder's head's per-block grid values and weights at once
        were 450 MB)."""
        if self.mean_q is None:
            return self.plan(q)
        biases = torch.empty_like(self.mean_out)
        for part in self.parts():
            biases[:, part.r0:part.r1] = self.best_biases(part.dequantize(q[:, part.r0:part.r1]), part.r0)
        self.plan(q, biases)

    def plan(self, q: torch.Tensor, biases: torch.Tensor = None) -> None:
        """Use integers q [groups, rows, K] for the layer's weights and, when given, these
        float biases (planned: the float model keeps its own; without, the float ones)."""
        c = self.node.get_constant("weights")
        QT.plan_weight_integers(self.node, "weights", from_matrices(self.node, q.detach(), c.betensor.shape))
        b = self.node.constants.get("biases")
        plan_biases(self.node, None if biases is None or b is None else biases.reshape(b.betensor.shape))


class Rows:
    """Weight rows [r0, r1) of a Problem: its weights, and its cross term and grid values
    made once when first asked for; the error's terms over those rows (rows are
    independent in it)."""

    def __init__(self, problem: Problem, r0: int, r1: int):
        self.problem, self.r0, self.r1 = problem, r0, r1
        self.weights = problem.weights[:, r0:r1]

    @cached_property
    def cross(self) -> torch.Tensor:
        return self.problem.cross(self.r0, self.r1)

    @cached_property
    def grid_values(self) -> tuple:
        """(scale, zero point) beside these rows: Problem.grid_values."""
        return self.problem.grid_values(self.r0, self.r1)

    def units(self, w: torch.Tensor) -> torch.Tensor:
        """Weights in steps of the grid: w * scale - zp (integers on the grid)."""
        scale, zp = self.grid_values
        return w * scale - zp

    def dequantize(self, q: torch.Tensor) -> torch.Tensor:
        scale, zp = self.grid_values
        return (q + zp) / scale

    def gradient(self, w: torch.Tensor) -> torch.Tensor:
        """The error's gradient at w: one product with H, so learning takes one per step."""
        return 2 * (self.problem.times_h(w) - self.cross + self.problem.damp * (w - self.weights))

    def row_errors(self, w: torch.Tensor) -> torch.Tensor:
        """The output error of weights w per row [groups, rows] (+ a constant per row)."""
        return ((w * self.problem.times_h(w)).sum(-1) - 2 * (w * self.cross).sum(-1)
                + (self.problem.damp * (w - self.weights) ** 2).sum(-1))

    def block_errors(self, w: torch.Tensor, block: int, gradient: torch.Tensor) -> torch.Tensor:
        """The output error's rise from the float weights W to w per block along K [groups,
        rows, blocks], each block moved alone: with d = w - W, d_b H_bb d_b^T + d_b . gradient_b
        (at W) + damp ||d_b||^2 (the cross terms d_b H_bc d_c left out)."""
        problem, d = self.problem, w - self.weights
        k = d.shape[-1]
        quad = []
        for j1 in range(0, k, block):
            part = d[..., j1:j1 + block]
            if problem.low_rank is not None:
                quad.append((part @ problem.low_rank[:, j1:j1 + block]).pow(2).sum(-1))
            else:
                quad.append(((part @ problem.H[:, j1:j1 + block, j1:j1 + block]) * part).sum(-1))
        linear = d * gradient + problem.damp * d * d
        sums = torch.nn.functional.pad(linear, (0, -k % block)).reshape(*d.shape[:-1], -1, block).sum(-1)
        return torch.stack(quad, dim=-1) + sums


def _power(h: Optional[torch.Tensor], low_rank: Optional[torch.Tensor]) -> torch.Tensor:
    return h.diagonal(dim1=1, dim2=2) if h is not None else low_rank.pow(2).sum(2)


def _grouped(node, grid, v, w: torch.Tensor, r0: int = 0, r1: Optional[int] = None):
    """A grid number, or its tensor beside rows [r0, r1) of weights w [groups, rows, K]:
    [groups, rows, 1] per channel (a transposed layer's row serving every group),
    [groups, rows, K] per block (a value per weight, made for those rows alone)."""
    if not isinstance(v, torch.Tensor):
        return float(v)
    groups, rows, k = w.shape
    v = v.to(w.device)
    if grid.block and _rows_serve_every_group(node):
        return as_matrices(node, grid.along(v).reshape(grid.shape))[:, r0:r1]
    if grid.block:  # channel-major blocks along K, as as_matrices orders a row's weights
        return v.reshape(groups, rows, -1)[:, r0:r1].repeat_interleave(grid.block, dim=2)[..., :k]
    return v.reshape(-1, rows, 1).expand(groups, rows, 1)[:, r0:r1].contiguous()


# ---- a layer's weights as one matrix per group -----------------------------------------
def _rows_serve_every_group(node) -> bool:
    """A grouped transposed convolution: its weights [O/group, *k, C] give group g the
    columns of its input channels in every row (ops/_conv.py), not rows of its own."""
    return node.type in TRANSPOSED_TYPES and node.get_param("group", 1) > 1


def _grid_groups(node) -> int:
    """The groups tensors.weight_grid makes a layer's grid over: a grouped transposed
    layer's weight-only grid is over its stored rows (quantize_weights_only), as one."""
    return 1 if _rows_serve_every_group(node) else node.get_param("group", 1)


def as_matrices(node, t: torch.Tensor) -> torch.Tensor:
    """Weights (or a value per weight) as the layer stores them, as its groups' matrices
    [groups, rows, K], K in the order of the patches (_grams.patches)."""
    groups = node.get_param("group", 1)
    if _rows_serve_every_group(node):
        return t.reshape(t.shape[0], -1, groups, t.shape[-1] // groups).permute(2, 0, 1, 3) \
            .reshape(groups, t.shape[0], -1)
    return t.reshape(groups, t.shape[0] // groups, -1)


def from_matrices(node, m: torch.Tensor, shape) -> torch.Tensor:
    """as_matrices undone: [groups, rows, K] in the layer's weights' `shape`."""
    if _rows_serve_every_group(node):
        groups, rows = m.shape[0], m.shape[1]
        return m.reshape(groups, rows, -1, shape[-1] // groups).permute(1, 2, 0, 3).reshape(shape)
    return m.reshape(shape)


# ---- the layers in order ------------------------------------------------------------
def has_tuned_weights(node) -> bool:
    """A layer of TUNED_TYPES with weights: the layers whose weights the methods choose
    (and fine-tuning learns). Not a grouped transposed convolution: it is quantized from
    its weight rows repeated per group (ops/_conv.quantize_transposed), which a plan of
    its stored rows does not follow; it keeps the nearest rounding, but where it is kept
    in float with weight-only settings (`rounds_weights`)."""
    return node.type in TUNED_TYPES and "weights" in node.constants and not _rows_serve_every_group(node)


def rounds_weights(node) -> bool:
    """The layers whose weights the rounding methods choose: has_tuned_weights, and a
    grouped transposed layer with weight-only settings, whose integers are its stored
    rows' (quantize_weights_only), taken group by group (as_matrices)."""
    return node.type in TUNED_TYPES and "weights" in node.constants \
        and (not _rows_serve_every_group(node) or settings_of(node).weight_only)


def rounded_layers(ctx, minifloat: bool = False) -> list:
    """The layers in scope whose weights a rounding method chooses, in the order their
    weights are read: weights on an integer grid, and with `minifloat` (a method that
    rounds with Problem.to_grid) fp8/fp4 weights too; a weight-only MatMul's constant
    operand (_operands) at its MatMul, whose settings it takes."""
    return [view.holder for view in _rounded_views(ctx, minifloat)]


def _rounded_views(ctx, minifloat: bool) -> list:
    """rounded_layers as _operands views: the layer that holds the weights, the one that reads them."""
    held = _operands.operands(ctx.graph)
    order = {n.name: i for i, n in enumerate(ctx.graph.nodes)}
    views = [held.get(n.name) or _operands.Direct(n) for n in ctx.graph.nodes if rounds_weights(n) or n.name in held]
    return [v for v in sorted(views, key=lambda v: order[v.reader.name])
            if settings_of(v.reader).weights_quantized and ctx.in_scope(v.reader)
            and (minifloat or settings_of(v.reader).weights_format == "int")]


class LayerData:
    """The calibration batches a method uses, and the layers' problems in topological
    order, each with its input in the quantized graph as the roundings chosen before it
    leave it."""

    def __init__(self, ctx, batches: int):
        self.ctx = ctx
        shard = ctx.shard(batches or None)
        if len(shard) == 0:
            raise QuantizeError("global calibration: the calibration set gave no batch")
        self.units, self.data = [], []
        for unit, batch in shard.read():
            self.units.append(unit)
            self.data.append([x.to(ctx.device) for x in shard.graph_inputs(batch)])
        self.count = len(shard)
        self.samples = sum(shard.size(u) for u in range(len(shard)))

    def elements(self, graph) -> Units:
        """This rank's elements as a Stream of `graph` holds them: one per batch, or one per
        sample where the graph runs samples one by one."""
        split = not graph.keeps_samples_apart()
        unit_of = [u for u, b in zip(self.units, self.data) for _ in range(int(b[0].shape[0]) if split else 1)]
        return Units(self.ctx.ranks, self.count, unit_of)

    def steps(self, epochs: int, batch_size: int) -> int:
        """OPT's epochs of batches of batch_size samples (0: all) as steps that each see
        the whole set, one per batch OPT would have taken."""
        return epochs * math.ceil(self.samples / (batch_size or self.samples))


    def problems(self, desc: str, free_bias, damp: float, choose_range: bool,
                 minifloat: bool = False, per_block_ranges: bool = False) -> Iterator[Problem]:
        """Each layer's Problem (with the best biases where `free_bias`, a bool or a test of
        the layer; its grid's range chosen first with `choose_range`: Problem.choose_range,
        each block's on its own with `per_block_ranges`;
        minifloat weights too with `minifloat`); when the caller resumes, the range, rounding
        and biases it planned are put into the plan's quantized graph (`replan`) before the
        layers after it run."""
        ctx = self.ctx
        views = _rounded_views(ctx, minifloat)
        asked = {view.reader.name for view in views}
        streams = (Stream(ctx.graph, self.data, one_thread=True, asked=asked),
                   Stream(ctx.plan.realised(), self.data, one_thread=False, asked=asked))
        units = self.elements(ctx.graph)
        try:
            for view in ctx.progress(views, desc):
                node = view.holder
                fnode, qnode = (s.until(view.reader.name) for s in streams)
                if qnode is None or not (qnode.quantized or settings_of(view.reader).weight_only):
                    continue
                layer = view.stand_in()
                problem = Problem.of(layer, view.rows(streams[0].inputs(fnode, view.port)),
                                     view.rows(streams[1].inputs(qnode, view.port)), qnode.inputs[view.port],
                                     "biases" in node.constants and (free_bias(node) if callable(free_bias)
                                                                     else free_bias), damp, units)
                streams[0].until(view.reader.name, through=True)  # the float layer runs before a plan edits it
                if choose_range:
                    problem.choose_range(per_block_ranges)
                yield problem
                del problem  # its K x K matrix, before the next layer's is made (callers let go of theirs too)
                view.adopt(layer)
                ctx.plan.replan(node.name)
        finally:
            for s in streams:
                s.close()
