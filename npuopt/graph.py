"""PyGraph: the model, its layers in topological order, and its forward."""
import contextlib
import math
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Set

import networkx as nx
import torch

from . import dynamic_shapes
from .dtype import Dtype
from .errors import GraphError, NpuoptError
from .memory import give_back_if_grown
from .node import PyNode, float_layers_in_float64, float_layers_wide, tops_in_float32
from .registry import has_data_dependent_shapes
from .samples_together import SamplesTogether
from .tensor import PyTensor

WORKING_COPIES = 4  # 8-byte copies of a layer's largest tensor that a forward holds at once
LARGE_WEIGHTS = 256 << 20  # constants from which a forward gives freed memory back (SmolLM2-135M: 650 MB)


class PyGraph:
    """Layers plus a `networkx.DiGraph` of who feeds whom; `header` keeps the graph file's
    header keys (other than the ones this class owns) so that they are written back unchanged."""

    def __init__(self, name: str = "model"):
        self.name = name
        self.nodes: List[PyNode] = []
        self.input_tensors: List[PyTensor] = []
        self.output_tensors: List[PyTensor] = []
        self.header: Dict[str, object] = OrderedDict()
        self.topology = nx.DiGraph()
        self._tensors: Dict[str, PyTensor] = {}
        self._last_use: Dict[str, int] = {}
        # whether a batch keeps its samples apart (None: not checked yet; see keeps_samples_apart)
        self.samples_apart: Optional[bool] = None
        self.running: Optional[PyNode] = None  # the layer the last forward ran last (where one failed)
        self._data_dependent: Optional[Set[str]] = None  # see data_dependent_tensors
        self._weight_bytes: Optional[int] = None  # see holds_large_weights
        self.weights_released = False  # see memory.release_weights

    # ---- structure -------------------------------------------------------
    def set_layers(self, nodes: Sequence[PyNode], input_names: Sequence[str],
                   output_names: Sequence[str], where: str = "graph") -> None:
        """Link layers by tensor names, check the structure, sort topologically."""
        producers: Dict[str, PyNode] = {}
        tensors: Dict[str, PyTensor] = {}
        for node in nodes:
            for t in node.outputs:
                if t.name in producers:
                    raise GraphError(f"{where}: tensor '{t.name}' is written twice, by layers "
                                     f"'{producers[t.name].name}' and '{node.name}'")
                producers[t.name] = node
                tensors[t.name] = t
        topo = nx.DiGraph()
        for node in nodes:
            topo.add_node(node.name)
        order = {node.name: i for i, node in enumerate(nodes)}
        by_name = {}
        for node in nodes:
            if node.name in by_name:
                raise GraphError(f"{where}: two layers are named '{node.name}'")
            by_name[node.name] = node
            for i, t in enumerate(node.inputs):
                producer = producers.get(t.name)
                if producer is None:
                    raise GraphError(f"{where}: layer '{node.name}' reads tensor '{t.name}' that no layer writes")
                node.inputs[i] = tensors[t.name]
                topo.add_edge(producer.name, node.name)
        try:
            sorted_names = list(nx.lexicographical_topological_sort(topo, key=lambda n: order[n]))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(topo)
            path = " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
            raise GraphError(f"{where}: the graph has a cycle: {path}") from None
        for name in list(input_names) + list(output_names):
            if name not in tensors:
                raise GraphError(f"{where}: graph input/output tensor '{name}' is not written by any layer")
        self.nodes = [by_name[n] for n in sorted_names]
        self.topology = topo
        self._tensors = tensors
        self.input_tensors = [tensors[n] for n in input_names]
        self.output_tensors = [tensors[n] for n in output_names]
        self._last_use = {}
        for i, node in enumerate(self.nodes):
            for t in node.inputs:
                self._last_use[t.name] = i
        self._data_dependent = None

    def data_dependent_tensors(self) -> Set[str]:
        """The tensors whose shapes follow the data: the tops of the layers whose forward
        says so (registry.has_data_dependent_shapes: NonZero, Unique...) and every top
        computed from such a tensor. Their IR shapes are bounds (check_shape)."""
        if self._data_dependent is None:
            names: Set[str] = set()
            for node in self.nodes:  # in topological order
                if has_data_dependent_shapes(node.type) or any(t.name in names for t in node.inputs):
                    names.update(t.name for t in node.outputs)
            self._data_dependent = names
        return self._data_dependent

    @property
    def quantized(self) -> bool:
        """Whether this is a quantized (or mixed-precision) graph: some layer computes in
        integers, or holds integer weights (weight-only quantization)."""
        return any(node.quantized or any(c.is_quantized for c in node.constants.values()) for node in self.nodes)

    @property
    def computes_float_layers_in_float64(self) -> bool:
        """A quantized graph, or one with float16/bfloat16 tensors, computes its float layers
        in float64 (node.float_layers_in_float64); a float model stays in float32."""
        return self.quantized or any(t.dtype in (Dtype.FP16, Dtype.BFP16) for t in self._tensors.values())

    def tensor(self, name: str) -> PyTensor:
        return self._tensors[name]

    @property
    def tensors(self) -> List[PyTensor]:
        return [t for node in self.nodes for t in node.outputs]

    @property
    def subgraph_map(self) -> Dict[str, "PyGraph"]:
        """Every subgraph its layers run (If's branches, Loop's body), nested ones too, by
        name, in the order a walk of the layers first meets them: the IR's subgraph
        sections, in the order they are written (the Compass Optimizer's name)."""
        found: Dict[str, PyGraph] = OrderedDict()

        def walk(graph):
            for node in graph.nodes:
                for sg in node.subgraphs.values():
                    if sg.name not in found:
                        found[sg.name] = sg
                        walk(sg)
        walk(self)
        return found

    def node(self, name: str) -> Optional[PyNode]:
        return next((n for n in self.nodes if n.name == name), None)

    def successors(self, node: PyNode) -> List[PyNode]:
        names = set(self.topology.successors(node.name))
        return [n for n in self.nodes if n.name in names]

    def predecessors(self, node: PyNode) -> List[PyNode]:
        names = set(self.topology.predecessors(node.name))
        return [n for n in self.nodes if n.name in names]

    def relink(self) -> None:
        """Rebuild topology after a pass changed layers or their tensors."""
        self.set_layers(self.nodes, [t.name for t in self.input_tensors],
                        [t.name for t in self.output_tensors], where=self.name)

    def replace_tensors(self, new: Dict[str, PyTensor]) -> None:
        """Put tensors in place of those of the same names (a layer made again wrote them):
        every reader and the graph's inputs and outputs take the new ones; the structure
        is unchanged, so unlike relink nothing is sorted again."""
        for node in self.nodes:
            node.inputs = [new.get(t.name, t) for t in node.inputs]
        self._tensors.update((name, t) for name, t in new.items() if name in self._tensors)
        self.input_tensors = [new.get(t.name, t) for t in self.input_tensors]
        self.output_tensors = [new.get(t.name, t) for t in self.output_tensors]

    # ---- execution -------------------------------------------------------
    def to(self, device) -> "PyGraph":
        for node in self.nodes:
            for c in node.constants.values():
                c.betensor = c.betensor.to(device)
        return self

    def forward(self, inputs: Sequence[torch.Tensor], keep_tensors: bool = False,
                check_shapes: bool = True, after_node=None, whole_batch: bool = False) -> List[torch.Tensor]:
        """Run every layer; returns the output tensors' values.

        Intermediate values are released once their last reader ran, unless
        `keep_tensors` (for dumps and per-layer comparisons). `after_node(node)`
        is called after each layer ran (calibration gathers statistics there).
        A batch runs as one, unless the graph does not keep its samples apart
        (keeps_samples_apart): then one sample at a time, the outputs concatenated
        along the first axis (kept tensors: the last sample's). With `whole_batch` such
        a batch runs layer by layer instead, each layer on every sample before the next,
        and after_node sees the layer's tops and placeholders of the whole batch (the
        samples' values concatenated along the first axis), as if it had run as one:
        calibration's unit of statistics is the batch, however the graph runs it.
        """
        if self.weights_released:  # memory.release_weights
            raise GraphError(f"graph '{self.name}': its weights were released once it was quantized: it cannot run")
        batch = inputs[0].shape[0] if inputs and inputs[0].dim() else 1
        if batch > 1 and not self.keeps_samples_apart():
            samples = [[x[i:i + 1] if x.dim() and x.shape[0] == batch else x for x in inputs] for i in range(batch)]
            if whole_batch:
                return self._forward(samples[0], keep_tensors, check_shapes, after_node, samples=samples)
            runs = [[o.clone() for o in self._forward(sample, keep_tensors, check_shapes, after_node)]
                    for sample in samples]
            return [torch.cat(parts, dim=0) for parts in zip(*runs)]
        return self._forward(inputs, keep_tensors, check_shapes, after_node)

    def run_subgraph(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """Run this subgraph on the values its control-flow layer feeds it (the batch as
        it comes, float layers in float64 where its caller's are), its float16/bfloat16
        tops kept in float32 as the tool chain runs subgraphs (node.tops_in_float32);
        returns its output values."""
        with tops_in_float32(True):
            return list(self._forward(inputs, False, True, None, wide=float_layers_wide()))

    def samples_within(self, budget_bytes: int) -> int:
        """How many samples one forward may run within `budget_bytes` of working memory:
        a few 8-byte copies (int64 accumulators, float64 rescales) of the largest tensor
        at the IR's batch; a multiple of that batch."""
        ir_batch = max(int(self.input_tensors[0].ir_shape[0]), 1) if self.input_tensors and \
            self.input_tensors[0].ir_shape else 1
        largest = max((math.prod(int(d) for d in t.ir_shape) for t in self.tensors if t.ir_shape), default=1)
        return ir_batch * max(1, budget_bytes // (WORKING_COPIES * 8 * max(largest, 1)))

    def keeps_samples_apart(self) -> bool:
        """Whether each sample's outputs in a batch equal its outputs alone. Parser IRs
        hard-code batch 1 (Reshape shapes, a transposed layout folded into a Reshape) and
        some cannot run a batch faithfully; checked once, on two random samples. A graph
        with tensors whose shapes follow the data runs a batch as one, as the tool chain
        does: such a layer spans the batch (NonZero's indices name the sample, Unique's
        values are the batch's), and its tops of single samples do not add up to a batch."""
        if self.samples_apart is None:
            self.samples_apart = True  # while checking, batches run as one
            # only an IR of batch 1 (what the parser writes) can have fixed its batch in shapes
            if not self.data_dependent_tensors() and \
                    all(t.ir_shape and int(t.ir_shape[0]) == 1 for t in self.input_tensors):
                self.samples_apart = self._batch_matches_samples()
            if not self.samples_apart:
                from .logger import OPT_INFO
                OPT_INFO(f"graph '{self.name}' does not keep the samples of a batch apart (its IR fixes batch 1 "
                         f"in its shapes): batches run one sample at a time")
        return self.samples_apart

    def _batch_matches_samples(self) -> bool:
        gen = torch.Generator().manual_seed(0)
        inputs = []
        for t in self.input_tensors:
            shape = (2,) + tuple(int(d) for d in t.ir_shape[1:])
            # real-valued inputs (float, or quantized by the Input layer) get random samples;
            # unscaled integers (indices) zeros, which cannot tell batches apart but do no harm
            if t.dtype.torch_dtype.is_floating_point or not t.qinvariant:
                inputs.append(torch.randn(shape, generator=gen))
            else:
                inputs.append(torch.zeros(shape, dtype=t.dtype.torch_dtype))
        device = next((c.betensor.device for n in self.nodes for c in n.constants.values()), None)
        if device is not None:
            inputs = [x.to(device) for x in inputs]
        try:
            batched = [o.clone() for o in self._forward(inputs, False, True, None)]
        except (NpuoptError, RuntimeError):
            return False
        for i in range(2):
            alone = self._forward([x[i:i + 1] for x in inputs], False, True, None)
            for got, want in zip(batched, alone):
                if got.numel() == want.numel() and torch.equal(got, want):
                    continue  # a batch-free output, e.g. a Constant's
                if got.numel() != 2 * want.numel():
                    return False
                # mixed samples differ wholesale; float sums and integer rounding that depend
                # on the batch (a few LSB) stay far below 1% of the output's norm
                got, want = got.double().reshape(2, -1)[i], want.double().reshape(-1)
                if float((got - want).norm()) > 0.01 * float(want.norm()) + 1e-12:
                    return False
        return True

    def _forward(self, inputs: Sequence[torch.Tensor], keep_tensors: bool, check_shapes: bool,
                 after_node, wide: Optional[bool] = None, samples=None) -> List[torch.Tensor]:
        """The layers in order; float layers in float64 where `wide` (by default: where this
        graph computes them so, computes_float_layers_in_float64). A graph with dynamic
        symbols runs as the static IR of its inputs' lengths (dynamic_shapes.bound).
        `samples` (inputs the first of them): the samples of a batch, each layer run on
        every one before the next (samples_together)."""
        if len(inputs) != len(self.input_tensors):
            raise GraphError(f"graph '{self.name}' takes {len(self.input_tensors)} input(s) "
                             f"({', '.join(t.name for t in self.input_tensors)}), got {len(inputs)}")
        if not dynamic_shapes.names(self):
            return self._run_layers(inputs, keep_tensors, check_shapes, after_node, wide, samples)
        with dynamic_shapes.bound(self, dynamic_shapes.symbols_of(self, inputs)):
            return self._run_layers(inputs, keep_tensors, check_shapes, after_node, wide, samples)

    def holds_large_weights(self) -> bool:
        """Whether the constants hold LARGE_WEIGHTS or more (taken once): memory.give_back_if_grown."""
        if self._weight_bytes is None:
            self._weight_bytes = sum(c.betensor.numel() * c.betensor.element_size()
                                     for n in self.nodes for c in n.constants.values())
        return self._weight_bytes >= LARGE_WEIGHTS

    def _run_layers(self, inputs, keep_tensors, check_shapes, after_node, wide, samples) -> List[torch.Tensor]:
        for t, value in zip(self.input_tensors, inputs):
            if tuple(value.shape[1:]) != tuple(t.ir_shape[1:]):
                raise GraphError(f"input '{t.name}' has shape {list(value.shape)}, the IR says "
                                 f"{list(t.ir_shape)} (the first axis is the batch)")
            t.betensor = value
        # the batch: the first input with a batch axis (a Loop body's first inputs are scalars)
        batched = next(((t, v) for t, v in zip(self.input_tensors, inputs) if t.ir_shape and t.ir_shape[0]), None)
        self._batch_factor = batched[1].shape[0] / batched[0].ir_shape[0] if batched else 1
        outputs = {t.name for t in self.output_tensors}
        wide = self.computes_float_layers_in_float64 if wide is None else wide
        bounded = self.data_dependent_tensors() if check_shapes else set()
        together = SamplesTogether(self.input_tensors, samples) if samples else None
        large = self.holds_large_weights()
        with torch.no_grad(), float_layers_in_float64(wide):
            for i, node in enumerate(self.nodes):
                self.running = node
                for _ in together.each_sample(node) if together else [None]:
                    node.forward()
                    if check_shapes and together:
                        self._check_tops(node, bounded)
                if after_node is not None:
                    with together.whole_batch(node) if together else contextlib.nullcontext():
                        after_node(node)
                if check_shapes and not together:
                    self._check_tops(node, bounded)
                if not keep_tensors:
                    for t in node.inputs:
                        if self._last_use.get(t.name) == i and t.name not in outputs:
                            t.betensor = torch.zeros(())
                            if together:
                                together.release(t.name)
                if large:
                    give_back_if_grown()
        return together.outputs(self.output_tensors) if together else [t.betensor for t in self.output_tensors]

    def _check_tops(self, node: PyNode, bounded: Set[str]) -> None:
        for t in node.outputs:
            check_shape(node, t, self._batch_factor, t.name in bounded)

    def check_supported(self) -> None:
        """Every layer type has a forward; otherwise one error listing every missing type
        (with how many layers and the first of them), before anything runs. The built-in
        ops and the plugins are registered by then (plugins.load_plugins)."""
        from .registry import OP_FORWARDS, failed_imports
        missing: Dict[str, List[str]] = OrderedDict()
        for node in self.nodes:
            if OP_FORWARDS.get(node.type) is None:
                missing.setdefault(node.type, []).append(node.name)
        if missing:
            parts = [f"{t} ({len(names)} layer{'s' if len(names) > 1 else ''}, e.g. '{names[0]}')"
                     for t, names in missing.items()]
            kind = "type" if len(missing) == 1 else "types"
            raise GraphError(f"graph '{self.name}': layer {kind} {', '.join(parts)} "
                             f"{'is' if len(missing) == 1 else 'are'} not supported yet{failed_imports()}")

    def mark_integer_tensors(self, device="cpu") -> None:
        """A zero-input forward that marks every tensor computed in integers (indices,
        counts, shapes) quantization-invariant: decided from the graph alone, so that
        calibrating and loading a statistic_file give the same quantized graph."""
        def mark(node):
            for t in node.outputs:
                if not t.betensor.is_floating_point():
                    t.qinvariant = True
        inputs = [torch.zeros((1,) + tuple(t.ir_shape[1:]), dtype=t.dtype.torch_dtype, device=device)
                  for t in self.input_tensors]
        self.forward(inputs, after_node=mark)

    def zero_forward(self, batch: int = 1, device="cpu") -> List[torch.Tensor]:
        """Forward with all-zero inputs of the IR's shapes: runs every op once."""
        inputs = [torch.zeros((batch,) + tuple(t.ir_shape[1:]), dtype=t.dtype.torch_dtype, device=device)
                  for t in self.input_tensors]
        return self.forward(inputs)


class QuantizeGraph(PyGraph):
    """The PyGraph that the optimizer calibrates, quantizes and serializes."""


ITERATIONS_AXIS = "iterations_axis"  # PyTensor.attrs key: see mark_iterations_axis


def mark_iterations_axis(t: PyTensor) -> None:
    """A Loop's scan output: its first axis counts the iterations run, which the trip count
    bounds, not the IR's shape (the parser writes the count of its own run of the Loop)."""
    t.attrs[ITERATIONS_AXIS] = True


def check_shape(node: PyNode, t: PyTensor, batch_factor: float, bounded: bool = False) -> None:
    """Shapes must equal the IR's but for one axis that carries the batch: batch_factor
    times the IR's size there (the batch axis, wherever Transpose/Reshape moved or folded
    it), or the IR's size for batch-free values such as a Constant's. A shape that follows
    the data (`bounded`) must stay within the IR's, taken as a bound of each axis (of the
    element count where the ranks differ), batch_factor times larger for a larger batch;
    the first axis of a Loop's scan output is free (mark_iterations_axis)."""
    got = tuple(t.betensor.shape)
    want = tuple(t.ir_shape)
    if t.attrs.get(ITERATIONS_AXIS) and len(got) == len(want):
        got, want = got[1:], want[1:]
    if bounded:
        grow = max(batch_factor, 1.0)
        if math.prod(got) <= math.prod(want) * grow and \
                (len(got) != len(want) or all(g <= w * grow for g, w in zip(got, want))):
            return
        raise GraphError(f"layer '{node.name}' ({node.type}): computed shape {list(got)} for tensor "
                         f"'{t.name}' exceeds the IR's {list(want)} (a shape that follows the data, "
                         f"bounded by the IR's)")
    if len(got) == len(want):
        differ = [a for a in range(len(want)) if got[a] != want[a]]
        if not differ or (len(differ) == 1 and got[differ[0]] == want[differ[0]] * batch_factor):
            return
    raise GraphError(f"layer '{node.name}' ({node.type}): computed shape {list(got)} for tensor "
                     f"'{t.name}', the IR says {list(want)}")
