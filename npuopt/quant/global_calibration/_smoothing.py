"""What SmoothQuant and AWQ share: a layer X = f(...) whose output channels only
FullyConnected layers read (through Reshape, and Transpose that keeps the last axis
last) can divide its channel j by s_j > 0 while those layers multiply their weight
column j by s_j, and the float function stays. The two methods differ only in how
they choose s.

A producer is a norm layer (per-channel `weights` and `biases` on the last axis) or,
where given, a FullyConnected layer whose fused activation is positively homogeneous
(f(x / s) = f(x) / s: NONE, RELU, LEAKYRELU, PRELU), whose weight rows and biases are
divided instead."""
import copy
from typing import Dict, List, Tuple

import torch

from ...dtype import Dtype
from ...errors import ConfigError
from ...logger import OPT_INFO
from ...node import PyNode
from ...registry import OpType
from ...tensor import PyTensor
from .. import tensors as QT
from ..formats import by_channels
from ..settings import settings_of
from . import one_thread
from .equalization import HOMOGENEOUS

SAMPLE_ROWS = 4096  # rows of a producer's output on which a choice of s is measured (the first ones)
NORMS = (OpType.LayerNorm, OpType.RMSNorm, OpType.BatchNorm, OpType.GroupNorm, OpType.InstanceNorm)


def check_params(method: str, p: dict, share: str) -> None:
    """One-line stop for what both methods refuse: a share of the range (`share`) above 1."""
    if p[share] > 1:
        raise ConfigError(f"field 'global_calibration': {method}'s {share} must lie in [0, 1], got {p[share]:g}")


def pairs(ctx, producers, insert_norm_if_none: bool, gated=()) -> Tuple[Dict[str, List[object]], List[str]]:
    """smoothable(ctx, producers, gated), after, with insert_norm_if_none, an identity
    BatchNorm put before each FullyConnected layer in scope that no producer smooths
    (OPT's insert_norm_if_none; also before those whose producer is left alone)."""
    found, left = smoothable(ctx, producers, gated)
    if not insert_norm_if_none:
        return found, left
    paired = {fc.name for fcs in found.values() for fc in fcs}
    taken = {n.name for n in ctx.graph.nodes} | {t.name for t in ctx.graph.tensors}
    nodes, added = [], []
    for node in ctx.graph.nodes:
        if node.type == OpType.FullyConnected and node.name not in paired and ctx.in_scope(node) \
                and _reads_last_axis(node):
            bn = insert_norm(node, taken)
            found[bn.name] = [node]  # whatever the scope says of BatchNorm layers, as in OPT
            added.append(bn)
            nodes.append(bn)
        nodes.append(node)
    if added:
        ctx.graph.nodes = nodes
        ctx.graph.relink()
        OPT_INFO(f"insert_norm_if_none: a BatchNorm put before {len(added)} FullyConnected layers "
                 f"(e.g. '{added[0].name}')")
    return found, left


def _reads_last_axis(fc) -> bool:
    """Whether the FullyConnected layer's weight columns are its input's last axis."""
    x = fc.inputs[0]
    return bool(x.ir_shape) and fc.get_constant("weights").betensor.shape[-1] == x.ir_shape[-1]


def insert_norm(fc, taken: set):
    """A BatchNorm 'FC_pre_bn' (weights 1, biases 0 along the last axis: the identity)
    made the reader of the FullyConnected layer `fc`'s input and its writer, with fc's
    settings; its names added to `taken` (the graph's names)."""
    x = fc.inputs[0]
    name = f"{fc.name}_pre_bn"
    while name in taken or f"{name}_out" in taken:
        name += "_"
    taken.update((name, f"{name}_out"))
    ones = torch.ones(x.ir_shape[-1], dtype=torch.float32, device=fc.get_constant("weights").betensor.device)
    bn = PyNode(name, OpType.BatchNorm)
    bn.params["axis"] = len(x.ir_shape) - 1
    bn.constants["weights"] = PyTensor("weights", ones, Dtype.FP32, tuple(ones.shape))
    bn.constants["biases"] = PyTensor("biases", torch.zeros_like(ones), Dtype.FP32, tuple(ones.shape))
    bn.inputs, bn.outputs = [x], [PyTensor(f"{name}_out", dtype=x.dtype, ir_shape=x.ir_shape)]
    fc.inputs[0] = bn.outputs[0]
    bn.attrs["qsettings"] = copy.deepcopy(settings_of(fc))
    return bn


def smoothable(ctx, producers=NORMS, gated=()) -> Tuple[Dict[str, List[object]], List[str]]:
    """(producer name -> the FullyConnected layers that read its output, for the
    producers in scope whose output only such layers read (through last-axis-keeping
    reshapes, and through one gate: a Mul by another tensor, x_j / s_j * g_j = (x_j g_j) /
    s_j, a SiLU-gated MLP's up projection); the producers in scope that feed
    FullyConnected layers and something else too). Producers of the `gated` types count
    only through a gate. The layers of one producer all read its output before the gate,
    or all after it: their input's channel statistics are then one tensor's."""
    readers = {}
    for node in ctx.graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, []).append(node)
    outputs = {t.name for t in ctx.graph.output_tensors}
    found, left = {}, []
    for producer in ctx.graph.nodes:
        if producer.type not in producers + gated or "weights" not in producer.constants \
                or not ctx.in_scope(producer):
            continue
        channels = producer.outputs[0].ir_shape[-1]
        fcs, tensors, ok, sides = [], [(producer.outputs[0], False)], True, set()
        while tensors:
            t, gate_passed = tensors.pop()
            ok = ok and t.name not in outputs and bool(readers.get(t.name))
            for reader in readers.get(t.name, []):
                if reader.type == OpType.FullyConnected and reader.inputs[0] is t and ctx.in_scope(reader) \
                        and reader.get_constant("weights").betensor.shape[-1] == channels:
                    fcs.append(reader)
                    sides.add(gate_passed)
                elif _keeps_last_axis(reader, channels):
                    tensors.append((reader.outputs[0], gate_passed))
                elif not gate_passed and _gate(reader, t, channels):
                    tensors.append((reader.outputs[0], True))
                else:
                    ok = False
        ok = ok and len(sides) == 1 and (producer.type not in gated or producer.type in producers or sides == {True})
        if ok and fcs and _divisible(producer, channels):
            found[producer.name] = fcs
        elif fcs and producer.type in producers:
            left.append(producer.name)
    return found, left


def _gate(node, t, channels: int) -> bool:
    """Whether `node` multiplies tensor t (once) by another, channels kept on the last axis:
    dividing t's channel j by s_j divides the product's by s_j."""
    mul = node.type == OpType.Mul or (node.type == OpType.Eltwise and str(node.params.get("method", "")).upper() == "MUL"
                                      and str(node.params.get("with_activation", "NONE")).upper() in HOMOGENEOUS)
    return mul and len(node.inputs) == 2 and sum(x is t for x in node.inputs) == 1 \
        and node.outputs[0].ir_shape[-1] == channels == t.ir_shape[-1]


def _divisible(producer, channels: int) -> bool:
    """Whether dividing the producer's weights and biases along their first axis divides
    its output's last-axis channels."""
    if producer.type == OpType.FullyConnected:
        return str(producer.params.get("with_activation", "NONE")).upper() in HOMOGENEOUS \
            and producer.get_constant("weights").betensor.shape[0] == channels
    axis = producer.get_param("axis", -1) if producer.type == OpType.BatchNorm else -1
    rank = len(producer.outputs[0].ir_shape)
    return int(axis) % rank == rank - 1 and all(
        producer.constants[k].betensor.numel() == channels for k in ("weights", "biases") if k in producer.constants)


def _keeps_last_axis(node, channels: int) -> bool:
    if node.type == OpType.Reshape:
        return node.outputs[0].ir_shape[-1] == channels
    if node.type == OpType.Transpose:
        perm = list(node.get_param("perm"))
        return perm[-1] == len(perm) - 1
    return False


class ChannelStatistics:
    """Of the input of each producer's FullyConnected layers ({producer name: layers},
    as smoothable finds them) over the calibration set, per channel j of its last axis:
    max |X_j| and mean |X_j| (float64), and its first `rows` rows (float32 [rows,
    channels]; kept only where a method measures choices on them: a decoder's are
    a gigabyte)."""

    def __init__(self, ctx, found: Dict[str, List[object]], desc: str, rows: int = SAMPLE_ROWS):
        nodes = {fcs[0].inputs[0].name: name for name, fcs in found.items()}
        self.maxima, self.means, self.rows = {}, {}, {}
        sums, counts = {}, {}

        def gather(node):
            for t in node.outputs:
                if t.name in nodes:
                    name, x = nodes[t.name], t.betensor.detach().reshape(-1, t.betensor.shape[-1]).float().cpu()
                    m = x.abs().amax(0).double()
                    self.maxima[name] = torch.maximum(self.maxima.get(name, m), m)
                    sums[name] = sums.get(name, 0.0) + x.abs().double().sum(0)
                    counts[name] = counts.get(name, 0) + x.shape[0]
                    kept = self.rows.get(name, x[:0])
                    self.rows[name] = torch.cat([kept, x[:rows - len(kept)]])

        with torch.no_grad(), one_thread():
            for batch in ctx.progress(ctx.batches(), desc, unit="batch"):
                ctx.graph.forward([x.to(ctx.device) for x in batch], after_node=gather)
        self.means = {name: sums[name] / counts[name] for name in sums}


def usable(s: torch.Tensor) -> torch.Tensor:
    """s with 1 where it is not a positive finite number."""
    return torch.where(torch.isfinite(s) & (s > 0), s, torch.ones_like(s))


def quantized_error(producer, fcs, x: torch.Tensor, s: torch.Tensor) -> float:
    """Squared error of the FullyConnected outputs on rows x when X / s and W s are
    rounded to their grids (the producer's activation settings over the rows' range;
    each layer's weight settings and planned range), against the float outputs."""
    xs = x.double() / s
    xq = QT.on_activation_grid(producer, xs, float(xs.min()), float(xs.max())).double()
    error = 0.0
    with one_thread():  # the choice must not follow the last bits of a threaded sum
        for fc in fcs:
            c = fc.get_constant("weights")
            w = c.betensor.detach().double().cpu()
            kept, c.betensor = c.betensor, (w * s).to(c.betensor.dtype)
            try:
                grid = QT.weight_grid(fc, "weights")
                wq = grid.dequantize(grid.quantize(c.betensor.detach().float().cpu())).double()
            finally:
                c.betensor = kept
            error += float(((xq @ wq.T - x.double() @ w.T) ** 2).sum())
    return error


def smooth(producer, fcs, s: torch.Tensor) -> None:
    """Divide the producer's channel j by s_j and multiply the FullyConnected columns j by it."""
    for key in ("weights", "biases"):
        if key in producer.constants:
            c = producer.constants[key]
            along = s.reshape([-1] + [1] * (c.betensor.dim() - 1)).to(c.betensor.device)
            c.betensor = (c.betensor.double() / along).to(c.betensor.dtype)
    for fc in fcs:
        c = fc.get_constant("weights")
        w, along = c.betensor, s.to(c.betensor.device)
        # in float64 a few rows at a time: a decoder's head in float64 is 226 MB (SmolLM2-135M)
        c.betensor = by_channels(lambda rows, _scale, _zp: (rows.double() * along).to(w.dtype), w, None, None, 0)
