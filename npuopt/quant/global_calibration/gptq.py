"""GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
Pre-trained Transformers", 2022): a layer's weight columns (its inputs) are rounded
one after another, and each rounding error is made up for by the columns not rounded
yet, as the layer's Hessian H = E[x x^T] of the output error says (through the
Cholesky factor of its inverse). Damping adds perc_damp times H's mean diagonal.

OPT's params: gptq_zy[batches, use_act_order, perc_damp, block_size]; act order
rounds the columns of the largest input power first. npuopt's H comes from the
layer's input in the quantized graph and the error from the float output
(_layers.py), so that a layer also makes up for the errors before it. The grid's
range stays the calibrated one (choosing it first as AdaQuant does changed
EfficientNet-Lite0's 4-bit top-1 from 0.826 to 0.820, and took longer)."""
import torch

from . import global_calibration
from ._layers import LayerData, read_params

PARAMS = [  # name, default, minimum, integer
    ("batches", 0, 0, True),        # calibration batches used (0: all of them)
    ("use_act_order", 1, 0, True),
    ("perc_damp", 0.01, 0, False),
    ("block_size", 128, 1, True),   # columns whose updates are applied together
]


def round_columns(problem, act_order: bool, block: int) -> torch.Tensor:
    """The integers [groups, rows, K] GPTQ chooses for one layer."""
    h = problem.H.double() + problem.damp.double() * torch.eye(problem.H.shape[-1], dtype=torch.float64, device=problem.H.device)
    w = problem.target()
    k = w.shape[-1]
    order = torch.argsort(h.diagonal(dim1=1, dim2=2), dim=1, descending=True) if act_order else \
        torch.arange(k, device=w.device).expand(w.shape[0], k)
    w = w.gather(2, order.unsqueeze(1).expand_as(w))
    h = h.gather(1, order.unsqueeze(2).expand_as(h)).gather(2, order.unsqueeze(1).expand_as(h))
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True).to(torch.float32)
    scale, zp = _rows(problem.scale), _rows(problem.zp)
    q = torch.zeros_like(w)
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        w1, err = w[..., i1:i2].clone(), torch.zeros_like(w[..., i1:i2])
        for i in range(i2 - i1):
            col = w1[..., i]
            q[..., i1 + i] = torch.round(col * scale - zp).clamp(problem.qmin, problem.qmax)
            e = (col - (q[..., i1 + i] + zp) / scale) / hinv[:, i1 + i, i1 + i].unsqueeze(1)
            w1[..., i:] -= e.unsqueeze(2) * hinv[:, i1 + i, i1 + i:i2].unsqueeze(1)
            err[..., i] = e
        w[..., i2:] -= err @ hinv[:, i1:i2, i2:]
    return q.gather(2, torch.argsort(order, dim=1).unsqueeze(1).expand_as(q))


def _rows(v):
    """The grid's scale or zero point of each row [groups, rows] (the same in every column)."""
    return v[..., 0] if isinstance(v, torch.Tensor) else v


@global_calibration("gptq_zy", "after_calibration", edits_float=False)
def gptq_zy(ctx, params):
    """GPTQ: column-by-column rounding of Convolution/DepthwiseConv/FullyConnected weights with error feedback."""
    p = read_params("gptq_zy", params, PARAMS)
    data = LayerData(ctx, p["batches"])
    for problem in data.problems("gptq_zy", free_bias=False, damp=p["perc_damp"], choose_range=False):
        problem.plan(round_columns(problem, bool(p["use_act_order"]), p["block_size"]))
