"""What op test cases are made of: the Case record, small builders of the layers
most cases use, and the files of a case's folder besides its IR (data, opt.cfg, run.sh).
Every other module of this folder holds cases of one op family in a list CASES;
tools/gen_op_tests.py writes them all (one folder per case). Imports neither npuopt
nor anything but NumPy and torch, so that tools/parser_op_tests.py can run it beside
the tool chain's parser."""
import os
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
    parser: Dict[str, str] = field(default_factory=dict)  # parser cases: more [Common] fields of parser.cfg
    run_samples: int = 4                     # samples of in*.npy; 1 where the IR addresses batch 1 in constants
    dtypes: Tuple[str, ...] = ()             # the inputs' IR dtypes (int8, int32, ...); float32 where not given
    # run inputs as float32 values, which npuopt-run quantizes on the input's grid: integer
    # inputs whose grid has a zero point (an integer array there would be the grid's integers)
    run_as_floats: bool = False
    # parser cases: reference(model file, run inputs) -> the source model's outputs on them
    # (a pre-quantized model as its own runtime computes it), saved as source_outputs.npz
    reference: Callable = None

    def dtype_of(self, i: int) -> str:
        return self.dtypes[i] if i < len(self.dtypes) else "float32"

    def typed(self, arrays):
        """The data of the inputs whose dtypes are given, in those dtypes."""
        return [x.astype(self.dtypes[i]) if i < len(self.dtypes) else x for i, x in enumerate(arrays)]


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


def integer_inputs(*ranges):
    """A Case's `data`: integer-valued float32 inputs, input i in ranges[i] (inclusive)."""
    def data(rng, shapes, n, value_range, run):
        return [rng.integers(lo, hi + 1, (n,) + s).astype(np.float32) for s, (lo, hi) in zip(shapes, ranges)]
    return data


# ---- a case's folder besides its IR ----------------------------------------------
CALIB_SAMPLES = 8

CFG = """\
# Op test {name}: {doc}.
# Written by tools/{writer}; run ./run.sh (or op_tests/run.sh for all).
[Common]
graph = {name}.txt
bin = {name}.bin
model_name = {name}
out_ir_name = {name}
output_dir = work
dataset = {dataset}
calibration_data = calib.{ext}
calibration_batch_size = {calib}
quantize_method_for_weight = per_tensor_symmetric_restricted_range
quantize_method_for_activation = per_tensor_symmetric_full_range
weight_bits = 8
activation_bits = 8
calibration_strategy_for_weight = extrema
calibration_strategy_for_activation = extrema
trigger_float_op = disable
device = cpu
"""

RUN_SH = """\
#!/bin/sh
# Op test {name}: quantize with npuopt, run npuopt-run on the quantized IR, and
# compare every tensor with npuopt's quantized forward (op_tests/run_one.sh).
exec sh "$(dirname "$0")/../run_one.sh" "$(dirname "$0")"
"""


def write_case_data(folder: str, case, rng, writer: str = "gen_op_tests.py") -> None:
    """calib.npy (calib.npz with several inputs), in0.npy, in1.npy, ..., opt.cfg (the
    case's settings over CFG) and run.sh of a case (`inputs`, `doc`, `cfg`, `data`,
    `calib_range`, `run_range` as in Case; the data in the inputs' `dtypes`) into its
    folder, named after it."""
    name = os.path.basename(folder)
    data = case.data or uniform_inputs
    calib = case.typed(data(rng, case.inputs, CALIB_SAMPLES, case.calib_range, False))
    run = data(rng, case.inputs, case.run_samples, case.run_range, True)
    run = [x.astype(np.float32) for x in run] if case.run_as_floats else case.typed(run)
    if len(case.inputs) == 1:
        np.save(os.path.join(folder, "calib.npy"), calib[0])
        dataset, ext = "NumpyDataset", "npy"
    else:
        np.savez(os.path.join(folder, "calib.npz"), *calib)
        dataset, ext = "NumpyMultiInputDataset", "npz"
    for i, x in enumerate(run):
        np.save(os.path.join(folder, f"in{i}.npy"), x)
    cfg = CFG.format(name=name, doc=case.doc, dataset=dataset, ext=ext, calib=CALIB_SAMPLES, writer=writer)
    for key, value in case.cfg.items():
        cfg = _set_field(cfg, key, value)
    with open(os.path.join(folder, "opt.cfg"), "w") as f:
        f.write(cfg)
    script = os.path.join(folder, "run.sh")
    with open(script, "w") as f:
        f.write(RUN_SH.format(name=name))
    os.chmod(script, 0o755)


def _set_field(cfg: str, key: str, value: str) -> str:
    lines = cfg.splitlines()
    for i, line in enumerate(lines):
        if line.split("=")[0].strip() == key:
            lines[i] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    return cfg + f"{key} = {value}\n"
