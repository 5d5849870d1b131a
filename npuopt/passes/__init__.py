"""Graph passes. Stage 1 runs on the float graph before calibration and keeps its
float outputs: fewer layers to calibrate, and the fused forms the NPU computes."""
from .fold_batchnorm import fold_batchnorm
from .fuse_activation import fuse_activation


def run_stage1(graph) -> None:
    """BatchNorm folding first, so that an activation after a BatchNorm meets the
    convolution it can then fuse into."""
    fold_batchnorm(graph)
    fuse_activation(graph)
