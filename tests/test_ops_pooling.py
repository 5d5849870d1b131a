"""Float Pooling (MAX, AVG, L1, L2 with dilation, pads, ceil_mode, count_include_pad) against
a window-by-window NumPy reference of the tool chain's rules, and the one-line errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from npuopt.errors import IRError
from test_ops_float import close, nhwc, run


def params(method, k, s, pads=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False, count_include_pad=False):
    top, bottom, left, right = pads
    return dict(method=method, kernel_y=k[0], kernel_x=k[1], stride_y=s[0], stride_x=s[1], pad_top=top,
                pad_bottom=bottom, pad_left=left, pad_right=right, dilation_y=dilation[0], dilation_x=dilation[1],
                ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def reference(x, p, out_hw):
    """NCHW x; every window tap looked up one by one: taps outside the input are padding
    (never the max, adding 0); AVG divides by kernel_y * kernel_x with count_include_pad,
    else by the taps inside the input (at least 1)."""
    n, c, h, w = x.shape
    out = np.zeros((n, c) + tuple(out_hw))
    for oy in range(out_hw[0]):
        for ox in range(out_hw[1]):
            taps = [(oy * p["stride_y"] - p["pad_top"] + i * p["dilation_y"],
                     ox * p["stride_x"] - p["pad_left"] + j * p["dilation_x"])
                    for i in range(p["kernel_y"]) for j in range(p["kernel_x"])]
            inside = [x[:, :, r, q] for r, q in taps if 0 <= r < h and 0 <= q < w]
            v = np.stack(inside, -1) if inside else np.zeros((n, c, 0))
            if p["method"] == "MAX":
                out[:, :, oy, ox] = v.max(-1)
            elif p["method"] == "AVG":
                count = len(taps) if p["count_include_pad"] else max(len(inside), 1)
                out[:, :, oy, ox] = v.sum(-1) / count
            elif p["method"] == "L1":
                out[:, :, oy, ox] = np.abs(v).sum(-1)
            else:
                out[:, :, oy, ox] = np.sqrt((v * v).sum(-1))
    return torch.from_numpy(out.astype(np.float32))


GEOMETRIES = [  # kernel, stride, pads (t, b, l, r), dilation, ceil_mode
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((2, 3), (1, 2), (1, 0, 0, 2), (1, 1), False),
    ((2, 2), (2, 1), (0, 1, 1, 1), (2, 2), True),
    ((3, 2), (1, 1), (0, 0, 0, 0), (1, 3), False),
    ((3, 3), (2, 2), (2, 0, 0, 1), (2, 1), True),
]


@pytest.mark.parametrize("method", ["MAX", "AVG", "L1", "L2"])
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("k, s, pads, dilation, ceil_mode", GEOMETRIES)
def test_pooling_against_the_window_reference(method, count_include_pad, k, s, pads, dilation, ceil_mode):
    x = torch.randn(2, 3, 9, 10)
    p = params(method, k, s, pads, dilation, ceil_mode, count_include_pad)
    got = run("Pooling", [nhwc(x)], p)
    assert got.shape[1] >= 2 and got.shape[2] >= 2
    close(got, nhwc(reference(x.numpy().astype(np.float64), p, got.shape[1:3])))


def test_norms_and_dilated_max_against_torch():
    """L2 = lp_pool2d(p=2) of the input, L1 = the window sum of |x|; dilated MAX = max_pool2d."""
    x = torch.randn(2, 3, 8, 9)
    close(run("Pooling", [nhwc(x)], params("L2", (2, 3), (2, 1))), nhwc(F.lp_pool2d(x, 2, (2, 3), (2, 1))))
    close(run("Pooling", [nhwc(x)], params("L1", (3, 3), (1, 2))),
          nhwc(F.avg_pool2d(x.abs(), 3, (1, 2), divisor_override=1)))
    close(run("Pooling", [nhwc(x)], params("MAX", (3, 2), (1, 1), dilation=(2, 3))),
          nhwc(F.max_pool2d(x, (3, 2), 1, dilation=(2, 3))))


def test_avg_ceil_overhang_counts_with_count_include_pad():
    """The tool chain divides every window by kernel_y * kernel_x with count_include_pad,
    the ceil-mode overhang included: 3x3/2 windows over ones, H = W = 5, pad 1 before,
    ceil: the windows cover 2, 3 and 2 input rows (the last one 1 overhang row), so
    [2, 3, 2] x [2, 3, 2] / 9."""
    got = run("Pooling", [torch.ones(1, 5, 5, 1)], params("AVG", (3, 3), (2, 2), (1, 0, 1, 0), ceil_mode=True,
                                                              count_include_pad=True))
    rows = torch.tensor([2.0, 3.0, 2.0])
    close(got[0, :, :, 0], rows[:, None] * rows[None, :] / 9)


@pytest.mark.parametrize("change, words", [
    (dict(method="MEDIAN"), "method"),
    (dict(stride_x=0), "stride_x must be a positive integer, got 0"),
    (dict(kernel_y=-1), "kernel_y must be a positive integer"),
    (dict(dilation_y=0), "dilation_y must be a positive integer"),
    (dict(pad_left=-1), "pad_left must be a non-negative integer"),
    (dict(kernel_x=9), "does not fit"),
])
def test_bad_params_are_one_line_errors(change, words):
    p = params("AVG", (3, 3), (1, 1))
    p.update(change)
    with pytest.raises(IRError, match="'op'") as e:
        run("Pooling", [torch.randn(1, 5, 5, 2)], p)
    assert words in str(e.value) and "\n" not in str(e.value)
