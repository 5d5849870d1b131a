"""Graph passes. Stage 1 runs on the float graph before calibration and keeps its
float outputs: fewer layers to calibrate, and the fused forms the NPU computes."""
from .fold_batchnorm import fold_batchnorm
from .fuse_activation import fuse_activation
from .merge_matmul_mul import merge_matmul_mul
from .split_activation import split_activation


def run_stage1(graph, merge_matmul_scales: bool = True) -> None:
    """Fused activations the tool chain cannot fuse split out first; then BatchNorm
    folding, so that an activation after a BatchNorm meets the convolution it can then
    fuse into; then (enable_pass_merge_matmul_mul) scalings next to MatMuls into them."""
    split_activation(graph)
    fold_batchnorm(graph)
    fuse_activation(graph)
    if merge_matmul_scales:
        merge_matmul_mul(graph)
