"""Sampling grids written by the parser: GridSample from torch.nn.functional.grid_sample
(opset 16), AffineGrid (ONNX opset 20) feeding a GridSample, Col2Im (ONNX opset 18, 2-D with
strides, dilations and pads, and 3-D; one model each: the parser joins two Col2Im outputs in
a Dummy layer)."""
import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

from op_cases.common import Case, uniform


class _GridSamples(torch.nn.Module):
    def forward(self, x, grid):
        return (F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False),
                F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True),
                F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=True))


class _TorchOnlyGridSamples(torch.nn.Module):
    """The modes the tool chain's forward substitutes (CUBIC -> BILINEAR, REFLECTION -> ZEROS)."""
    def forward(self, x, grid):
        return (F.grid_sample(x, grid, mode="bicubic", padding_mode="zeros", align_corners=False),
                F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=True),
                F.grid_sample(x, grid, mode="bicubic", padding_mode="reflection", align_corners=False))


def _grid_sample(rng, onnx_path, module=_GridSamples):
    torch.onnx.export(module().eval(), (torch.zeros(1, 3, 6, 7), torch.zeros(1, 4, 5, 2)), onnx_path,
                      opset_version=16, dynamo=False, input_names=["in0", "in1"])


def _torch_only(rng, onnx_path):
    _grid_sample(rng, onnx_path, _TorchOnlyGridSamples)


def _save(nodes, name, inputs, outputs, inits, opset, onnx_path):
    onnx.save(helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits),
                                opset_imports=[helper.make_opsetid("", opset)], ir_version=9), onnx_path)


def _affine_grid(rng, onnx_path):
    """theta [1, 2, 3] -> AffineGrid to [1, 3, 5, 6] (align_corners 0 and 1) -> GridSample of x."""
    theta = helper.make_tensor_value_info("in0", TensorProto.FLOAT, [1, 2, 3])
    x = helper.make_tensor_value_info("in1", TensorProto.FLOAT, [1, 3, 5, 6])
    size = helper.make_tensor("size", TensorProto.INT64, [4], [1, 3, 5, 6])
    nodes = [helper.make_node("AffineGrid", ["in0", "size"], ["grid"], align_corners=0),
             helper.make_node("AffineGrid", ["in0", "size"], ["grid_align"], align_corners=1),
             helper.make_node("GridSample", ["in1", "grid"], ["sampled"], mode="linear", padding_mode="zeros",
                              align_corners=0)]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
            (("grid", [1, 5, 6, 2]), ("grid_align", [1, 5, 6, 2]), ("sampled", [1, 3, 5, 6]))]
    _save(nodes, "affine_grid", [theta, x], outs, [size], 20, onnx_path)


def _theta(rng, shapes, n, value_range, run):
    """One sample (the tool chain's float AffineGrid sizes its output by the IR's batch)."""
    t = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]) + rng.uniform(-0.3, 0.3, (2, 3))
    return [t[None].astype(np.float32), uniform(rng, value_range, (1,) + shapes[1])]


def _col2im(rng, onnx_path):
    """Image 5 x 7, block 2 x 3, strides (1, 2), dilations (2, 1), pads (1, 0, 0, 1): 4 x 3
    blocks of 2 channels."""
    x = helper.make_tensor_value_info("in0", TensorProto.FLOAT, [1, 12, 12])
    inits = [helper.make_tensor("image", TensorProto.INT64, [2], [5, 7]),
             helper.make_tensor("block", TensorProto.INT64, [2], [2, 3])]
    node = helper.make_node("Col2Im", ["in0", "image", "block"], ["fold"], strides=[1, 2], dilations=[2, 1],
                            pads=[1, 0, 0, 1])
    _save([node], "col2im", [x], [helper.make_tensor_value_info("fold", TensorProto.FLOAT, [1, 2, 5, 7])], inits,
          18, onnx_path)


def _col2im_3d(rng, onnx_path):
    """Image 3 x 4 x 3, block 2 x 2 x 2, 2 channels (stride 1, no pads: the tool chain's N-D
    loop computes only those right)."""
    x = helper.make_tensor_value_info("in0", TensorProto.FLOAT, [1, 16, 12])
    inits = [helper.make_tensor("image", TensorProto.INT64, [3], [3, 4, 3]),
             helper.make_tensor("block", TensorProto.INT64, [3], [2, 2, 2])]
    node = helper.make_node("Col2Im", ["in0", "image", "block"], ["fold"])
    _save([node], "col2im_3d", [x], [helper.make_tensor_value_info("fold", TensorProto.FLOAT, [1, 2, 3, 4, 3])],
          inits, 18, onnx_path)


CASES = [
    Case("parser_grid_sample", "GridSample of torch's grid_sample: bilinear zeros, bilinear border with "
         "align_corners, nearest zeros", [(3, 6, 7), (4, 5, 2)], _grid_sample, calib_range=(-1.2, 1.2),
         run_range=(-1.2, 1.2)),
    Case("parser_grid_sample_cubic_reflection", "GridSample of torch's grid_sample: bicubic, reflection padding "
         "(kept in float)", [(3, 6, 7), (4, 5, 2)], _torch_only, calib_range=(-1.2, 1.2), run_range=(-1.2, 1.2)),
    Case("parser_affine_grid", "AffineGrid of ONNX AffineGrid (align_corners 0 and 1) feeding a GridSample",
         [(2, 3), (3, 5, 6)], _affine_grid, data=_theta),
    Case("parser_col2im", "Col2Im of ONNX Col2Im, 2-D with strides, dilations and pads", [(12, 12)], _col2im),
    Case("parser_col2im_3d", "Col2Im of ONNX Col2Im, 3-D", [(16, 12)], _col2im_3d),
]
