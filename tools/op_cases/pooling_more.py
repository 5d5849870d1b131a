"""Pooling3D (MAX, AVG: pads, ceil_mode, dilation, count_include_pad both ways) and AdaptivePool
(MAX, AVG: shrinking, overlapping and global windows)."""
from op_cases.common import Case
from op_cases.pooling import _one_sample_run

ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
ACT16 = dict(activation_bits="16")


def _pool3d(b, name, bottom, method, k, stride, pads=((0, 0),) * 3, dilation=(1, 1, 1), ceil_mode=False,
            count_include_pad=False):
    """k, stride, dilation (z, y, x); pads ((z), (y), (x)) as (begin, end)."""
    params = dict(method=method, ceil_mode=ceil_mode)
    for i, axis in enumerate("zyx"):
        params.update({f"kernel_{axis}": k[i], f"stride_{axis}": stride[i], f"dilation_{axis}": dilation[i],
                       f"pad_{axis}_begin": pads[i][0], f"pad_{axis}_end": pads[i][1]})
    if method == "AVG":
        params["count_include_pad"] = count_include_pad
    return b.layer("Pooling3D", name, [bottom], params)[0]


def _pool3d_layers(b, rng, x):
    return [_pool3d(b, "max", x[0], "MAX", (2, 3, 3), (1, 2, 2), ((0, 1), (1, 1), (1, 0)), ceil_mode=True),
            _pool3d(b, "max_dilated", x[0], "MAX", (2, 2, 3), (2, 1, 2), ((1, 0), (0, 1), (1, 1)),
                    dilation=(2, 2, 1)),
            _pool3d(b, "avg", x[0], "AVG", (3, 3, 2), (2, 2, 1), ((1, 1), (1, 0), (0, 1)), ceil_mode=True),
            _pool3d(b, "avg_incl", x[0], "AVG", (2, 3, 3), (1, 2, 2), ((1, 0), (1, 1), (1, 1)),
                    count_include_pad=True, ceil_mode=True),
            _pool3d(b, "avg_plain", x[0], "AVG", (2, 2, 2), (2, 2, 2))]


def _pool3d_dilated(b, rng, x):
    return [_pool3d(b, "avg_dilated", x[0], "AVG", (2, 2, 3), (1, 2, 1), ((1, 0), (1, 1), (0, 2)),
                    dilation=(2, 1, 2), ceil_mode=True),
            _pool3d(b, "avg_dilated_incl", x[0], "AVG", (2, 3, 2), (2, 1, 2), ((0, 1), (1, 1), (1, 0)),
                    dilation=(1, 2, 2), count_include_pad=True)]


def _pool3d_avg_many(b, rng, x):
    """Many windows of large 16-bit sums: the float32 products of the tool chain's two-stage
    division round (S * M passes 2^24), which an exact product would not reproduce."""
    return [_pool3d(b, "avg_incl", x[0], "AVG", (2, 3, 3), (1, 1, 1), ((1, 0), (1, 1), (1, 1)),
                    count_include_pad=True),
            _pool3d(b, "avg", x[0], "AVG", (3, 3, 2), (1, 1, 1), ((1, 1), (0, 1), (1, 0)))]


def _adaptive(b, name, bottom, method, size):
    return b.layer("AdaptivePool", name, [bottom], dict(method=method, output_size=list(size)))[0]


def _adaptive_layers(b, rng, x):
    return [_adaptive(b, "avg", x[0], "AVG", (3, 4)), _adaptive(b, "max", x[0], "MAX", (3, 4)),
            _adaptive(b, "avg_overlap", x[0], "AVG", (5, 11)), _adaptive(b, "max_overlap", x[0], "MAX", (4, 6)),
            _adaptive(b, "avg_global", x[0], "AVG", (1, 1))]


CASES = [
    Case("pool3d", "Pooling3D MAX and AVG with pads, ceil_mode, dilated MAX, count_include_pad both ways, "
         "asymmetric activations", [(5, 7, 8, 3)], _pool3d_layers, ASYM, calib_range=(-0.4, 1.5),
         run_range=(-0.4, 1.5)),
    Case("pool3d_act16", "Pooling3D on 16-bit activations", [(5, 7, 8, 3)], _pool3d_layers, ACT16),
    Case("pool3d_avg_act16_many", "Pooling3D AVG on 16-bit activations over many windows (the float32 "
         "rounding of the tool chain's division)", [(6, 12, 12, 8)], _pool3d_avg_many, ACT16,
         calib_range=(0.0, 1.0), run_range=(0.0, 1.0)),
    Case("pool3d_dilated", "dilated Pooling3D AVG, count_include_pad both ways, asymmetric activations",
         [(6, 7, 8, 3)], _pool3d_dilated, ASYM, calib_range=(-0.4, 1.5), run_range=(-0.4, 1.5),
         data=_one_sample_run),
    Case("adaptive_pool", "AdaptivePool MAX and AVG: shrinking, overlapping and global windows, asymmetric "
         "activations", [(7, 9, 4)], _adaptive_layers, ASYM, calib_range=(-0.4, 1.5), run_range=(-0.4, 1.5)),
    Case("adaptive_pool_act16", "AdaptivePool on 16-bit activations", [(7, 9, 4)], _adaptive_layers, ACT16),
]
