"""Everything an op, dataset or metric plugin needs: `from npuopt.framework import *`."""
import torch  # noqa: F401  (plugins commonly use it through this import)
from torch.utils.data import Dataset

from .dtype import Dtype
from .errors import NpuoptError, PluginError, DatasetError
from .metric import OptBaseMetric
from .node import PyNode
from .registry import (OpType, PluginType, op_register, quant_register, register_optype,
                       register_plugin)
from .tensor import PyTensor
from .graph import PyGraph, QuantizeGraph
from .config import current_config, register_field

__all__ = [
    "torch", "Dataset", "Dtype", "NpuoptError", "PluginError", "DatasetError", "OptBaseMetric",
    "PyNode", "PyTensor", "PyGraph", "QuantizeGraph", "OpType", "PluginType", "op_register",
    "quant_register", "register_optype", "register_plugin", "register_field", "current_config",
]
