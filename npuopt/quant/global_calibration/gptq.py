"""GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
Pre-trained Transformers", 2022): a layer's weight columns (its inputs) are rounded
one after another, and each rounding error is made up for by the columns not rounded
yet, as the layer's Hessian H = E[x x^T] of the output error says. Damping adds
perc_damp times H's mean diagonal.

OPT's params: gptq_zy[batches, use_act_order, perc_damp, block_size]; act order
rounds the columns of the largest input power first. npuopt's H comes from the
layer's input in the quantized graph and the error from the float output
(_layers.py), so that a layer also makes up for the errors before it. The grid's
range stays the calibrated one (choosing it first as AdaQuant does changed
EfficientNet-Lite0's 4-bit top-1 from 0.826 to 0.820, and took longer).

The paper spreads the errors through the Cholesky factor of H^-1; `round_columns`
reaches the same integers from the Cholesky factor of H (no inverse: a third of the
cubic work), and, where H comes from fewer patches than half its inputs, from H's low
rank without any K x K matrix (resnet18 on 4 images: 4,608 inputs, 196 patches).
Issue 23: GPTQ took 131 s of that run's 134 s on one thread, and about 5 s now."""
import torch

from . import global_calibration, one_thread
from ._layers import LayerData
from ._params import read_params

PARAMS = [  # name, default, minimum, integer
    ("batches", 0, 0, True),        # calibration batches used (0: all of them)
    ("use_act_order", 1, 0, True),
    ("perc_damp", 0.01, 0, False),
    ("block_size", 128, 1, True),   # columns whose updates are applied together
    ("choose_range", 0, 0, True),   # npuopt's: 1 shrinks each channel's (per block: each block's) range first
]
SLAB = 256  # rows of H put in GPTQ's order at once
STEP = 16   # columns of a block rounded one by one before their share goes to the rest of the block


def round_columns(problem, act_order: bool, block: int) -> torch.Tensor:
    """The integers [groups, rows, K] GPTQ chooses for one layer.

    With the columns in GPTQ's order reversed, the damped H = L L^T (L lower) and the
    float weights of least error T, the error of integers Q is ||(T - Q) L||^2, whose
    column j depends on Q's columns j and after only. Rounding from the last column
    back, each against what the columns already rounded leave, is then GPTQ's rounding
    of its first column first (Babai's nearest plane; GPTQ's factor of H^-1 is L^-1
    reversed), and T L = (C + damp W) L^-T is one triangular solve. A block's columns
    take the share of the columns rounded before it in one product (the paper's lazy
    batch), then go one by one within the block. Float64 throughout: the integers
    follow the factor's last bits (a float32 factor changed 10 to 20% of them on
    resnet18, at the same error)."""
    g, _, k = problem.weights.shape
    order = torch.argsort(problem.input_power(), dim=1, descending=True, stable=True) if act_order else \
        torch.arange(k, device=problem.weights.device).expand(g, k)
    back = order.flip(1)  # L's column j is GPTQ's column k - 1 - j
    blocks = [(j1, min(j1 + block, k)) for j1 in range(0, k, block)]
    factor = _LowRank(problem, back, blocks) if problem.low_rank is not None else _Dense(problem, back)
    unorder = torch.argsort(back, dim=1)
    return problem.integers_by_parts(  # rows are rounded independently: a few at a time
        lambda part: _round_rows(problem, part, factor, back, blocks).gather(
            2, unorder.unsqueeze(1).expand(g, part.r1 - part.r0, k)))


def _round_rows(problem, part, factor, back, blocks) -> torch.Tensor:
    """round_columns on one part of the weight rows (Problem.parts), in L's column order."""
    g, k = back.shape
    columns = back.unsqueeze(1).expand(g, part.r1 - part.r0, k)
    b = (part.cross + problem.damp * part.weights).gather(2, columns).double()
    # in steps of the grid (times scale, before the zero point), column j's value before
    # rounding is (a_j - sum_{i>j} y_i L_ij) / L_jj, and y = Q + zp once rounded; a grid
    # with a scale per column (per block) works in the weights' own units instead
    scale, zp = part.grid_values
    per_column = isinstance(scale, torch.Tensor) and scale.shape[-1] > 1
    if per_column:
        scale, zp = (v.gather(2, columns).double() for v in (scale, zp))
        a = factor.solve(b).contiguous()
    else:
        a = factor.solve(b).mul_(scale).contiguous()
        scale, row_zp = None, _rows(zp)
    y = torch.empty_like(a)
    factor.begin()
    for j1, j2 in reversed(blocks):
        own = factor.diagonal_block(j1, j2)
        diag = own.diagonal(dim1=1, dim2=2).unsqueeze(1)
        acc = (a[..., j1:j2] - factor.share(y, j1, j2)) / diag
        grid = (scale[..., j1:j2], zp[..., j1:j2]) if per_column else (None, row_zp)
        _round_block(acc, own / diag, y[..., j1:j2], *grid, problem.to_grid)
    return problem.to_grid(y.mul_(scale).sub_(zp) if per_column else y.sub_(zp)).to(problem.weights.dtype)


def _round_block(acc, within, y, scale, zp, to_grid) -> None:
    """Round a block's columns from the last to the first into y (Q + zp; with `scale`,
    a scale per column [groups, rows, n], the weights (Q + zp) / scale; Q = to_grid(...):
    integers, or a minifloat format's values), with acc their
    values before rounding [groups, rows, n] and within[:, j] column j's share in the
    block's other columns: the lazy batch once more, in steps of STEP columns that go one
    by one, a step's share in the columns before it in one product."""
    for i2 in range(acc.shape[-1], 0, -STEP):
        i1 = max(i2 - STEP, 0)
        for j in range(i2 - 1, i1 - 1, -1):
            if scale is None:
                yj = to_grid(acc[..., j].sub(zp)).add_(zp)
            else:
                yj = to_grid(acc[..., j].mul(scale[..., j]).sub_(zp[..., j]))
                yj = yj.add_(zp[..., j]).div_(scale[..., j])
            y[..., j] = yj
            acc[..., i1:j].addcmul_(yj.unsqueeze(2), within[:, j, i1:j].unsqueeze(1), value=-1)
        acc[..., :i1].baddbmm_(y[..., i1:i2], within[:, i1:i2, :i1], alpha=-1)


class _Dense:
    """L itself, made in the place of a float64 copy of H in L's order (one K x K matrix)."""

    def __init__(self, problem, back: torch.Tensor):
        h = problem.H
        g, k = back.shape
        hb = torch.empty(g, k, k, dtype=torch.float64, device=h.device)
        for i in range(0, k, SLAB):  # a slab of rows at a time: no float32 copy of the whole
            rows = h.gather(1, back[:, i:i + SLAB].unsqueeze(2).expand(-1, -1, k))
            hb[:, i:i + SLAB] = rows.gather(2, back.unsqueeze(1).expand_as(rows))
        hb.diagonal(dim1=1, dim2=2).add_(problem.damp.reshape(g, 1))
        self.factor = hb.mT  # H's transpose is H laid out as LAPACK wants it: the factor takes its place
        torch.linalg.cholesky_ex(self.factor, check_errors=True,
                                 out=(self.factor, torch.empty(g, dtype=torch.int32, device=h.device)))

    def begin(self) -> None:
        """A new set of rows: share() keeps nothing between calls."""

    def diagonal_block(self, j1: int, j2: int) -> torch.Tensor:
        return self.factor[:, j1:j2, j1:j2]

    def solve(self, b: torch.Tensor) -> torch.Tensor:
        """b L^-T (L X^T = b^T: X comes out laid out by rows)."""
        return torch.linalg.solve_triangular(self.factor, b.transpose(1, 2), upper=False).transpose(1, 2)

    def share(self, y: torch.Tensor, j1: int, j2: int) -> torch.Tensor:
        """sum_{i >= j2} y_i L_ij for the columns j of block [j1, j2)."""
        return y[..., j2:] @ self.factor[:, j2:, j1:j2]


class _LowRank:
    """L of damp I + V V^T (V [groups, K, P], P < K / 2) by blocks: below its diagonal
    block, block b's columns are V G_b (L is semiseparable), so nothing is K x K. With M
    = I at first, block b's diagonal block is the Cholesky factor of damp I + V_b M V_b^T,
    G_b = M V_b^T L_bb^-T, then M -= G_b G_b^T."""

    def __init__(self, problem, back: torch.Tensor, blocks):
        v = problem.low_rank
        g, k, p = v.shape
        self.v = v.gather(1, back.unsqueeze(2).expand(g, k, p)).double()
        m = torch.eye(p, dtype=torch.float64, device=v.device).repeat(g, 1, 1)
        self.own, self.g = {}, {}
        for j1, j2 in blocks:
            vb = self.v[:, j1:j2]
            mv = m @ vb.transpose(1, 2)
            s = vb @ mv
            s.diagonal(dim1=1, dim2=2).add_(problem.damp.reshape(g, 1))
            self.own[j1] = torch.linalg.cholesky(s)
            self.g[j1] = torch.linalg.solve_triangular(self.own[j1], mv.transpose(1, 2), upper=False).transpose(1, 2)
            m -= self.g[j1] @ self.g[j1].transpose(1, 2)
        self.blocks = blocks
        self.rounded, self.done = None, k

    def begin(self) -> None:
        """A new set of rows: share() starts again from the last block."""
        self.rounded, self.done = None, self.v.shape[1]

    def diagonal_block(self, j1: int, j2: int) -> torch.Tensor:
        return self.own[j1]

    def solve(self, b: torch.Tensor) -> torch.Tensor:
        """b L^-T, block by block: x_b L_bb^T = b_b - t V_b^T with t the sum of x_a G_a^T before."""
        x, t = torch.empty_like(b), None
        for j1, j2 in self.blocks:
            rhs = b[..., j1:j2] if t is None else b[..., j1:j2] - t @ self.v[:, j1:j2].transpose(1, 2)
            x[..., j1:j2] = torch.linalg.solve_triangular(self.own[j1].transpose(1, 2), rhs, upper=True, left=False)
            part = x[..., j1:j2] @ self.g[j1].transpose(1, 2)
            t = part if t is None else t + part
        return x

    def share(self, y: torch.Tensor, j1: int, j2: int) -> torch.Tensor:
        """sum_{i >= j2} y_i L_ij for the columns j of block [j1, j2), as (sum_i y_i V_i) G_b;
        the blocks are asked from the last to the first."""
        part = y[..., j2:self.done] @ self.v[:, j2:self.done]
        self.rounded = part if self.rounded is None else self.rounded + part
        self.done = j2
        return self.rounded @ self.g[j1]


def _rows(v):
    """The grid's scale or zero point of each row [groups, rows] (the same in every column)."""
    return v[..., 0].double() if isinstance(v, torch.Tensor) else v


@global_calibration("gptq_zy", "after_calibration", edits_float=False, data_parallel=True)
def gptq_zy(ctx, params):
    """GPTQ: column-by-column rounding of the convolutions' and FullyConnected weights with
    error feedback, onto integer grids and fp8/fp4 ones alike; the biases stay the float ones."""
    run_gptq(ctx, read_params("gptq_zy", params, PARAMS), free_bias=False)


def run_gptq(ctx, p: dict, free_bias) -> None:
    """GPTQ with params `p` (PARAMS' names) on the layers in ctx's scope; where `free_bias`
    (a bool, or a test of the layer), the layer's rounding minimizes its error with the
    biases that fit it best, which are planned with it (Problem.plan_with_best_biases).
    On one thread: a factor's and a solve's last bits vary with the thread count, and the
    integers follow them (issue 13)."""
    data = LayerData(ctx, p["batches"])
    with one_thread():
        for problem in data.problems("gptq_zy", free_bias=free_bias, damp=p["perc_damp"],
                                     choose_range=bool(p["choose_range"]), minifloat=True, per_block_ranges=True):
            problem.plan_with_best_biases(round_columns(problem, bool(p["use_act_order"]), p["block_size"]))
            del problem  # its K x K matrix, before the next layer's is made
