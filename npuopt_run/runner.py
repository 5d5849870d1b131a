"""Run a (quantized or mixed-precision) model layer by layer.

Integer tensors are held as int64 NumPy arrays, float tensors as float32.
A layer kept in float computes in float64 (its float inputs and constants exact
there) and its tops are rounded to float32 and then to their type, as npuopt's
forward does: so both give the same values whatever order each sums in
(Quantize and DeQuantize keep their float32 arithmetic). Values cross between float
and integer layers only through Quantize and DeQuantize layers, but for integers that
are their own values (indices, counts: TensorInfo.unscaled; docs/integer-semantics.md).
"""
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set

import numpy as np

from . import intmath, minifloat
from .errors import RefrunError
from .irfile import DType, Layer, Model
from .ops import ITERATIONS_FIRST_AXIS, OPS


@dataclass
class TensorInfo:
    """What the IR says about one activation tensor (from its producer's block)."""
    name: str
    dtype: DType
    shape: tuple
    scale: Optional[float]
    zp: Optional[int]
    qmin: int              # layer_top_range, else the dtype's range (integer tensors)
    qmax: int
    producer: Layer

    @property
    def is_int(self) -> bool:
        return self.dtype.is_int

    @property
    def quantized(self) -> bool:
        """Integers, or a scaled fp8 format: what a quantized layer reads and writes."""
        return self.dtype.is_int or self.dtype.minifloat

    @property
    def unscaled(self) -> bool:
        """Integers that are their own real values (indices, counts, a comparison's 0/1:
        scale 1, zero point 0, or none): float and integer layers alike read them."""
        return self.dtype.is_int and self.scale in (None, 1.0) and self.zp in (None, 0)

    def quant(self, who: Layer):
        """(scale, zp) of an integer tensor; a quantized IR must carry both."""
        if self.scale is None or self.zp is None:
            raise self.producer.error(f"integer tensor '{self.name}' lacks layer_top_scale/layer_top_zp")
        return self.scale, self.zp


def _float32(scale: float) -> float:
    """The scale as the float32 that quantizes and dequantizes with it (1e-50 is 0 there, 1e40 inf)."""
    with np.errstate(over="ignore"):
        return float(np.float32(scale))


def tensor_infos(model: Model) -> Dict[str, TensorInfo]:
    infos = {}
    for layer in model.layers:
        for i, t in enumerate(layer.tops):
            scale = layer.top_scales[i] if layer.top_scales is not None else None
            zp = layer.top_zps[i] if layer.top_zps is not None else None
            if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
                raise layer.error(f"layer_top_scale entry {scale!r} is not a number", "layer_top_scale")
            if zp is not None and (isinstance(zp, bool) or not isinstance(zp, int)):
                raise layer.error(f"layer_top_zp entry {zp!r} is not an integer", "layer_top_zp")
            qmin, qmax = layer.top_range(i)
            infos[t] = TensorInfo(t, layer.top_types[i], layer.top_shapes[i], scale, zp, qmin, qmax, layer)
    return infos


# float layers that keep float32 arithmetic (the boundary's conversions are defined in float32)
FLOAT32_BOUNDARY = ("Quantize", "DeQuantize")

# constants that only describe a quantization (they do not make a layer float)
_DESCRIPTIVE_CONSTANTS = ("weights_scale", "biases_scale")


def computes_in_integers(layer: Layer, infos: Dict[str, TensorInfo]) -> bool:
    """Whether a layer runs its integer forward, as the tool chain decides it on a quantized
    IR: Quantize does; `unquantifiable=true` layers do not; fp8 layers (an fp8 tensor enters
    or leaves them) do; any other layer does unless a float tensor (16 bits or more) enters
    or leaves it or is one of its constants (a lookup table's layer aside)."""
    if layer.type == "Quantize":
        return True
    if layer.param("unquantifiable", False) is True:
        return False
    if any(d.minifloat for d in [infos[b].dtype for b in layer.bottoms] + layer.top_types):
        return True  # an fp8 layer: its float32 biases and scales do not make it float
    floats = [not d.is_int and d.name != "bool" for d in [infos[b].dtype for b in layer.bottoms] + layer.top_types]
    if not any("lut" in name for name in layer.consts):
        floats += [np.issubdtype(v.dtype, np.floating) for name, v in layer.consts.items()
                   if name not in _DESCRIPTIVE_CONSTANTS]
    return not any(floats)


def to_float_type(x: np.ndarray, name: str) -> np.ndarray:
    """float32 values as a float16 or bfloat16 top holds them: the nearest value of the type
    (half to even), clamped to its finite range first (infinities stay)."""
    if name == "float16":
        limit = np.float32(np.finfo(np.float16).max)
        return np.where(np.isinf(x), x, np.clip(x, -limit, limit)).astype(np.float16).astype(np.float32)
    if name == "bfloat16":
        limit = np.float32(3.3895313892515355e38)
        x = np.where(np.isinf(x), x, np.clip(x, -limit, limit)).astype(np.float32)
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        rounded = np.where(np.isnan(x), bits, rounded).astype(np.uint32)
        return rounded.view(np.float32)
    return x


def topological(model: Model) -> List[Layer]:
    """Layers in an order where every tensor is written before it is read."""
    written = set()
    pending = list(model.layers)
    order = []
    while pending:
        ready = [layer for layer in pending if all(b in written for b in layer.bottoms)]
        if not ready:
            raise pending[0].error("the graph has a cycle through this layer")
        for layer in ready:
            order.append(layer)
            written.update(layer.tops)
        pending = [layer for layer in pending if layer not in ready]
    return order


def last_reads(order: List[Layer]) -> List[List[str]]:
    """For each layer of `order`, the tensors that no later layer reads (its own unread tops
    included): the run drops them once that layer has run."""
    last = {}
    for i, layer in enumerate(order):
        for t in layer.bottoms + layer.tops:
            last[t] = i
    done: List[List[str]] = [[] for _ in order]
    for t, i in last.items():
        done[i].append(t)
    return done


def data_dependent(order: List[Layer]) -> Set[str]:
    """The tensors whose shapes follow the data: the tops of layer types that say so
    (Op.data_dependent_shapes) and every top computed from such a tensor."""
    names: Set[str] = set()
    for layer in order:
        if (layer.type in OPS and OPS[layer.type].data_dependent_shapes) or any(b in names for b in layer.bottoms):
            names.update(layer.tops)
    return names


def _samples(x: np.ndarray, batch: int, start: int, n: int) -> np.ndarray:
    """Samples start..start+n of a batched input; an input of its own batch whole."""
    return x[start:start + n] if x.ndim and x.shape[0] == batch else x


class Runner:
    def __init__(self, model: Model):
        self.model = model
        self.infos = tensor_infos(model)
        self.order = topological(model)
        self.integer = {layer.name: computes_in_integers(layer, self.infos) for layer in self.order}
        self.last_read = last_reads(self.order)
        self.bounded = data_dependent(self.order)
        # a batch of a graph whose shapes follow the data runs as one, as the tool chain runs it
        self._batchable: Optional[bool] = True if self.bounded else None
        if not model.subgraph:  # a subgraph section holds the float layers of a control-flow layer
            self._check_quantized()
        for layer in self.order:  # If/Loop run the subgraph sections their params name
            layer.subgraph_runs = {key: Runner(sub).run_subgraph for key, sub in layer.subgraphs.items()}
        for layer in self.order:
            if layer.type not in OPS:
                raise layer.error(f"unknown layer type '{layer.type}' (npuopt-run knows: "
                                  f"{', '.join(sorted(OPS))})", "layer_type")
            for t in layer.tops:
                info = self.infos[t]
                if info.quantized and not (layer.type == "Constant" and info.scale is None):
                    info.quant(layer)  # integers need scale/zp, but a Constant's indices
            axes = layer.param("activation_quantization_axis", [])
            axes = axes if isinstance(axes, list) else [axes]
            if self.integer[layer.name] and any(a is not None and a != "None" for a in axes):
                raise layer.error(f"per-channel activation quantization (activation_quantization_axis={axes}) "
                                  f"is not supported", "activation_quantization_axis")

    def _check_quantized(self) -> None:
        """npuopt-run checks quantized IRs: refuse a float one (no integer tensor with a
        scale, no quantized weights, no float16/bfloat16 tensor: the parser's or
        npuopt-export's IR, not npuopt's), and a graph input or
        output scale that would quantize or dequantize to garbage."""
        weight_only = any(layer.has_const("weights_scale") or "weights_scale" in layer.params
                          for layer in self.model.layers)
        narrow = any(info.dtype.name in ("float16", "bfloat16") for info in self.infos.values())
        if not (weight_only or narrow) and not any(info.quantized and info.scale is not None
                                                   for info in self.infos.values()):
            raise RefrunError(f"{self.model.path}: not a quantized IR: no layer writes an integer tensor with a "
                              f"layer_top_scale, nor a float16/bfloat16 one (a float IR; quantize it with npuopt "
                              f"first)")
        for name in self.model.inputs + self.model.outputs:
            info = self.infos[name]
            # any scale a graph input or output states (a float one states none), as the float32 it is used as
            if info.scale is not None and not (math.isfinite(_float32(info.scale)) and _float32(info.scale) > 0):
                kind = "input" if name in self.model.inputs else "output"
                as_float32 = "" if not math.isfinite(info.scale) or info.scale <= 0 else \
                    f" (it is {_float32(info.scale)} in float32)"
                raise info.producer.error(f"layer_top_scale {info.scale} of graph {kind} '{name}' must be a "
                                          f"positive finite number{as_float32}", "layer_top_scale")

    def check_inputs(self, arrays: Sequence[np.ndarray], integer_input: bool, files: Sequence[str] = ()) -> None:
        """The inputs against the IR from their shapes and dtypes alone (no value is read, so
        memory-mapped files cost nothing): one per graph input, the IR's shape after the
        batch axis, real numbers; integers for a scaled integer input only with
        `integer_input` (they could be its real values or its quantized ones; an unscaled
        input's integers, token ids, are both). `files` name them."""
        names = self.model.inputs
        if len(arrays) != len(names):
            raise RefrunError(f"the model takes {len(names)} input(s) ({', '.join(names)}), "
                              f"got {len(arrays)} --input")
        for i, (name, x) in enumerate(zip(names, arrays)):
            info = self.infos[name]
            who = f"input '{name}'" + (f" (file '{files[i]}')" if files else "")
            if x.dtype.kind not in "biuf":
                raise RefrunError(f"{who} holds {x.dtype} values; npuopt-run takes real numbers (floats, or "
                                  f"integers with --integer-input)")
            if x.ndim != len(info.shape) or tuple(x.shape[1:]) != tuple(info.shape[1:]):
                raise RefrunError(f"{who} has shape {list(x.shape)}; the IR says {list(info.shape)} "
                                  f"(the first axis is the batch)")
            if info.is_int and not info.unscaled and not integer_input and np.issubdtype(x.dtype, np.integer):
                raise RefrunError(f"{who} is an integer array ({x.dtype}): pass --integer-input to "
                                  f"take it as quantized {info.dtype.name} values, or give floats to quantize")

    def prepare_inputs(self, arrays: Sequence[np.ndarray], integer_input: bool) -> List[np.ndarray]:
        """Check the inputs against the IR; quantize float ones with the Input layer's scale/zp
        (a float16/bfloat16 input: its nearest values); integers for an integer input are
        its integers (each input as its own array and the IR say: token ids beside float
        caches)."""
        self.check_inputs(arrays, integer_input)
        values = []
        for name, x in zip(self.model.inputs, arrays):
            info = self.infos[name]
            if info.dtype.minifloat:
                values.append(minifloat.quantize(x, info.quant(info.producer)[0], info.dtype.name))
            elif not info.is_int:
                values.append(to_float_type(x.astype(np.float32), info.dtype.name))
            elif np.issubdtype(x.dtype, np.integer):  # check_inputs: --integer-input, or unscaled
                x = x.astype(np.int64)
                lo, hi = info.dtype.qmin, info.dtype.qmax
                if x.size and (x.min() < lo or x.max() > hi):
                    raise RefrunError(f"input '{name}': values [{x.min()}, {x.max()}] lie outside "
                                      f"{info.dtype.name} [{lo}, {hi}]")
                values.append(x)
            else:
                scale, zp = info.quant(info.producer)
                values.append(intmath.quantize(x, scale, zp, info.qmin, info.qmax))
        return values

    def run(self, inputs: Sequence[np.ndarray]) -> Dict[str, np.ndarray]:
        """Every tensor of the model, by name (inputs already prepared), the samples of the
        batch along the first axis. Holds the whole batch's tensors: stream() is the
        memory-bounded way."""
        parts: Dict[str, List[np.ndarray]] = {}
        self.stream(inputs, set(self.infos), lambda name, value: parts.setdefault(name, []).append(value))
        return {name: np.concatenate(p, axis=0) if len(p) > 1 and p[0].ndim else p[-1] for name, p in parts.items()}

    def stream(self, inputs: Sequence[np.ndarray], wanted: Set[str], sink: Callable[[str, np.ndarray], None]) -> None:
        """Run one batch (inputs already prepared), handing every tensor named in `wanted` to
        sink(name, value) as soon as it is computed and dropping each tensor after its last
        reader, so that memory follows the model and the batch. A model whose IR cannot
        carry a batch (batch 1 fixed in its shapes: the first two samples' outputs change
        when run together; decided once, on the first batch of two or more) runs one sample
        at a time: the sink then gets each tensor once per sample, in sample order."""
        batch = inputs[0].shape[0] if inputs and inputs[0].ndim else 1
        ir_batch_one = all(list(self.infos[n].shape)[:1] == [1] for n in self.model.inputs)
        if batch > 1 and ir_batch_one:
            if self._batchable is None:
                self._batchable = self._samples_stay_apart(inputs)
            if not self._batchable:
                for i in range(batch):
                    self._run([_samples(x, batch, i, 1) for x in inputs], wanted, sink)
                return
        self._run(inputs, wanted, sink)

    def _samples_stay_apart(self, inputs: Sequence[np.ndarray]) -> bool:
        batch = inputs[0].shape[0]
        try:
            together = self._outputs([_samples(x, batch, 0, 2) for x in inputs])
        except RefrunError:
            return False
        for i in range(2):
            alone = self._outputs([_samples(x, batch, i, 1) for x in inputs])
            for name in self.model.outputs:
                a, b = together[name], alone[name]
                if a.shape == b.shape and np.array_equal(a, b):
                    continue  # a batch-free output (a Constant's, FractionalPool's boundaries)
                if a.size != 2 * b.size:
                    return False
                a, b = a.astype(np.float64).reshape(2, -1)[i], b.astype(np.float64).reshape(-1)
                if np.linalg.norm(a - b) > 0.01 * np.linalg.norm(b) + 1e-12:  # mixed samples differ wholesale
                    return False
        return True

    def _outputs(self, inputs: Sequence[np.ndarray]) -> Dict[str, np.ndarray]:
        got: Dict[str, np.ndarray] = {}
        self._run(inputs, set(self.model.outputs), got.__setitem__)
        return got

    def run_subgraph(self, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
        """The outputs of this subgraph section on the values its If/Loop layer feeds it."""
        got: Dict[str, np.ndarray] = {}
        self._run(inputs, set(self.model.outputs), got.__setitem__)
        return [got[name] for name in self.model.outputs]

    def _batch(self, inputs: Sequence[np.ndarray]):
        """(the batch run, the IR's batch): of the first input with a batch axis (a Loop
        body's first inputs are scalars)."""
        for name, x in zip(self.model.inputs, inputs):
            if len(self.infos[name].shape) and x.ndim:
                return x.shape[0], self.infos[name].shape[0]
        return 1, 1

    def _run(self, inputs: Sequence[np.ndarray], wanted: Set[str], sink: Callable[[str, np.ndarray], None]) -> None:
        values: Dict[str, np.ndarray] = dict(zip(self.model.inputs, inputs))
        batch = self._batch(inputs)
        for layer, done in zip(self.order, self.last_read):
            if layer.type == "Input":
                if layer.tops[0] not in values:
                    raise layer.error(f"Input tensor '{layer.tops[0]}' is not among the header's input_tensors")
            else:  # (a comprehension: no local name keeps a tensor alive past its last reader)
                values.update({t: self._check(layer, self.infos[t], out, batch) for t, out in
                               zip(layer.tops, self._forward(layer, [values[b] for b in layer.bottoms]))})
            for t in layer.tops:
                if t in wanted:
                    sink(t, values[t])
            for t in done:
                del values[t]

    def _forward(self, layer: Layer, xs: List[np.ndarray]) -> List[np.ndarray]:
        quantized = self.integer[layer.name]
        op = OPS[layer.type]
        fn = op.int_fn if quantized else op.float_fn
        if fn is None:
            mode = "integer" if quantized else "float"
            raise layer.error(f"npuopt-run has no {mode} forward for {layer.type}")
        infos = [self.infos[b] for b in layer.bottoms]
        for info in infos:
            if info.quantized != (quantized != op.reads_other_kind) and not (info.unscaled and not quantized):
                raise layer.error(f"{'an integer' if quantized else 'a float'} {layer.type} reads "
                                  f"{'quantized' if info.quantized else 'float'} tensor '{info.name}' "
                                  f"(values cross between float and integer only through "
                                  f"Quantize/DeQuantize layers)")
        if not quantized and layer.type not in FLOAT32_BOUNDARY:
            xs = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs]
        try:
            return fn(layer, xs, infos)
        except RefrunError:
            raise
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError) as e:
            raise layer.error(f"{type(e).__name__}: {e}") from e

    def _check(self, layer: Layer, info: TensorInfo, out: np.ndarray, batches) -> np.ndarray:
        """The runner's own consistency check: IR shape (batch scaled; a bound where the
        shape follows the data; a Loop's scan outputs count the iterations run on their
        first axis, which the IR does not bound) and dtype range."""
        batch, ir_batch = batches
        want = [int(d) for d in info.shape]
        shape = list(out.shape)
        if layer.type in ITERATIONS_FIRST_AXIS and out.ndim == len(want):
            shape, want = shape[1:], want[1:]
        if info.name in self.bounded:
            grow = max(batch / ir_batch, 1) if ir_batch else 1
            fits = int(np.prod(shape)) <= int(np.prod(want)) * grow and \
                (len(shape) != len(want) or all(g <= w * grow for g, w in zip(shape, want)))
            if not fits:
                raise layer.error(f"computed shape {list(out.shape)} for '{info.name}' exceeds the IR's "
                                  f"{list(info.shape)} (a shape that follows the data, bounded by the IR's)")
            return self._check_values(layer, info, out)
        differ = [a for a in range(len(want)) if len(shape) == len(want) and shape[a] != want[a]]
        # the batch scales one axis (0, or where Transpose/Reshape put it); constants keep batch 1
        batch_axis_ok = len(differ) == 1 and ir_batch and shape[differ[0]] * ir_batch == want[differ[0]] * batch
        if len(shape) != len(want) or (differ and not batch_axis_ok):
            raise layer.error(f"computed shape {list(out.shape)} for '{info.name}', the IR says {list(info.shape)}")
        return self._check_values(layer, info, out)

    def _check_values(self, layer: Layer, info: TensorInfo, out: np.ndarray) -> np.ndarray:
        """An integer top within its dtype's range (as int64), a float one as its type holds it."""
        if info.is_int:
            if not self.integer[layer.name] and out.dtype.kind in "biu":
                out = out.astype(np.int64)  # a float layer's integer top (a comparison's 0/1, indices)
            elif not self.integer[layer.name] and out.dtype.kind == "f":  # a float Add of two counts
                out = np.trunc(np.clip(out, info.dtype.qmin, info.dtype.qmax)).astype(np.int64)  # as the tool chain fits it
            if out.dtype != np.int64:
                raise layer.error(f"integer forward returned {out.dtype} for '{info.name}'")
            if out.size and (out.min() < info.dtype.qmin or out.max() > info.dtype.qmax):
                raise layer.error(f"'{info.name}' holds [{out.min()}, {out.max()}] outside {info.dtype.name}")
        else:
            out = to_float_type(out.astype(np.float32, copy=False), "float32" if self.model.subgraph else info.dtype.name)
        return out
