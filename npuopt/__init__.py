"""npuopt: an offline post-training quantizer for Zhouyi/Compass NPU IR models."""
__version__ = "0.1.0"
