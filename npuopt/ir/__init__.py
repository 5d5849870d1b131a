"""Reading and writing the Compass NPU IR (graph .txt + weights .bin)."""
from .reader import read_graph
from .writer import write_graph

__all__ = ["read_graph", "write_graph"]
