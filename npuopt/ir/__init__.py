"""Reading and writing the Compass NPU IR (graph .txt + weights .bin)."""
from .compat import is_pre_quantized
from .reader import read_graph
from .writer import write_graph

__all__ = ["is_pre_quantized", "read_graph", "write_graph"]
