"""What op test cases are made of: the Case record and small builders of the layers
most cases use. Every other module of this folder holds cases of one op family in a
list CASES; tools/gen_op_tests.py writes them all (one folder per case)."""
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch


@dataclass
class Case:
    name: str
    doc: str
    inputs: List[Tuple[int, ...]]            # input shapes without the batch axis
    build: Callable                          # build(builder, rng, input names) -> output names
    cfg: Dict[str, str] = field(default_factory=dict)
    calib_range: Tuple[float, float] = (-1.0, 1.0)
    run_range: Tuple[float, float] = (-1.0, 1.0)
    data: Callable = None                    # data(rng, shapes, n, value_range, run) -> arrays; default uniform


# ---- layer helpers -------------------------------------------------------------
def weights(rng, *shape, scale=0.5):
    return torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))


def conv(b, rng, name, bottom, cin, cout, k=3, stride=1, pads=(1, 1, 1, 1), dilation=1, group=1,
         act="NONE", channel_scales=None, bias=True):
    w = weights(rng, cout, k, k, cin // group)
    if channel_scales is not None:
        w = w * torch.tensor(channel_scales, dtype=torch.float32).reshape(-1, 1, 1, 1)
    params = dict(kernel_x=k, kernel_y=k, stride_x=stride, stride_y=stride, pad_top=pads[0],
                  pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3], dilation_x=dilation,
                  dilation_y=dilation, group=group, num_output=cout, with_activation=act)
    constants = {"weights": w}
    if bias:
        constants["biases"] = weights(rng, cout, scale=0.2)
    return b.layer("Convolution", name, [bottom], params, constants)[0]


def pool(b, name, bottom, method, k, stride, pads=(0, 0, 0, 0), ceil_mode=False, count_include_pad=False):
    params = dict(method=method, kernel_x=k, kernel_y=k, stride_x=stride, stride_y=stride, pad_top=pads[0],
                  pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3], dilation_x=1, dilation_y=1,
                  ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    return b.layer("Pooling", name, [bottom], params)[0]


def act(b, name, bottom, method, **params):
    return b.layer("Activation", name, [bottom], dict(method=method, **params))[0]


def eltwise(b, name, x, y, method, act="NONE"):
    """With the params the parser writes for a fused LEAKYRELU."""
    params = dict(method=method, with_activation=act)
    if act == "LEAKYRELU":
        params["negative_slope_type"], params["negative_slope_value"] = "float32", 0.1
    return b.layer("Eltwise", name, [x, y], params)[0]


def uniform(rng, lo_hi, shape):
    lo, hi = lo_hi
    return (rng.random(shape) * (hi - lo) + lo).astype(np.float32)


def uniform_inputs(rng, shapes, n, value_range, run):
    return [uniform(rng, value_range, (n,) + s) for s in shapes]
