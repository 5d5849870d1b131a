"""Registries of op forwards, op quantizers, datasets and metrics.

Built-in ops and user plugins register through the same decorators; for one
key, the highest version wins, so a plugin at 1.1 replaces a built-in 1.0.
"""
import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Dict, List

from .errors import PluginError


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


class PluginType(Enum):
    Dataset = "Dataset"
    Metric = "Metric"


@dataclass
class Registration:
    key: str
    version: str
    obj: object
    source: str

    @property
    def version_key(self):
        return _version_key(self.version, self.source)


def _version_key(version, source):
    try:
        return tuple(int(p) for p in str(version).split("."))
    except ValueError:
        raise PluginError(f"{source}: version '{version}' is not of the form 1.0 or 1.2.3") from None


class Registry:
    """Name -> all registrations; `get` returns the highest version's object."""

    def __init__(self, what: str):
        self.what = what
        self._entries: Dict[str, List[Registration]] = {}

    def add(self, key: str, version, obj, source: str) -> None:
        reg = Registration(key, str(version), obj, source)
        reg.version_key  # validates the version now, naming the file
        self._entries.setdefault(key, []).append(reg)

    def best(self, key: str) -> Registration:
        """Highest version; at equal versions the one registered last."""
        regs = self._entries.get(key)
        if not regs:
            return None
        return max(reversed(regs), key=lambda r: r.version_key)

    def get(self, key: str):
        reg = self.best(key)
        return reg.obj if reg else None

    def keys(self) -> List[str]:
        return sorted(self._entries)

    def all(self) -> List[Registration]:
        return [r for key in self.keys() for r in sorted(self._entries[key], key=lambda r: r.version_key)]

    def remove_source(self, source: str) -> None:
        for key in list(self._entries):
            self._entries[key] = [r for r in self._entries[key] if r.source != source]
            if not self._entries[key]:
                del self._entries[key]


OP_FORWARDS = Registry("op forward")
OP_QUANTIZERS = Registry("op quantizer")
PLUGINS = {PluginType.Dataset: Registry("dataset"), PluginType.Metric: Registry("metric")}


def _source_of(obj) -> str:
    try:
        return inspect.getsourcefile(obj) or "<unknown>"
    except TypeError:
        return "<unknown>"


def _check_optype(optype, source):
    if not isinstance(optype, str) or getattr(OpType, optype, None) != optype:
        raise PluginError(f"{source}: unknown op type '{optype}'; add it with register_optype('{optype}')")


def op_register(optype: str, version="1.0"):
    """Register a float/quantized forward function `fn(node, *args)` for a layer type."""
    def deco(fn: Callable):
        source = _source_of(fn)
        _check_optype(optype, source)
        OP_FORWARDS.add(optype, version, fn, source)
        return fn
    return deco


def quant_register(optype: str, version="1.0"):
    """Register a quantize function `fn(node, *args)` for a layer type."""
    def deco(fn: Callable):
        source = _source_of(fn)
        _check_optype(optype, source)
        OP_QUANTIZERS.add(optype, version, fn, source)
        return fn
    return deco


def register_plugin(plugin_type: PluginType, version="1.0"):
    """Register a dataset (torch Dataset) or metric class under its class name."""
    if plugin_type not in PLUGINS:
        raise PluginError(f"unknown plugin type {plugin_type!r}; use PluginType.Dataset or PluginType.Metric")

    def deco(cls):
        PLUGINS[plugin_type].add(cls.__name__, version, cls, _source_of(cls))
        return cls
    return deco
