"""The mixed-precision quantized graph: which layers stay in float, the
Quantize/DeQuantize layers at their boundaries, and each layer's quantize."""
import contextlib
import copy
from collections import deque
from typing import Dict, Optional, Set

import torch

from ..dtype import Dtype
from ..logger import OPT_INFO, OPT_WARN
from ..memory import give_back_freed_memory
from ..node import PyNode
from ..registry import BOUNDARY_TYPES, OP_QUANTIZERS, OpType
from ..tensor import PyTensor
from .settings import QuantSettings
from .tensors import (QUANTIZATION_FIELDS, WEIGHT_ONLY_TYPES, Unsupported, quantize_weights, quantize_weights_only,
                      set_quantization, store_in_float)
from .weight_plans import held_values, use_planned_biases


def stays_float(node, settings: Dict[str, QuantSettings]) -> bool:
    """Whether a layer is kept in float: asked for (trigger_float_op), or of a type with no quantize function."""
    return bool(settings[node.name].trigger_float_op) or OP_QUANTIZERS.get(node.type) is None


def weight_operands(graph, settings: Dict[str, QuantSettings]) -> Dict[str, str]:
    """The Constant layers that hold a weight-only MatMul's weights, {Constant: MatMul}: float,
    read by that MatMul alone, and laid out as per-channel and per-block grids need (2-D,
    output channels first: the A operand, or the B operand with trans_b, as FullyConnected's
    [O, I]; a per-tensor grid takes any layout). They take the MatMul's grid and float mode.
    (The parser turns a MatMul whose B operand is a 2-D constant into FullyConnected, so the
    A operand and constants of more axes are what reach here.)"""
    return {src.name: node.name for src, node, fits in _constant_operands(graph, settings) if fits}


def _constant_operands(graph, settings):
    """(Constant, weight-only MatMul, whether its layout fits the MatMul's grid) of every
    float Constant that a weight-only MatMul alone reads."""
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    outputs = {t.name for t in graph.output_tensors}
    for node in graph.nodes:
        st = settings[node.name]
        if node.type != OpType.MatMul or not st.weight_only:
            continue
        for port, t in enumerate(node.inputs[:2]):
            src = producer.get(t.name)
            if src is None or src.type != OpType.Constant or t.name in outputs or \
                    [n.name for n in graph.successors(src)] != [node.name] or \
                    not src.get_constant("weights").betensor.is_floating_point():
                continue
            trans = bool(node.get_param("trans_b" if port else "trans_a", False))
            method = st.quantize_method_for_weight
            channels_first = src.get_constant("weights").betensor.dim() == 2 and trans == bool(port)
            yield src, node, channels_first or not (method.per_channel or method.per_block)


def float_layers(graph, settings: Dict[str, QuantSettings]) -> Set[str]:
    """The layers kept in float (stays_float), said where a type has no quantize function;
    a weight-only MatMul's constant operand (weight_operands) among them."""
    operands = set()
    for src, node, fits in _constant_operands(graph, settings):
        if fits:
            operands.add(src.name)
        else:
            OPT_INFO(f"layer '{src.name}': the constant operand of weight-only MatMul '{node.name}' stays float: "
                     f"{settings[node.name].quantize_method_for_weight} weights need it 2-D with the output "
                     f"channels first (A, or B with trans_b)")
    out, weighted = set(operands), set()
    for node in graph.nodes:
        if settings[node.name].trigger_float_op:
            out.add(node.name)
            if settings[node.name].weight_only and node.type not in WEIGHT_ONLY_TYPES + (OpType.Constant,) and \
                    "weights" in node.constants:
                weighted.add(node.type)
        elif OP_QUANTIZERS.get(node.type) is None:
            OPT_WARN(f"layer '{node.name}': layer type '{node.type}' has no quantize function; "
                     f"it stays in float (mixed precision)")
            out.add(node.name)
    if weighted:
        OPT_INFO(f"weight-only quantization: the weights of {', '.join(sorted(weighted))} layers stay float "
                 f"(it applies to {', '.join(WEIGHT_ONLY_TYPES)} and MatMul's constant operands)")
    return out


def build_quantized_graph(float_graph, settings: Dict[str, QuantSettings], keep_float: Set[str]):
    """A quantized copy of `float_graph`; layers in `keep_float` (and layers that
    turn out Unsupported) stay in float behind DeQuantize/Quantize layers.

    A layer found Unsupported is made float alone (`_keep_in_float`): the layers
    before it stay as quantized, the ones after it are quantized seeing it float.
    Only when its quantize function changed its inputs' quantization (which the
    layers before it were quantized with) does the build start again on a copy."""
    keep_float = set(keep_float)
    graph = copy.deepcopy(float_graph, kept_tensors(float_graph.nodes))
    _insert_boundaries(graph, keep_float, settings)
    operands = weight_operands(graph, settings)
    done: Set[str] = set()
    pending = deque(graph.nodes)
    while pending:
        node = pending.popleft()
        done.add(node.name)
        if node.type == OpType.DeQuantize:
            continue
        node.attrs["qsettings"] = settings.get(node.name) or settings[node.attrs["boundary_of"]]
        use_planned_biases(node)
        if node.name in keep_float:
            if node.name in operands:  # a weight-only MatMul's weights: its grid, its float mode
                node.attrs["qsettings"] = settings[operands[node.name]]
                quantize_weights(node, "weights", axis=0)
            else:
                quantize_weights_only(node)
            store_in_float(node)
            keep_subgraphs_in_float(node)
            if node.constants:
                give_back_freed_memory()
            continue
        inputs_before = [_quantization(t) for t in node.inputs]
        try:
            node.quantize()
            node.quantized = True
            if node.constants:  # its weights' temporaries are freed
                give_back_freed_memory()
        except Unsupported as e:
            OPT_WARN(f"{e}; kept in float (mixed precision)")
            keep_float.add(node.name)
            float_node = float_graph.node(node.name)
            if float_node is None or inputs_before != [_quantization(t) for t in node.inputs]:
                return build_quantized_graph(float_graph, settings, keep_float)
            _keep_in_float(graph, node, float_node, keep_float, settings)
            pending = deque(n for n in graph.nodes if n.name not in done)
    mark_unquantifiable(graph)
    return graph, keep_float


def keep_subgraphs_in_float(node) -> None:
    """The subgraphs a control-flow layer kept in float runs (nested ones too), as the tool
    chain keeps them: every layer in float with the layer's settings (its float mode), its
    integer tops (conditions, counters) their own values (scale 1, zero point 0)."""
    for sg in node.subgraphs.values():
        for inner in sg.nodes:
            inner.attrs["qsettings"] = node.attrs["qsettings"]
            inner.quantized = False
            inner.params["unquantifiable"] = True
            quantize_weights_only(inner)
            store_in_float(inner)
            for t in inner.outputs:
                if t.dtype.is_integer:
                    set_quantization(t, 1.0, 0, t.dtype.qmin, t.dtype.qmax, t.dtype.bits, t.dtype.is_signed)
                    t.qinvariant = True
            keep_subgraphs_in_float(inner)


def warn_float16_ranges(qgraph, float_graph) -> None:
    """One warning naming the float16 tensors of `qgraph` whose calibrated values float16
    cannot hold: below its smallest normal (fewer bits; 0 below 6e-8, as on the parser's
    random-weight mobilenet_v2, whose deep activations are about 1e-11: every float16 or
    fp8-with-float16-conversions run of it output zeros) or above its largest (clamped)."""
    tiny, huge = float(torch.finfo(torch.float16).tiny), float(torch.finfo(torch.float16).max)
    calibrated = {t.name: t for t in float_graph.tensors if t.statistics is not None}
    found = {}
    for node in qgraph.nodes:
        for t in node.outputs:
            source = node.inputs[0].name if node.type == OpType.DeQuantize else t.name
            if t.dtype != Dtype.FP16 or source not in calibrated or source in found:
                continue
            ft = calibrated[source]
            if ft.extrema_min is None:  # no value counted (an attention mask's only)
                continue
            largest = max(abs(float(ft.extrema_min)), abs(float(ft.extrema_max)))
            if 0 < largest < tiny or largest > huge:
                found[source] = largest
    if found:
        shown = ", ".join(f"'{name}' ({v:.3g})" for name, v in list(found.items())[:3])
        least = min(found, key=found.get)
        OPT_WARN(f"{len(found)} float16 tensor(s) hold values float16 cannot: largest magnitude below its smallest "
                 f"normal {tiny:.3g} (precision lost, 0 below 6e-8) or above {huge:g} (clamped): {shown}"
                 f"{f' ... (least: {found[least]:.3g} in {least!r})' if len(found) > 3 else ''}; bfloat16 "
                 f"(bfloat16_* modes) keeps float32's range")


def requantize(qgraph, float_graph, settings: Dict[str, QuantSettings], changed: Set[str]) -> Optional[Set[str]]:
    """Quantize again, inside `qgraph` (built by build_quantized_graph from `float_graph`),
    the layers named in `changed` (their settings or plan changed) and the layers after
    them whose inputs' quantization that changes; the others stay as they are. Returns
    the layers quantized again, or None where the change reaches what one layer alone
    cannot redo (a float layer or a boundary, a layer that turns out Unsupported or that
    changes its inputs' quantization): then build the whole graph again."""
    dirty, redone = set(changed), set()
    for index, node in enumerate(list(qgraph.nodes)):
        if node.name not in dirty:
            continue
        float_node = float_graph.node(node.name)
        if float_node is None or not (node.quantized or settings[node.name].weight_only):
            return None
        inputs = [_quantization(t) for t in node.inputs]
        fresh = copy.deepcopy(float_node, {**kept_tensors([float_node]),
                                           **{id(f): q for f, q in zip(float_node.inputs, node.inputs)},
                                           # not the value a float forward left on its outputs (a head's logits)
                                           **{id(t.betensor): torch.zeros(()) for t in float_node.outputs}})
        fresh.attrs["qsettings"] = settings[node.name]
        use_planned_biases(fresh)
        if node.quantized:
            try:
                fresh.quantize()
            except Unsupported:
                return None
            if inputs != [_quantization(t) for t in node.inputs]:
                return None
        elif quantize_weights_only(fresh):  # kept in float: only its weights are quantized again
            store_in_float(fresh)
        else:
            return None
        fresh.quantized = node.quantized
        fresh.params["unquantifiable"] = not node.quantized
        qgraph.nodes[index] = fresh
        qgraph.replace_tensors({t.name: t for t in fresh.outputs})
        redone.add(node.name)
        if [_quantization(t) for t in fresh.outputs] != [_quantization(t) for t in node.outputs]:
            dirty.update(n.name for n in qgraph.successors(node))
    return redone


def kept_tensors(float_nodes) -> dict:
    """A deepcopy memo under which a quantized copy of `float_nodes` holds their constants'
    tensors (and planned roundings) themselves, not copies: npuopt's quantize functions
    give a constant a new tensor and never write into the one it had (test_memory checks
    it on every op test), so the float weights are held once and the quantized graph adds
    only what quantization changed. A plugin's quantize function may write into them: its
    layer's constants are copied."""
    memo = {}
    for node in float_nodes:
        reg = OP_QUANTIZERS.best(node.type)
        if reg is not None and not reg.builtin:
            continue
        tensors = [c.betensor for c in node.constants.values()]
        tensors += held_values(node, "planned_integers")
        tensors += [c.source_grid.integers for c in node.constants.values() if c.source_grid is not None]
        memo.update((id(t), t) for t in tensors)
    return memo


def _quantization(t: PyTensor) -> tuple:
    """t's quantization, to tell whether a quantize function changed it."""
    values = (getattr(t, key) for key in QUANTIZATION_FIELDS)
    return tuple(v.tolist() if isinstance(v, torch.Tensor) else v for v in values)


def _keep_in_float(graph, node, float_node, keep_float: Set[str], settings) -> None:
    """Put the float layer back in place of `node`, whose quantize gave up part way
    (its constants, params and outputs may be half quantized), and set the boundaries
    around it: the Quantize layers it read through and the DeQuantize layers that read
    it are no longer needed, new ones go where it meets quantized layers."""
    keep = {id(t): q for t, q in zip(float_node.inputs, node.inputs)}  # shared with the layers before it
    fresh = copy.deepcopy(float_node, {**kept_tensors([float_node]), **keep})
    graph.nodes[graph.nodes.index(node)] = fresh
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    fresh.inputs = [producer[t.name].inputs[0] if producer[t.name].type == OpType.Quantize else t
                    for t in fresh.inputs]
    own = {t.name: t for t in fresh.outputs}
    bypass = {n.outputs[0].name: own[n.inputs[0].name] for n in graph.nodes
              if n.type == OpType.DeQuantize and n.inputs[0].name in own}
    for n in graph.nodes:
        n.inputs = [bypass.get(t.name, t) for t in n.inputs]
    read = {t.name for n in graph.nodes for t in n.inputs} | {t.name for t in graph.output_tensors}
    graph.nodes = [n for n in graph.nodes if n.type not in BOUNDARY_TYPES or n.outputs[0].name in read]
    graph.relink()
    _insert_boundaries(graph, keep_float, settings)


def mark_unquantifiable(graph) -> None:
    """`unquantifiable` on every layer, as the tool chain writes it: true for layers kept
    in float and for the Quantize/DeQuantize layers at their boundaries."""
    for node in graph.nodes:
        node.params["unquantifiable"] = (not node.quantized) or node.type in BOUNDARY_TYPES


def _insert_boundaries(graph, keep_float: Set[str], settings) -> None:
    """A DeQuantize layer where a float layer reads a quantized tensor, a Quantize
    layer where a quantized layer reads a float one (boundary layers already in
    place count as float on their float side), each right before its first reader: the
    other layers keep the float graph's order, in which global calibration walks both."""
    made: Dict[tuple, PyTensor] = {}
    new_nodes = []

    def boundary(kind, t: PyTensor, reader, float_dtype) -> PyTensor:
        key = _conversion_key(kind, t.name, float_dtype, settings[reader.name])
        if key not in made:
            name = f"{t.name}_{'dequantize' if kind == OpType.DeQuantize else 'quantize'}"
            b = PyNode(_unique(graph, name, taken={n.name for n in new_nodes}), kind)
            nt = PyTensor(b.name, t.betensor, float_dtype or t.dtype, t.ir_shape)
            nt.statistics = t.statistics
            nt.source_grid = t.source_grid if kind == OpType.Quantize else None  # a pre-quantized source's grid
            b.inputs, b.outputs = [t], [nt]
            b.attrs["boundary_of"] = reader.name
            settings[b.name] = settings[reader.name]
            made[key] = nt
            new_nodes.append(b)
        return made[key]

    for node, i, conversions in list(_boundaries(graph, keep_float, settings)):
        t = node.inputs[i]
        for kind, float_dtype in conversions:
            t = boundary(kind, t, node, float_dtype)
        node.inputs[i] = t
    if new_nodes:
        before: Dict[str, list] = {}
        for b in new_nodes:
            before.setdefault(b.attrs["boundary_of"], []).append(b)
        graph.nodes[:] = [x for n in graph.nodes for x in before.get(n.name, []) + [n]]
        graph.relink()


def count_boundaries(graph, keep_float: Set[str], settings) -> int:
    """How many Quantize/DeQuantize layers the quantized graph of these settings gets (a
    search weighs them without building the graph; a layer whose quantize function turns
    out Unsupported while building adds its own)."""
    made = set()
    for node, i, conversions in _boundaries(graph, keep_float, settings):
        key = node.inputs[i].name
        for kind, float_dtype in conversions:
            key = _conversion_key(kind, key, float_dtype, settings[node.name])
            made.add(key)
    return len(made)


def _conversion_key(kind, tensor, float_dtype, reader_settings) -> tuple:
    """What makes two conversions of a tensor the same layer: a DeQuantize's float dtype,
    a Quantize's format (its reader's activation type)."""
    return kind, tensor, float_dtype, reader_settings.activation_type if kind == OpType.Quantize else None


def _boundaries(graph, keep_float: Set[str], settings):
    """(reader, input index, the conversions it reads its input through, as (layer type,
    float dtype of a DeQuantize) in order) of every boundary of the settings."""
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    for node in graph.nodes:
        # a Quantize reads floats, a DeQuantize integers (a pre-quantized source's, kept float, too)
        is_float = node.name in keep_float and node.type != OpType.DeQuantize or node.type == OpType.Quantize
        for i, t in enumerate(node.inputs):
            src = producer[t.name]
            if t.qinvariant:
                continue
            if (src.name in keep_float or src.type == OpType.DeQuantize) != is_float:
                # a DeQuantize gives the float dtype its reader computes in (float16, bfloat16)
                float_dtype = settings[node.name].float_dtype if node.name in keep_float else Dtype.FP32
                yield node, i, [(OpType.DeQuantize, float_dtype) if is_float else (OpType.Quantize, None)]
            elif not is_float and _in_fp8(src, settings) != _in_fp8(node, settings):
                # between fp8 and integer layers: to float16 and into the reader's format, as the
                # tool chain converts (its library has no cast between the two)
                yield node, i, [(OpType.DeQuantize, Dtype.FP16), (OpType.Quantize, None)]


def _in_fp8(node, settings) -> bool:
    """Whether `node` (a layer, or a Quantize into one) computes in an fp8 format."""
    st = settings.get(node.name)
    return bool(st is not None and st.fp8_activations)


def _unique(graph, name: str, taken=frozenset()) -> str:
    names = {n.name for n in graph.nodes} | {t.name for t in graph.tensors} | set(taken)
    out, i = name, 1
    while out in names:
        out, i = f"{name}_{i}", i + 1
    return out


@contextlib.contextmanager
def quantized_graph_edits(graph, cfg):
    """What the cfg changes in the quantized graph only, made on the float graph while
    the quantized copy is built, then undone (the float graph's metrics stay as they were):
    set_qinvariant_for_start_nodes: those Input/Constant layers' float values are taken
    as integers (int32, scale 1, zero point 0), as for index inputs;
    resize_degrade_to_nearest: Resize/Interp layers use the nearest method."""
    undo = []
    wanted = set(cfg.set_qinvariant_for_start_nodes or [])
    degraded = []
    for node in graph.nodes:
        if node.type in ("Input", "Constant") and node.layer_id in wanted:
            wanted.discard(node.layer_id)
            for t in node.outputs:
                if t.dtype.is_float:
                    undo.append((t, t.dtype, t.qinvariant))
                    t.dtype, t.qinvariant = Dtype.INT32, True
        if node.type in ("Resize", "Interp") and cfg.of("resize_degrade_to_nearest", node) \
                and str(node.params.get("method", "")).upper() != "NEAREST":
            degraded.append((node, node.params.get("method")))
            node.params["method"] = "NEAREST"
    if wanted:
        OPT_WARN(f"set_qinvariant_for_start_nodes: layer id(s) {sorted(wanted)} are no Input/Constant layer")
    if degraded:
        OPT_INFO(f"resize_degrade_to_nearest: {len(degraded)} layer(s) resize with NEAREST in the quantized "
                 f"graph: {', '.join(n.name for n, _ in degraded[:5])}")
    try:
        yield
    finally:
        for t, dtype, qinvariant in undo:
            t.dtype, t.qinvariant = dtype, qinvariant
        for node, method in degraded:
            node.params["method"] = method
