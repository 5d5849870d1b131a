"""A parser IR of a pre-quantized model (header compat_quantized_model=true: an ONNX
QDQ or QOperator model, ...) read as the float model it quantizes, with the source's
grids kept as decided data. The tool chain takes such a model without calibrating and
keeps the source's scales and zero points; here they become each tensor's and constant's
SourceGrid (npuopt/tensor.py), which the quantize functions take where they would choose a
grid (quant/tensors.py), and calibration has nothing to decide for them.

* An integer top with layer_top_scale/layer_top_zp (the source's convention, q = round(f /
  scale) + zp) becomes a float32 tensor of the float model with SourceGrid(1 / scale, -zp,
  its integer type) (the IR's convention, q = round(f * scale - zp)). A tensor an integer
  layer reads (ConvInteger, MatMulInteger) keeps its integers and takes that grid as its
  quantization: its producer, a Quantize (or an Input or Constant), gives them in float too.
* Integer weights and biases stated with <key>_scale/<key>_zp (params, or constants per
  channel) become their float values (q - zp) * scale, their grid and integers kept (the
  quantized layer stores the source's integers as they are).
* A Quantize's and a DeQuantize's quantize_scale/quantize_zp go: their tops say the same.
* Layers the source computes in float (every top float with no grid: the float input,
  what follows a DeQuantize) are marked attrs["source_float"]; they stay float."""
import math

import torch

from ..dtype import Dtype
from ..errors import IRError
from ..logger import OPT_INFO
from ..tensor import SourceGrid

INTEGER_LAYERS = ("ConvInteger", "MatMulInteger")  # they compute on their inputs' integers
BOUNDARY_KEYS = ("quantize_scale", "quantize_zp")
TOP_KEYS = ("layer_top_scale", "layer_top_zp", "layer_top_range")


def is_pre_quantized(graph) -> bool:
    """Whether the graph is a pre-quantized source's, read with its grids."""
    return graph.header.get("compat_quantized_model") is True and \
        any(t.source_grid is not None for t in graph.tensors)


def take_source_quantization(graph) -> None:
    """The graph of a compat_quantized_model=true IR as its float model and the source's
    grids (module docstring); nothing changes where the IR states no integer grid, nor in
    another IR."""
    if graph.header.get("compat_quantized_model") is not True:
        return
    readers = {}
    for node in graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, []).append(node)
    kept = set()
    for node in graph.nodes:
        fields = node.attrs.get("ir_top_fields", {})
        for i, t in enumerate(node.outputs):
            if t.dtype.is_integer and "layer_top_scale" in fields:
                grid = _top_grid(node, t, fields, i)
                if any(r.type in INTEGER_LAYERS for r in readers.get(t.name, [])):
                    _keep_integers(node, t, grid, readers[t.name])
                    kept.add(t.name)
                else:
                    _to_float(t, grid)
    if not any(t.source_grid is not None for t in graph.tensors):
        return
    for node in graph.nodes:
        for key in TOP_KEYS:  # the float model states no top grid: a layer left float writes none
            node.attrs.get("ir_top_fields", {}).pop(key, None)
        if node.type in ("Quantize", "DeQuantize"):
            for key in BOUNDARY_KEYS:
                node.params.pop(key, None)
                node.constants.pop(key, None)
        if not any(t.name in kept for t in node.outputs):
            for key in [k for k, c in node.constants.items() if c.dtype.is_integer and _stated(node, k)]:
                _constant_to_float(node, key)
        if all(t.dtype.is_float and t.source_grid is None for t in node.outputs):
            node.attrs["source_float"] = True


def _top_grid(node, t, fields: dict, i: int) -> SourceGrid:
    scale = fields["layer_top_scale"][i]
    zp = fields.get("layer_top_zp", [0] * len(node.outputs))[i]
    if not (math.isfinite(scale) and scale > 0):
        raise IRError(f"layer '{node.name}' ({node.type}): layer_top_scale {scale} of top '{t.name}' must be a "
                      f"positive number (compat_quantized_model=true: the source's scale)")
    if not t.dtype.qmin <= zp <= t.dtype.qmax:
        raise IRError(f"layer '{node.name}' ({node.type}): layer_top_zp {zp} of top '{t.name}' lies outside "
                      f"{t.dtype.value} [{t.dtype.qmin}, {t.dtype.qmax}] (compat_quantized_model=true)")
    return SourceGrid(_reciprocal(scale), -int(zp), t.dtype)


def _reciprocal(scale):
    """1 / scale in float32 (a number, or a float32 tensor)."""
    if isinstance(scale, torch.Tensor):
        return (1.0 / scale.to(torch.float64)).to(torch.float32)
    return float(torch.tensor(1.0 / float(scale), dtype=torch.float32))


def _keep_integers(node, t, grid: SourceGrid, readers) -> None:
    if node.type not in ("Quantize", "Input", "Constant"):
        raise IRError(f"layer '{node.name}' ({node.type}): its top '{t.name}' holds the source's integers for "
                      f"'{readers[0].name}' ({readers[0].type}); only a Quantize, Input or Constant gives them in "
                      f"the float model (compat_quantized_model=true)")
    if any(r.type not in INTEGER_LAYERS for r in readers):
        other = next(r for r in readers if r.type not in INTEGER_LAYERS)
        raise IRError(f"layer '{node.name}' ({node.type}): its top '{t.name}' is read as integers by an integer "
                      f"layer and as real values by '{other.name}' ({other.type}); not supported "
                      f"(compat_quantized_model=true)")
    t.scale, t.zerop, t.qbits, t.qmin, t.qmax = grid.scale, grid.zp, t.dtype.bits, t.dtype.qmin, t.dtype.qmax
    t.source_grid = grid


def _to_float(t, grid: SourceGrid) -> None:
    """A real-valued tensor of the float model, its range the grid's."""
    t.dtype, t.scale, t.zerop, t.qbits, t.qmin, t.qmax = Dtype.FP32, 1.0, 0, None, None, None
    t.ir_range = ((grid.dtype.qmin + grid.zp) / grid.scale, (grid.dtype.qmax + grid.zp) / grid.scale)
    t.source_grid = grid


def _stated(node, key: str) -> bool:
    return f"{key}_scale" in node.params or f"{key}_scale" in node.constants


def _stated_value(node, name: str, default):
    if name in node.constants:
        return node.constants.pop(name).betensor.reshape(-1)
    return torch.tensor([float(node.params.pop(name, default))])


def _constant_to_float(node, key: str) -> None:
    """Integer constant `key` with its stated scale and zero point as float values (q - zp) *
    scale, its grid and integers kept."""
    c = node.constants[key]
    scale = _stated_value(node, f"{key}_scale", 1.0).to(torch.float64)
    zp = _stated_value(node, f"{key}_zp", 0).to(torch.float64)
    channels = c.betensor.shape[0] if c.betensor.dim() else 1
    if any(v.numel() not in (1, channels) for v in (scale, zp)) or not bool(torch.isfinite(scale).all() and
                                                                              (scale > 0).all()):
        raise IRError(f"layer '{node.name}' ({node.type}): {key}_scale/{key}_zp ({scale.numel()}/{zp.numel()} "
                      f"values) must be positive scales, one or one per output channel ({channels}) "
                      f"(compat_quantized_model=true)")
    per_channel = scale.numel() > 1 or zp.numel() > 1
    shape = (-1,) + (1,) * (c.betensor.dim() - 1) if per_channel else ()
    q = c.betensor
    c.betensor = ((q.to(torch.float64) - zp.reshape(shape)) * scale.reshape(shape)).to(torch.float32)
    if per_channel:
        grid_scale = _reciprocal(scale.expand(channels).to(torch.float32))
        grid_zp = -zp.expand(channels).to(torch.int64)
    else:
        grid_scale, grid_zp = _reciprocal(float(scale)), -int(zp)
    c.source_grid = SourceGrid(grid_scale, grid_zp, c.dtype, q.clone())
    c.dtype = Dtype.FP32


def warn_other_grids(qgraph) -> None:
    """One line naming the tensors of a pre-quantized source whose quantized layer fixed a
    grid other than the source's (a layer type that decides its output's grid itself), or
    that a layer kept in float holds."""
    other = [t.name for n in qgraph.nodes for t in n.outputs if t.source_grid is not None and
             (t.dtype != t.source_grid.dtype or not n.quantized or
              (float(t.scale), int(t.zerop)) != (float(t.source_grid.scale), int(t.source_grid.zp)))]
    if other:
        OPT_INFO(f"compat_quantized_model: {len(other)} tensor(s) do not keep the source's grid (their layers "
                 f"decide their own, or stay float): {', '.join(other[:5])}{' ...' if len(other) > 5 else ''}")
