"""Pooling with every method the parser writes (MAX, AVG, L1, L2), dilation, ceil_mode and
count_include_pad."""
from op_cases.common import Case, uniform


def _pool(b, name, bottom, method, k, stride, pads=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False,
          count_include_pad=False):
    params = dict(method=method, kernel_x=k[1], kernel_y=k[0], stride_x=stride[1], stride_y=stride[0],
                  pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3],
                  dilation_x=dilation[1], dilation_y=dilation[0], ceil_mode=ceil_mode,
                  count_include_pad=count_include_pad)
    return b.layer("Pooling", name, [bottom], params)[0]


def _norms(b, rng, x):
    return [_pool(b, "l1", x[0], "L1", (3, 3), (2, 2), pads=(1, 1, 1, 1), ceil_mode=True),
            _pool(b, "l2", x[0], "L2", (2, 3), (1, 2), pads=(1, 0, 0, 1)),
            _pool(b, "l2_dilated", x[0], "L2", (2, 2), (2, 1), dilation=(2, 2), pads=(0, 1, 1, 1), ceil_mode=True),
            _pool(b, "l1_dilated", x[0], "L1", (3, 2), (1, 1), dilation=(1, 3))]


def _dilated(b, rng, x):
    return [_pool(b, "max_dilated", x[0], "MAX", (3, 3), (2, 2), pads=(1, 1, 1, 1), dilation=(2, 2), ceil_mode=True),
            _pool(b, "avg_dilated", x[0], "AVG", (2, 3), (1, 2), pads=(1, 0, 2, 1), dilation=(2, 1)),
            _pool(b, "avg_dilated_ceil", x[0], "AVG", (3, 3), (2, 2), pads=(0, 1, 1, 0), dilation=(2, 2),
                  ceil_mode=True),
            _pool(b, "avg_dilated_incl", x[0], "AVG", (3, 2), (2, 1), pads=(1, 1, 0, 1), dilation=(2, 2),
                  count_include_pad=True, ceil_mode=True),
            _pool(b, "avg_incl_ceil", x[0], "AVG", (3, 3), (2, 2), pads=(1, 0, 1, 0), count_include_pad=True,
                  ceil_mode=True)]


def _one_sample_run(rng, shapes, n, value_range, run):
    """The run feeds one sample: the tool chain's dilated AVG pooling sizes its sums by the
    IR's batch (1) and fails on larger batches."""
    return [uniform(rng, value_range, (1 if run else n,) + s) for s in shapes]


CASES = [
    Case("pool_l1_l2", "L1 and L2 pooling with pads, ceil_mode and dilation, asymmetric activations", [(7, 8, 4)],
         _norms, dict(quantize_method_for_activation="per_tensor_asymmetric"), calib_range=(-0.3, 2.0),
         run_range=(-0.3, 2.0)),
    Case("pool_l1_l2_act16", "L1 and L2 pooling on 16-bit activations", [(7, 8, 4)], _norms,
         dict(activation_bits="16")),
    Case("pool_dilated", "MAX and AVG pooling with dilation (count_include_pad both ways, ceil_mode)",
         [(9, 8, 4)], _dilated, data=_one_sample_run),
]
