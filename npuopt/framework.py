"""Everything an op, dataset or metric plugin needs: `from npuopt.framework import *`.

Holds the Compass Optimizer's framework names under npuopt's prefix (its plugins
port by changing the import lines), including the logger functions it re-exports."""
import torch  # noqa: F401  (plugins commonly use it through this import)
from torch.utils.data import Dataset

from .dtype import Dtype
from .errors import NpuoptError, PluginError, DatasetError
from .logger import OPT_DEBUG, OPT_ERROR, OPT_FATAL, OPT_INFO, OPT_WARN
from .metric import OptBaseMetric
from .node import PyNode
from .registry import (OP_APPROXIMATORS, OP_FORWARDS, OP_QUANTIZERS, OpType, PluginType, approx_register,
                       op_register, patches_register, quant_register, register_optype, register_plugin)
from .tensor import PyTensor, TensorShape, get_tensor_default_property
from .graph import PyGraph, QuantizeGraph
from .config import current_config, register_field

Tensor = PyTensor  # the name the Compass Optimizer's documented op plugin example builds placeholders with

__all__ = [
    "torch", "Dataset", "Dtype", "NpuoptError", "PluginError", "DatasetError", "OptBaseMetric",
    "PyNode", "PyTensor", "Tensor", "TensorShape", "get_tensor_default_property", "PyGraph", "QuantizeGraph",
    "OpType", "PluginType", "op_register", "quant_register", "approx_register", "patches_register", "register_optype",
    "register_plugin",
    "register_field", "current_config",
    "OP_FORWARDS", "OP_QUANTIZERS", "OP_APPROXIMATORS",
    "OPT_DEBUG", "OPT_INFO", "OPT_WARN", "OPT_ERROR", "OPT_FATAL",
]
