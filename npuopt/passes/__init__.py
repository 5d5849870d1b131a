"""Graph passes. Stage 1 runs on the float graph before calibration and keeps its
float outputs: fewer layers to calibrate, and the fused forms the NPU computes."""
from .fold_batchnorm import fold_batchnorm
from .fuse_activation import fuse_activation
from .split_activation import split_activation


def run_stage1(graph) -> None:
    """Fused activations the tool chain cannot fuse split out first; then BatchNorm
    folding, so that an activation after a BatchNorm meets the convolution it can then
    fuse into."""
    split_activation(graph)
    fold_batchnorm(graph)
    fuse_activation(graph)
