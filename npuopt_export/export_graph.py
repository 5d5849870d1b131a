"""Walk a torch.export graph and build the float IR: values, layouts and names.

Each PyTorch value becomes one of: a constant tensor (parameters, buffers and
everything computed from them only, folded at export time), an `Act` (an IR
tensor), a `LazyPad` (a zero pad that a convolution may absorb), or a tuple of
these. An `Act` remembers how the IR holds the PyTorch value (`perm`), so that
permutes and most reshapes cost no layer and 4-D image tensors stay NHWC; a
Transpose is emitted only where a layer needs another layout.
"""
import operator
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch.export.graph_signature import InputKind, OutputKind

from npuopt.dtype import Dtype
from npuopt.errors import ExportError, NpuoptError
from npuopt.ir.builder import GraphBuilder

NHWC = (0, 2, 3, 1)


def canonical_perm(rank: int) -> Tuple[int, ...]:
    """The IR layout of a graph input or output: NHWC for 4-D tensors, as-is otherwise."""
    return NHWC if rank == 4 else tuple(range(rank))


@dataclass(frozen=True)
class Act:
    """An IR tensor holding the PyTorch value of shape `shape` as value.permute(perm)."""
    name: str
    shape: Tuple[int, ...]
    perm: Tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def ir_axis(self, dim: int) -> int:
        """The IR axis that holds PyTorch axis `dim`."""
        return self.perm.index(dim % self.rank)


@dataclass
class LazyPad:
    """A zero pad of H and W only: a convolution reading it takes the pads as its own;
    any other reader gets a Pad layer (emitted once)."""
    act: Act
    pads: Tuple[int, int, int, int]  # top, bottom, left, right
    node: torch.fx.Node
    emitted: Optional[Act] = field(default=None)

    def pads_per_axis(self) -> List[List[int]]:
        top, bottom, left, right = self.pads
        return [[0, 0], [0, 0], [top, bottom], [left, right]]


class Size(int):
    """An int the model computed from a tensor's size (a dynamic length, `pk.shape[2] + 1`):
    arithmetic on it stays a Size, and an op of a constant with a Size argument (a slice of
    a rotary table up to the length) is a layer, not a folded constant, so that the IR of
    every length has the same layers."""

    def _wrap(op):
        def method(self, *other):
            result = op(int(self), *(int(o) for o in other))
            return Size(result) if isinstance(result, int) else result
        return method

    __add__, __radd__ = _wrap(int.__add__), _wrap(int.__radd__)
    __sub__, __rsub__ = _wrap(int.__sub__), _wrap(int.__rsub__)
    __mul__, __rmul__ = _wrap(int.__mul__), _wrap(int.__rmul__)
    __floordiv__, __neg__ = _wrap(int.__floordiv__), _wrap(int.__neg__)
    del _wrap


def _holds(value, kinds) -> bool:
    if isinstance(value, kinds):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds(v, kinds) for v in value)
    if isinstance(value, dict):
        return any(_holds(v, kinds) for v in value.values())
    return False


def holds_act(value) -> bool:
    return _holds(value, (Act, LazyPad))


def holds_size(value) -> bool:
    return _holds(value, Size)


def module_of(node: torch.fx.Node) -> Tuple[str, str]:
    """The innermost module (path, class name) whose forward called this node."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, kind = list(stack.values())[-1]
    kind = kind if isinstance(kind, str) else kind.__qualname__
    return path, kind.rsplit(".", 1)[-1]


def where(node: torch.fx.Node) -> str:
    path, kind = module_of(node)
    return f"module '{path}' ({kind})" if path else f"the top-level module ({kind or 'forward'})"


def op_name(node: torch.fx.Node) -> str:
    target = node.target
    return getattr(target, "_opname", None) or getattr(target, "__name__", None) or node.name


class Exporter:
    """Converts the nodes of one ExportedProgram, one handler per aten op."""

    def __init__(self, program: torch.export.ExportedProgram, module: torch.nn.Module, name: str,
                 handlers: Dict[object, object]):
        self.program = program
        self.module = module
        self.handlers = handlers
        self.builder = GraphBuilder(name)
        self.node: Optional[torch.fx.Node] = None  # the node being converted
        self._used_names = set()
        self._layouts: Dict[Tuple[str, Tuple[int, ...]], str] = {}
        self._leaf: Dict[str, bool] = {}
        self._sizes: Dict[object, int] = {}  # a dynamic size's symbol -> its value in the examples
        self._plain = False  # graph inputs and outputs in PyTorch's layout (4-D too)

    # ---- the walk ----------------------------------------------------------------
    def run(self, examples: Sequence[torch.Tensor], nhwc_inputs: bool, plain_layout: bool = False):
        """Returns the built graph (before stage-1 passes). `plain_layout`: every graph input
        and output in PyTorch's layout (a decoder's caches), not NHWC."""
        self._plain = plain_layout
        sig = self.program.graph_signature
        consts = {**self.program.state_dict, **self.program.constants}
        const_targets = {spec.arg.name: spec.target for spec in sig.input_specs
                         if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)}
        values = {}
        user_examples = iter(examples)
        outputs = []
        for node in self.program.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                if node.name in const_targets:
                    values[node] = consts[const_targets[node.name]].detach()
                else:
                    example = next(user_examples)
                    self._bind_sizes(node, example)
                    values[node] = self._input(node.name, example, nhwc_inputs and not plain_layout)
            elif node.op == "call_function":
                values[node] = self._convert(node, values)
            elif node.op == "output":
                kinds = [spec.kind for spec in sig.output_specs]
                results = [v for v, kind in zip(node.args[0], kinds) if kind == OutputKind.USER_OUTPUT]
                outputs = [self._output(values[r]) for r in results]
        return self.builder.build(outputs)

    def _bind_sizes(self, node: torch.fx.Node, example: torch.Tensor) -> None:
        """The symbols of a traced input's dynamic sizes take the example's sizes."""
        for size, value in zip(getattr(node.meta.get("val"), "shape", ()), example.shape):
            if isinstance(size, torch.SymInt):
                self._sizes[size.node.expr] = int(value)

    def size(self, value) -> int:
        """A traced size (a dynamic one: its value in the examples)."""
        if isinstance(value, torch.SymInt):
            return int(value.node.expr.xreplace(self._sizes))
        return int(value)

    def shape_of(self, node: torch.fx.Node) -> Tuple[int, ...]:
        return tuple(self.size(d) for d in node.meta["val"].shape)

    def _input(self, name: str, example: torch.Tensor, nhwc: bool) -> Act:
        perm = canonical_perm(example.dim()) if nhwc else tuple(range(example.dim()))
        value = example.permute(perm).contiguous()
        self._used_names.add(name)
        if value.is_floating_point():
            self.builder.input(name, list(value.shape), value)
        else:  # token ids, indices: int32 as the parser writes them
            self.builder.input(name, list(value.shape), value.to(torch.int32), Dtype.INT32)
        return Act(name, tuple(example.shape), perm)

    def _layout(self, rank: int) -> Tuple[int, ...]:
        return tuple(range(rank)) if self._plain else canonical_perm(rank)

    def _output(self, value) -> str:
        if isinstance(value, torch.Tensor):
            return self.constant(value, self._layout(value.dim())).name
        if not isinstance(value, (Act, LazyPad)):
            raise ExportError(f"the model returns a {type(value).__name__}; only tensors can be IR outputs")
        act = self.act(value)
        return self.need(act, self._layout(act.rank)).name

    def _convert(self, node: torch.fx.Node, values):
        args = torch.fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
        sized = holds_size((args, kwargs))
        if not holds_act((args, kwargs)) and not (sized and _holds(args, torch.Tensor)):
            with torch.no_grad():
                result = node.target(*args, **kwargs)  # computed from constants only: fold it
            return Size(result) if sized and isinstance(result, int) else result
        if node.target is operator.getitem:
            picked = args[0][args[1]]
            if picked is None:
                raise ExportError(f"{where(node)} reads output {args[1]} of '{node.args[0].name}', "
                                  f"which has no IR form")
            return picked
        handler = self.handlers.get(node.target)
        if handler is None:
            raise ExportError(f"unsupported op {node.target} in {where(node)}: it has no IR mapping")
        try:
            return handler(self, node, *args, **kwargs)
        except ExportError:
            raise
        except NpuoptError as e:
            raise ExportError(f"{node.target} in {where(node)}: {e}") from e

    # ---- values ------------------------------------------------------------------
    @property
    def out_shape(self) -> Tuple[int, ...]:
        return self.shape_of(self.node)

    def act(self, value) -> Act:
        """The IR tensor of a value that is not a constant (a LazyPad gets its Pad layer)."""
        if isinstance(value, Act):
            return value
        if isinstance(value, LazyPad):
            if value.emitted is None:
                value.emitted = self.emit_pad(value.act, value.pads_per_axis(), "CONSTANT", 0.0, node=value.node)
            return value.emitted
        raise ExportError(f"{self.node.target} in {where(self.node)}: expected a computed tensor, "
                          f"got {type(value).__name__}")

    def need(self, value, perm: Sequence[int]) -> Act:
        """The value in IR layout `perm`; a Transpose is emitted once per value and layout."""
        act = self.act(value)
        perm = tuple(perm)
        if act.perm == perm:
            return act
        # keyed by the IR permutation: values that share an IR tensor (x and x.transpose(2, 3))
        # share its transposes, but each gets its own view of the result
        q = tuple(act.perm.index(p) for p in perm)
        key = (act.name, q)
        if key not in self._layouts:
            suffix = {NHWC: "nhwc", (0, 1, 2, 3): "nchw"}.get(perm, "transpose")
            name = self._unique(f"{act.name}.{suffix}")
            self._layouts[key] = self._layer("Transpose", name, [act], {"perm": list(q)}, None, act.shape,
                                             perm).name
        return Act(self._layouts[key], act.shape, perm)

    def permute(self, value, dims: Sequence[int]) -> Act:
        """y = x.permute(dims) costs no layer: only the bookkeeping of y's layout changes."""
        act = self.act(value)
        dims = [d % act.rank for d in dims]
        perm = tuple(dims.index(p) for p in act.perm)
        return Act(act.name, tuple(act.shape[d] for d in dims), perm)

    def reshape(self, value, shape: Sequence[int]) -> Act:
        """A Reshape in the IR's own layout when the reshape only splits or merges axes
        that lie together there (flatten after global pooling, channel shuffle, patch
        embedding); otherwise back to PyTorch's layout first."""
        act = self.act(value)
        shape = tuple(int(s) for s in shape)
        perm = reshape_perm(act.shape, act.perm, shape)
        if perm is None:
            act, perm = self.need(act, range(act.rank)), tuple(range(len(shape)))
        ir_shape = [shape[p] for p in perm]
        if ir_shape == [act.shape[p] for p in act.perm]:
            return Act(act.name, shape, perm)
        return self.emit("Reshape", [act], {"shape": ir_shape}, shape=shape, perm=perm)

    def constant(self, value, perm: Sequence[int], shape: Sequence[int] = None) -> Act:
        """A Constant layer holding `value` (broadcast-aligned to len(perm) axes)."""
        rank = len(perm)
        value = torch.as_tensor(value, dtype=torch.float32)
        value = value.reshape((1,) * (rank - value.dim()) + tuple(value.shape))
        return self.emit("Constant", [], constants={"weights": value.permute(tuple(perm))},
                         shape=tuple(value.shape), perm=perm, suffix="const")

    # ---- layers ------------------------------------------------------------------
    def layer_name(self, node: torch.fx.Node, suffix: str = None) -> str:
        """The module path for the op of a leaf module (`layer1.0.conv1`); path and op
        name for an op in a container's forward (`layer1.0.add`)."""
        path, _ = module_of(node)
        base = path if path and self._is_leaf(path) else ".".join(p for p in (path, op_name(node)) if p)
        return self._unique(f"{base}.{suffix}" if suffix else base)

    def emit(self, optype: str, bottoms: Sequence[Act], params=None, constants=None, *, shape=None,
             perm=None, suffix: str = None, node=None, top_shape: bool = False) -> Act:
        """Add one layer for the current node; `shape` (PyTorch) and `perm` default to
        the node's output shape and the first input's layout."""
        node = node or self.node
        shape = tuple(shape) if shape is not None else self.shape_of(node)
        perm = tuple(perm if perm is not None else bottoms[0].perm)
        return self._layer(optype, self.layer_name(node, suffix), bottoms, params, constants, shape, perm,
                           top_shape)

    def emit_split(self, x: Act, axis: int, shapes: List[Tuple[int, ...]]) -> List[Act]:
        sizes = [s[x.perm[axis]] for s in shapes]
        return self.emit_tops("Split", [x], {"axis": axis, "splits": sizes}, None, shapes)

    def emit_tops(self, optype: str, bottoms: Sequence[Act], params, constants, shapes: Sequence[Sequence[int]],
                  suffix: str = None) -> List[Act]:
        """Add one layer of several tops for the current node; a top of the first input's
        rank takes its layout, another one PyTorch's."""
        name = self.layer_name(self.node, suffix)
        tops = self.builder.layer(optype, name, [b.name for b in bottoms], params, constants, n_tops=len(shapes))
        self._used_names.update(tops)
        perm = bottoms[0].perm
        acts = [Act(t, tuple(s), perm if len(s) == len(perm) else tuple(range(len(s)))) for t, s in zip(tops, shapes)]
        for a in acts:
            self._check_shape(optype, a)
        return acts

    def emit_pad(self, x: Act, pads_torch: Sequence[Sequence[int]], mode: str, value: float, node=None) -> Act:
        """A Pad layer; `pads_torch` is [before, after] per PyTorch axis."""
        node = node or self.node
        pads = [list(pads_torch[p]) for p in x.perm]
        shape = tuple(s + b + a for s, (b, a) in zip(x.shape, pads_torch))
        return self.emit("Pad", [x], {"pads": pads, "mode": mode, "constant_value": float(value)},
                         shape=shape, node=node)

    def _layer(self, optype, name, bottoms, params, constants, shape, perm, top_shape=False) -> Act:
        expected = Act(name, tuple(shape), tuple(perm))
        ir_shape = [shape[p] for p in perm]
        self.builder.layer(optype, name, [b.name for b in bottoms], params, constants,
                           top_shapes=[ir_shape] if top_shape else None)
        self._check_shape(optype, expected)
        return expected

    def _check_shape(self, optype: str, act: Act) -> None:
        got = list(self.builder.tensors[act.name].ir_shape)
        want = [act.shape[p] for p in act.perm]
        if got != want:
            raise ExportError(f"internal: {optype} '{act.name}' for {self.node.target} in {where(self.node)} "
                              f"computed IR shape {got}, expected {want}")

    def _unique(self, name: str) -> str:
        candidate, i = name, 0
        while candidate in self._used_names:
            i += 1
            candidate = f"{name}_{i}"
        self._used_names.add(candidate)
        return candidate

    def _is_leaf(self, path: str) -> bool:
        """No parameters below it: Conv2d, ReLU, a same-padding conv with its ZeroPad2d."""
        if path not in self._leaf:
            try:
                sub = self.module.get_submodule(path)
                self._leaf[path] = not any(True for child in sub.children()
                                           for _ in list(child.parameters()) + list(child.buffers()))
            except AttributeError:
                self._leaf[path] = False
        return self._leaf[path]


def reshape_perm(in_shape, perm, out_shape) -> Optional[Tuple[int, ...]]:
    """The layout of x.reshape(out_shape) when the IR can reshape its own tensor to it,
    else None. Axes of size 1 move freely; the others form groups of input axes whose
    product equals that of a group of output axes. Every group must lie together, in
    order, in the IR; the output's IR order is then the groups' IR order."""
    keep_in = [a for a, s in enumerate(in_shape) if s != 1 or a == 0]
    keep_out = [a for a, s in enumerate(out_shape) if s != 1 or a == 0]
    groups, i, j = [], 0, 0
    while i < len(keep_in) and j < len(keep_out):
        gin, gout = [keep_in[i]], [keep_out[j]]
        pin, pout = in_shape[keep_in[i]], out_shape[keep_out[j]]
        i, j = i + 1, j + 1
        while pin != pout:
            if pin < pout and i < len(keep_in):
                gin.append(keep_in[i])
                pin *= in_shape[keep_in[i]]
                i += 1
            elif pout < pin and j < len(keep_out):
                gout.append(keep_out[j])
                pout *= out_shape[keep_out[j]]
                j += 1
            else:
                return None
        groups.append((gin, gout))
    if i < len(keep_in) or j < len(keep_out):
        return None
    ir_order = [a for a in perm if a in keep_in]
    order = []
    for gin, gout in sorted(groups, key=lambda g: ir_order.index(g[0][0])):
        start = ir_order.index(gin[0])
        if ir_order[start:start + len(gin)] != gin:
            return None
        order += gout
    for axis in range(len(out_shape)):
        if axis not in order:
            order.insert(order.index(axis - 1) + 1, axis)
    return tuple(order)
