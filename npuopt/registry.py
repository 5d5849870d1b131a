"""Registries of op forwards, op quantizers, datasets, metrics and global calibration
methods, and the guard that runs a registered plugin's code.

Built-in ops and user plugins register through the same decorators. For one
key, a user's registration always wins over a built-in one (and says so once,
naming both files); among the user's, or among the built-ins, the highest
version wins, then the one registered last. Dataset and metric names are
case-insensitive, as in the Compass Optimizer.
"""
import contextlib
import functools
import inspect
import os
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Dict, List

from .errors import NpuoptError, PluginError, one_line
from .logger import OPT_INFO


class OpType:
    """Namespace of layer type names: `OpType.Convolution == 'Convolution'`."""

    @classmethod
    def all(cls) -> List[str]:
        return sorted(v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, str))


# every layer type of the tool chain: what its parser writes and its Compass Optimizer registers
_BUILTIN_OPTYPES = """
Abs AccidentalHits Acos Acosh Activation AdaptivePool Add AffineGrid ArgMinMax Asin
Asinh Atan Atanh BNLL BasicLSTM BatchNorm BatchToDepth BatchToSpace BatchToSpaceND
BiasAdd BitShift Bitwise BoundingBox CELU CRELU CTCBeamDecoder CTCGreedyDecoder
CacheUpdate Cast Ceil ChannelShuffle Clip Col2Im Compress Concat Constant
ConstantOfShape ConvInteger ConvTranspose ConvTranspose3D Convolution Convolution3D
Cosh Cosine Count Crop CropAndResize Cumulate DataStride DeQuantize DecodeBox
DepthToSpace DepthwiseConv DetectionOutput Dilation Div DivMod Dummy ELU Eltwise
EmbeddingLookupSparse Erf Erosion Exp FakeQuantWithMinMaxVars Filter FilterBoxes Floor
FractionalPool FullyConnected GELU GRUv1 GRUv3 Gather GatherElements GatherND Gemm
GenerateProposals GlobalPool GridSample GroupNorm HardSigmoid Hardmax Hardswish If
InTopK Input InstanceNorm Interp IsInf IsNaN LRN LayerNorm LeakyRELU Log LogSoftmax
Logical Logit Loop MISH MVN MatMul MatMulInteger MaxPoolingWithArgMax MaxRoiPool
MaxUnpool Meshgrid Mod Moments Mul NMS Negative NonZero Normalization NormalizedMoments
OneHot OverlapAdd PRELU Pad Permute Pooling Pooling3D PostNMS1 PostNMS2 Pow Preprocess
Proposal PyramidROIAlign Quantize QueryRebatch RELU RELU6 RMSNorm RNN ROIPooling
Reciprocal Reduce RefineDetDetection Region RegionFuse Repeat Reshape Resize
ReverseSequence RgbToYuv RoiAlign RotaryEmbedding Round Rsqrt SELU SHRINK
ScatterElements ScatterND SegmentReduce Shape Sigmoid Sign Silu Sine Sinh Slice
SlotUpdate Softmax Softplus Softsign Sort SpaceToBatch SpaceToDepth Split Sqrt Square
SquaredDifference Squeeze StridedSlice Sub SufficientStatistics Swish THRESHOLDEDRELU
Tan Tanh Tile TopK Transpose Trunc Unique UpsampleByIndex Where YuvToRgb ZeroFraction
""".split()


def register_optype(name: str) -> str:
    """Add a new layer type; returns its name (idempotent)."""
    if not name.isidentifier():
        raise PluginError(f"op type name '{name}' is not a valid identifier")
    setattr(OpType, name, name)
    return name


for _name in _BUILTIN_OPTYPES:
    register_optype(_name)

# the layers that only convert between float and integers, at a float layer's boundaries
BOUNDARY_TYPES = (OpType.Quantize, OpType.DeQuantize)


class PluginType(Enum):
    Dataset = "Dataset"
    Metric = "Metric"
    QConfig = "QConfig"  # the Compass Optimizer's per-model quantization scripts (the cfg's qconfig)
    Train = "Train"      # its QAT training loops: the cfg's `train` (npuopt/fine_tuning.py)


@dataclass
class Registration:
    key: str
    version: str
    obj: object
    source: str
    data_dependent_shapes: bool = False  # an op forward whose top shapes follow its input values

    @property
    def version_key(self):
        return _version_key(self.version, self.source)

    @functools.cached_property
    def builtin(self) -> bool:
        """Registered by npuopt's own ops or built-in plugins (not a user's file); asked
        on every layer's forward, so resolved once."""
        return is_builtin_source(self.source)

    @property
    def rank(self):
        return (not self.builtin, self.version_key)


_BUILTIN_ROOTS = None


def is_builtin_source(source: str) -> bool:
    global _BUILTIN_ROOTS
    if _BUILTIN_ROOTS is None:
        import importlib.util
        roots = [os.path.dirname(os.path.abspath(__file__))]
        spec = importlib.util.find_spec("npuopt_plugins")
        if spec is not None and spec.submodule_search_locations:
            roots += list(spec.submodule_search_locations)
        roots.append(os.path.join(os.path.dirname(roots[0]), "plugins"))
        _BUILTIN_ROOTS = tuple(os.path.realpath(r) + os.sep for r in roots)
    return os.path.realpath(source).startswith(_BUILTIN_ROOTS)


def _version_key(version, source):
    try:
        return tuple(int(p) for p in str(version).split("."))
    except ValueError:
        raise PluginError(f"{source}: version '{version}' is not of the form 1.0 or 1.2.3") from None


class Registry:
    """Name -> all registrations; `get` returns the winner's object (see the module doc).
    With `case_insensitive`, names match whatever their case (datasets, metrics)."""

    def __init__(self, what: str, case_insensitive: bool = False):
        self.what = what
        self.case_insensitive = case_insensitive
        self._entries: Dict[str, List[Registration]] = {}

    def _norm(self, key: str) -> str:
        return key.lower() if self.case_insensitive else key

    def add(self, key: str, version, obj, source: str, data_dependent_shapes: bool = False) -> None:
        # a float version (the Compass Optimizer's decorators default to 1.0) reads as its repr
        reg = Registration(key, repr(version) if isinstance(version, float) else str(version), obj, source,
                           bool(data_dependent_shapes))
        reg.version_key  # validates the version now, naming the file
        regs = self._entries.setdefault(self._norm(key), [])
        if not reg.builtin:
            shadowed = next((r for r in regs if r.builtin), None)
            if shadowed is not None and not any(not r.builtin for r in regs):
                OPT_INFO(f"{self.what} '{key}': the user's {reg.source} is used instead of the built-in "
                         f"{shadowed.source} (a user's plugin wins over a built-in of the same name)")
        regs.append(reg)

    def best(self, key: str) -> Registration:
        """The user's registrations before the built-ins; then the highest version;
        at equal versions the one registered last."""
        regs = self._entries.get(self._norm(key))
        if not regs:
            return None
        return max(reversed(regs), key=lambda r: r.rank)

    def get(self, key: str):
        reg = self.best(key)
        return reg.obj if reg else None

    def keys(self) -> List[str]:
        """Registered names (as first spelled)."""
        return sorted(regs[0].key for regs in self._entries.values())

    def all(self) -> List[Registration]:
        return [r for key in sorted(self._entries) for r in sorted(self._entries[key], key=lambda r: r.rank)]

    def remove_source(self, source: str) -> None:
        for key in list(self._entries):
            self._entries[key] = [r for r in self._entries[key] if r.source != source]
            if not self._entries[key]:
                del self._entries[key]


OP_FORWARDS = Registry("op forward")
OP_QUANTIZERS = Registry("op quantizer")
OP_APPROXIMATORS = Registry("op approximate")
OP_PATCHES = Registry("op patches")
PLUGINS = {t: Registry(t.value.lower(), True) for t in PluginType}


def _source_of(obj) -> str:
    try:
        return inspect.getsourcefile(obj) or "<unknown>"
    except TypeError:
        return "<unknown>"


def _check_optype(optype, source):
    if not isinstance(optype, str) or getattr(OpType, optype, None) != optype:
        raise PluginError(f"{source}: unknown op type '{optype}'; add it with register_optype('{optype}')")


def _op_decorator(registry: Registry, optypes, version, **flags):
    """A decorator registering `fn` for one layer type or a list of them."""
    types = list(optypes) if isinstance(optypes, (list, tuple)) else [optypes]

    def deco(fn: Callable):
        source = _source_of(fn)
        for optype in types:
            _check_optype(optype, source)
        for optype in types:
            registry.add(optype, version, fn, source, **flags)
        return fn
    return deco


def op_register(optypes, version="1.0", data_dependent_shapes: bool = False):
    """Register a float/quantized forward function `fn(node, *args)` for a layer type
    (or a list of them). `data_dependent_shapes=True` says that its tops' shapes follow
    the values of its inputs (NonZero's count of nonzeros, Unique's distinct values):
    the IR's top shapes are then bounds, not shapes (has_data_dependent_shapes)."""
    return _op_decorator(OP_FORWARDS, optypes, version, data_dependent_shapes=data_dependent_shapes)


def has_data_dependent_shapes(optype: str) -> bool:
    """Whether the forward that runs for `optype` (the winning registration) gives tops
    whose shapes follow its input values, within the IR's top shapes taken as bounds
    (docs/architecture.md, "Shapes that follow the data")."""
    reg = OP_FORWARDS.best(optype)
    return reg is not None and reg.data_dependent_shapes


def quant_register(optypes, version="1.0"):
    """Register a quantize function `fn(node, *args)` for a layer type (or a list)."""
    return _op_decorator(OP_QUANTIZERS, optypes, version)


def patches_register(optypes, version="1.0"):
    """Register a layer type's input patches `fn(node, x, rows, real)`: what a global
    calibration method needs of a linear layer (its output rows as a matrix product of
    patches and weight rows), so that methods never reach into an op's geometry. It
    returns [groups, len(rows), K] in float32: the inputs of output positions `rows`
    (numbered over the samples of x, positions in order) in the order of a weight row;
    `real(v)` gives values as real numbers (a quantized input's dequantized), padding
    is a real 0."""
    return _op_decorator(OP_PATCHES, optypes, version)


def approx_register(optypes, version="1.0"):
    """Register an approximate function `fn(node, *args)` (the Compass Optimizer's
    approximation of float layers on the chip). npuopt keeps float layers exact, so
    these are registered and listed but never called."""
    return _op_decorator(OP_APPROXIMATORS, optypes, version)


def register_plugin(plugin_type: PluginType, version="1.0"):
    """Register a dataset (torch Dataset) or metric class under its class name."""
    if plugin_type not in PLUGINS:
        raise PluginError(f"unknown plugin type {plugin_type!r}; use one of "
                          f"{', '.join('PluginType.' + t.name for t in PluginType)}")

    def deco(cls):
        PLUGINS[plugin_type].add(cls.__name__, version, cls, _source_of(cls))
        return cls
    return deco


# ---- global calibration methods (npuopt/quant/global_calibration; plugins' too) --------
GLOBAL_CALIBRATION_STAGES = ("before_calibration", "after_calibration")


@dataclass(frozen=True)
class GlobalCalibrationMethod:
    name: str
    stage: str
    run: Callable
    doc: str
    edits_float: bool  # whether it changes the float graph (not only the plan): the metrics then need a copy
    data_parallel: bool = False  # whether it runs in a job of several ranks (reads ctx.shard, not ctx.batches)


GLOBAL_CALIBRATIONS: Dict[str, GlobalCalibrationMethod] = {}


def global_calibration(name: str, stage: str, edits_float: bool = True, data_parallel: bool = False):
    """Register a global calibration method `fn(ctx, params)` under `name`, run at
    `stage`; `edits_float=False` says it only plans (roundings, ranges, biases) and leaves
    the float graph's weights and biases as they are; `data_parallel` that it reads the
    calibration data through `ctx.shard` and folds what each rank's units give in unit
    order (`ctx.ranks`), so that it may run in a job of several ranks."""
    if stage not in GLOBAL_CALIBRATION_STAGES:
        raise ValueError(f"global calibration '{name}': stage must be one of {GLOBAL_CALIBRATION_STAGES}")

    def wrap(fn):
        GLOBAL_CALIBRATIONS[name.lower()] = GlobalCalibrationMethod(
            name.lower(), stage, fn, (fn.__doc__ or "").strip().split("\n")[0], edits_float, data_parallel)
        return fn
    return wrap


def unknown_global_calibrations(spec) -> str:
    """What is wrong with the names of a parsed global_calibration [(name, params, text)]
    ("" if nothing): the one message for unknown method names."""
    missing = [name for name, _, _ in spec or [] if name not in GLOBAL_CALIBRATIONS]
    return f"no global calibration method {', '.join(repr(m) for m in missing)}; " \
           f"npuopt has: {', '.join(sorted(GLOBAL_CALIBRATIONS)) or 'none'}" if missing else ""


# ---- running a registration's code ----------------------------------------------------
@dataclass
class PluginFailure:
    path: str
    error: str


failures: List[PluginFailure] = []  # plugin files that failed to import (npuopt/plugins.py)


@contextlib.contextmanager
def plugin_code(reg: Registration, what: str):
    """Runs the code of registration `reg`: what a user's plugin raises (or a sys.exit in it)
    becomes one PluginError naming its file and `what` it was doing (e.g. "the forward of
    layer 'prob' (Softmax)"); npuopt's own errors and built-in code pass unchanged."""
    try:
        yield
    except NpuoptError:
        raise
    except (Exception, SystemExit) as e:
        if reg.builtin:
            raise
        raise PluginError(f"plugin '{reg.source}': {what} failed: {type(e).__name__}: {one_line(e)}") from e


def failed_imports() -> str:
    """'; plugin file(s) that failed to import: ...' when some did, for the error saying that
    a dataset, metric or layer type was not found (it may be in one of them), else ''."""
    if not failures:
        return ""
    return "; plugin file(s) that failed to import: " + ", ".join(f"'{f.path}' ({f.error})" for f in failures)
