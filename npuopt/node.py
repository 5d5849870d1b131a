"""PyNode: one layer of the graph."""
import contextlib
from collections import OrderedDict
from typing import Dict, List

import torch

from .config import FIELDS, default_of
from .dtype import Dtype, fit_float
from .errors import GraphError, IRError
from .quant.fields import positive_shifts
from .quant.settings import COMPASS_CFG_ATTRS, settings_of
from .quant.statistics import Statistics
from .registry import OP_FORWARDS, OP_QUANTIZERS, plugin_code
from .tensor import PyTensor, opt_form

_MISSING = object()
_OBSERVING = [True]
_IN_FLOAT64 = [False]
_IN_FLOAT32 = [False]
# float layers that keep their float32 arithmetic in float64 mode: the boundary's
# conversions are defined in float32 (docs/integer-semantics.md)
FLOAT32_BOUNDARY = ("Quantize", "DeQuantize")


@contextlib.contextmanager
def observing_placeholders(on: bool):
    """Whether float forwards gather their placeholders' statistics (fine-tuning's
    forwards must not move what calibration measured)."""
    was, _OBSERVING[0] = _OBSERVING[0], on
    try:
        yield
    finally:
        _OBSERVING[0] = was


@contextlib.contextmanager
def float_layers_in_float64(on: bool):
    """Whether the layers kept in float compute in float64 (a quantized or float16 graph's:
    Graph.forward): their tops, rounded to float32 and then to their type, then do not
    depend on the order of float sums, and npuopt-run computes them bit for bit
    (docs/integer-semantics.md, "Float layers")."""
    was, _IN_FLOAT64[0] = _IN_FLOAT64[0], on
    try:
        yield
    finally:
        _IN_FLOAT64[0] = was


@contextlib.contextmanager
def tops_in_float32(on: bool):
    """Whether float layers keep their float16/bfloat16 tops in float32, not rounded to their
    type: the layers of a subgraph, which the tool chain's forward runs without fitting
    tensors to their dtypes (the layer that runs it rounds its own tops)."""
    was, _IN_FLOAT32[0] = _IN_FLOAT32[0], on
    try:
        yield
    finally:
        _IN_FLOAT32[0] = was


def float_layers_wide() -> bool:
    """Whether the forward running now computes its float layers in float64 (a subgraph
    runs as the graph that runs it does)."""
    return _IN_FLOAT64[0]

# attrs the Compass Optimizer's framework sets on every layer, derived here from what
# npuopt knows: the layer's effective settings (cfg + opt_config, with the cfg fields
# OPT copies onto every layer: quant/settings.py COMPASS_CFG_ATTRS) and its tensors
SETTING_OF_ATTR = {
    "q_bits_activation": "activation_bits", "q_bits_weight": "weight_bits", "q_bits_bias": "bias_bits",
    "q_mode_activation": "quantize_method_for_activation", "q_mode_weight": "quantize_method_for_weight",
    "q_strategy_activation": "calibration_strategy_for_activation",
    "q_strategy_weight": "calibration_strategy_for_weight", "lut_items_in_bits": "lut_items_in_bits",
    "multiplier_bits": "multiplier_bits", "histc_bins": "histc_bins", "trigger_float_op": "trigger_float_op",
    "unify_shifts_for_aiff": "unify_shifts_for_aiff", "weight_block_size": "weight_block_size",
}
_DERIVED = set(SETTING_OF_ATTR) | set(COMPASS_CFG_ATTRS) | {
    "layer_id", "current_batch_size", "batch_size_in_IR", "layer_top_type_original", "q_mode_bias",
    "q_strategy_bias", "bias_effective_bits", "debug_fake_quantize"}
# attrs OPT sets only where the cfg gives a value, and on these layer types only
_WHEN_SET = {"remain_shift": {"Convolution", "Convolution3D", "ConvTranspose", "ConvTranspose3D", "DepthwiseConv",
                              "FullyConnected", "MatMul", "GRUv3"}}


class NodeAttrs(dict):
    """A layer's attrs: what was set, else the Compass Optimizer's standard keys derived
    from the layer (q_bits_*/q_mode_*/q_strategy_* and lut_items_in_bits from its
    settings, layer_id, current_batch_size, batch_size_in_IR)."""

    def __init__(self, node: "PyNode"):
        super().__init__()
        self._node = node

    def __missing__(self, key):
        if key not in _DERIVED or not self._set_here(key):
            raise KeyError(key)
        return self._node._derived_attr(key)

    def __contains__(self, key):
        return dict.__contains__(self, key) or (key in _DERIVED and self._set_here(key))

    def _set_here(self, key) -> bool:
        types = _WHEN_SET.get(key)
        return types is None or (self._node.type in types and self._node._derived_attr(key) not in ("", None))

    def get(self, key, default=None):
        return self[key] if key in self else default


def _inserted(tensors, t, idx: int) -> list:
    k = max(0, min(idx if idx >= 0 else len(tensors) + 1 + idx, len(tensors)))
    return list(tensors[:k]) + [t] + list(tensors[k:])


class PyNode:
    """A layer: its type, params (IR keys, in order), constants, and tensors.

    `inputs`/`outputs` are PyTensors shared with neighbouring layers;
    `attrs` holds internal state that is never serialized; `quantized` says
    whether `forward()` computes in integers; `subgraphs` holds the graphs a
    control-flow layer runs, by the param that names them (ir/sections.py).
    """

    def __init__(self, name: str, optype: str, layer_id=None):
        self.name = name
        self.type = optype
        self.layer_id = layer_id
        self.params: Dict[str, object] = OrderedDict()
        self.constants: Dict[str, PyTensor] = OrderedDict()
        self.inputs: List[PyTensor] = []
        self.outputs: List[PyTensor] = []
        self.attrs: Dict[str, object] = NodeAttrs(self)
        self.placeholders: List[PyTensor] = []
        self.quantized = False
        self.subgraphs: Dict[str, object] = OrderedDict()

    def get_param(self, key: str, default=_MISSING, *, optional: bool = False, default_value=None):
        """A param's value; a missing one is `default` (or `default_value` when
        `optional`, the Compass Optimizer's spelling), else an IRError naming the layer."""
        if key in self.params:
            return self.params[key]
        if optional:
            return default_value
        if default is _MISSING:
            raise IRError(f"layer '{self.name}' ({self.type}): missing parameter '{key}'")
        return default

    def get_sub_graph(self, key: str):
        """The subgraph that param `key` names (the Compass Optimizer's name); an IRError
        naming the layer and the param when the IR has no such section."""
        name = self.get_param(key)
        if key not in self.subgraphs:
            raise IRError(f"layer '{self.name}' ({self.type}): {key} '{name}' names no subgraph section of the IR")
        return self.subgraphs[key]

    def get_attrs(self, key: str, *, optional: bool = False, default_value=None):
        """An attr's value, as get_param reads params."""
        if key in self.attrs:
            return self.attrs[key]
        if optional:
            return default_value
        raise GraphError(f"layer '{self.name}' ({self.type}): missing attr '{key}'")

    def _derived_attr(self, key: str):
        if key == "layer_id":
            return str(self.layer_id) if self.layer_id is not None else "-1"
        if key in ("current_batch_size", "batch_size_in_IR"):
            for t in list(self.inputs) + list(self.outputs):
                shape = t.ir_shape if key == "batch_size_in_IR" else t.betensor.shape
                if len(shape):
                    return int(shape[0])
            return 1
        if key == "layer_top_type_original":
            return [t.ir_dtype.value for t in self.outputs]
        if key == "debug_fake_quantize":
            return False
        if key in ("q_mode_bias", "q_strategy_bias"):  # the weights' (biases follow them)
            return self.attrs[key.replace("bias", "weight")]
        st = settings_of(self)
        if key == "bias_effective_bits":
            value = self._cfg_value(st, "bias_effective_bits")
            return int(value) if value not in ("", None) else st.bias_bits
        if key in SETTING_OF_ATTR:
            return getattr(st, SETTING_OF_ATTR[key])
        return self._cfg_value(st, key)

    @staticmethod
    def _cfg_value(st, field: str):
        """A cfg field as this layer's settings carry it (the field's default for settings made without a cfg)."""
        return st.cfg_attrs[field] if field in st.cfg_attrs else default_of(field) if field in FIELDS else False

    # flags the Compass Optimizer keeps in attrs
    approximated = property(lambda self: bool(dict.get(self.attrs, "approximated", False)),
                            lambda self, v: self.attrs.__setitem__("approximated", v))
    force_dtype_int = property(lambda self: bool(self.attrs["force_dtype_int"]),
                               lambda self, v: self.attrs.__setitem__("force_dtype_int", v))
    force_shift_positive = property(lambda self: bool(self.attrs["force_shift_positive"]),
                                    lambda self, v: self.attrs.__setitem__("force_shift_positive", v))
    current_batch_size = property(lambda self: self.attrs["current_batch_size"],
                                  lambda self, v: self.attrs.__setitem__("current_batch_size", v))
    unquantifiable = property(lambda self: bool(self.params.get("unquantifiable", False)),
                              lambda self, v: self.params.__setitem__("unquantifiable", v))

    def add_input(self, t: PyTensor, idx: int = -1) -> None:
        """Insert `t` among the inputs (at `idx`, -1 for last; clamped), as the Compass
        Optimizer's PyNode does: OPT users' plugins build standalone layers with it."""
        self.inputs = _inserted(self.inputs, t, idx)

    def add_output(self, t: PyTensor, idx: int = -1) -> None:
        self.outputs = _inserted(self.outputs, t, idx)

    def replace_input_temporarily(self, idx: int, t: PyTensor) -> PyTensor:
        """Put `t` in place of input `idx` (clamped to the inputs); returns the old one."""
        k = max(0, min(idx if idx >= 0 else len(self.inputs) + idx, len(self.inputs) - 1))
        old, self.inputs = self.inputs[k], list(self.inputs[:k]) + [t] + list(self.inputs[k + 1:])
        return old

    def replace_output_temporarily(self, idx: int, t: PyTensor) -> PyTensor:
        k = max(0, min(idx if idx >= 0 else len(self.outputs) + idx, len(self.outputs) - 1))
        old, self.outputs = self.outputs[k], list(self.outputs[:k]) + [t] + list(self.outputs[k + 1:])
        return old

    def set_ir_field(self, key: str, value, dtype=None) -> None:
        """Store an IR field as the Compass Optimizer does: a tensor of several values as a
        constant (of `dtype`, else the narrowest integer type holding it), a one-value
        tensor or a number as a param (cast to int or float by `dtype`), anything else as
        a param unchanged."""
        if isinstance(value, torch.Tensor) and value.numel() > 1:
            if dtype is None:
                lo, hi = value.min().item(), value.max().item()
                dtype = Dtype.narrowest_holding(lo, hi, force_int=lo < 0)
            self.constants[key] = PyTensor(f"{self.name}_{key}", value.to(dtype.torch_dtype), dtype)
        elif isinstance(value, torch.Tensor) or (isinstance(value, (int, float)) and dtype is not None):
            v = value.item() if isinstance(value, torch.Tensor) else value
            self.params[key] = float(v) if dtype is not None and dtype.is_float else int(v)
        else:
            self.params[key] = value

    def get_ir_field(self, keys, default_value=None):
        """The first of `keys` (a name or a list) that the layer has: a constant's value,
        else a param; `default_value` when none is there."""
        for key in [keys] if isinstance(keys, str) else keys:
            if key in self.constants:
                return self.constants[key].betensor
            if key in self.params:
                return self.params[key]
        return default_value

    @property
    def holds_source_grids(self) -> bool:
        """Whether a top or constant holds a pre-quantized source's grid (ir/compat.py): decided data."""
        return any(t.source_grid is not None for t in [*self.outputs, *self.constants.values()])

    @property
    def parents(self) -> List["PyNode"]:
        """The layers that wrote this layer's inputs (known once they ran)."""
        out = []
        for t in self.inputs:
            if t.pnode is not None and t.pnode not in out:
                out.append(t.pnode)
        return out

    def get_ancestors(self):
        """(this layer and every layer upstream of it, ancestors first; how many of them
        have no parents; how many are Constant layers), as the Compass Optimizer returns them."""
        ancestors, seen, queue = [self], {self.name}, [self]
        roots = constants = 0
        while queue:
            node = queue.pop(0)
            roots += not node.parents
            constants += node.type == "Constant"
            for parent in node.parents:
                if parent.name not in seen:
                    seen.add(parent.name)
                    queue.append(parent)
                    ancestors.insert(0, parent)
        return ancestors, roots, constants

    def get_constant(self, key: str) -> PyTensor:
        if key not in self.constants:
            raise IRError(f"layer '{self.name}' ({self.type}): missing constant '{key}'")
        return self.constants[key]

    def forward(self, *args):
        wide = _IN_FLOAT64[0] and not self.quantized and self.type not in FLOAT32_BOUNDARY
        with self._weights_in_float(wide):
            out = self._call(OP_FORWARDS, "forward", args)
        if not self.quantized:
            for t in self.outputs:  # a float16/bfloat16 top holds values of its type
                if wide and t.betensor.dtype == torch.float64:
                    t.betensor = t.betensor.to(torch.float32)
                if t.dtype in (Dtype.FP16, Dtype.BFP16) and t.betensor.is_floating_point() and not _IN_FLOAT32[0]:
                    t.betensor = fit_float(t.betensor, t.dtype)
            if wide:
                out = self.outputs[0].betensor if isinstance(out, torch.Tensor) and len(self.outputs) == 1 \
                    else [t.betensor for t in self.outputs]
            if self.placeholders and _OBSERVING[0]:
                self._observe_placeholders()
        return out

    @contextlib.contextmanager
    def _weights_in_float(self, wide: bool):
        """A layer kept in float computes in float32, or in float64 where `wide`: integer
        weights (weight-only quantization) dequantized in float32, whatever its type,
        float16/bfloat16 constants (as an IR read back holds them) as their values, and,
        where `wide`, every float constant and input as float64 (exact there)."""
        kept, inputs = {}, []
        if not self.quantized:
            for key, c in self.constants.items():
                if key == "weights" and c.is_quantized:
                    kept[key] = c.betensor, c.dtype
                    c.betensor, c.dtype = c.dequantized(torch.float64 if wide else torch.float32), Dtype.FP32
                elif c.betensor.dtype in (torch.float16, torch.bfloat16):
                    kept[key] = c.betensor, c.dtype
                    c.betensor = c.betensor.to(torch.float32)
                if wide and c.betensor.is_floating_point():
                    kept.setdefault(key, (c.betensor, c.dtype))
                    c.betensor = c.betensor.to(torch.float64)
            if wide:
                inputs = [(t, t.betensor) for t in self.inputs if t.betensor.is_floating_point()]
                for t, value in inputs:
                    t.betensor = value.to(torch.float64)
        try:
            yield
        finally:
            for key, (value, dtype) in kept.items():
                self.constants[key].betensor, self.constants[key].dtype = value, dtype
            for t, value in reversed(inputs):
                if t not in self.outputs:
                    t.betensor = value

    def quantize(self, *args):
        with positive_shifts(self.force_shift_positive):
            return self._call(OP_QUANTIZERS, "quantize", args)

    def _call(self, registry, what: str, args):
        """The registered function of this layer type; a user's plugin sees the tensors in
        the Compass Optimizer's form (tensor.opt_form), npuopt's own functions in npuopt's."""
        reg = registry.best(self.type)
        if reg is None:
            raise GraphError(f"layer '{self.name}': no {what} function registered for layer type '{self.type}'")
        self._own_outputs()
        if reg.builtin:
            return reg.obj(self, *args)
        for c in self.constants.values():  # the Compass Optimizer's constants are per channel along axis 0
            if c.key_axis is None and c.betensor.dim():
                c.key_axis = 0
        with opt_form(True), plugin_code(reg, f"the {what} function of layer '{self.name}' ({self.type})"):
            return reg.obj(self, *args)

    def _own_outputs(self) -> None:
        for t in list(self.outputs) + list(self.placeholders):
            t.pnode = self

    def _observe_placeholders(self) -> None:
        """Placeholders (a layer's internal tensors) gather statistics on every float
        forward, so that a quantize function finds them calibrated like outputs."""
        for t in self.placeholders:
            if isinstance(t.betensor, torch.Tensor) and t.betensor.is_floating_point() and t.betensor.numel():
                if t.statistics is None:
                    t.statistics = Statistics(settings_of(self).histc_bins)
                t.statistics.update(t.betensor)

    def __repr__(self) -> str:
        return f"PyNode({self.name!r}, {self.type})"
