"""Window geometry of Convolution and Pooling on NHWC arrays, shared by the
float and the integer forwards so that both read the same input pixels."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def window_params(layer):
    p = layer.param
    return dict(kernel=(int(p("kernel_y")), int(p("kernel_x"))),
                stride=(int(p("stride_y", 1)), int(p("stride_x", 1))),
                dilation=(int(p("dilation_y", 1)), int(p("dilation_x", 1))),
                pads=tuple(int(p(k, 0)) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")))


def out_size(size, kernel, stride, dilation, before, after, ceil_mode=False) -> int:
    """Output length along one axis. In ceil mode the last window must start inside the
    input or its leading pad (PyTorch's and ONNX's rule, which the parser's shapes follow)."""
    span = size + before + after - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + before:
        out -= 1
    return out


def windows(x: np.ndarray, w: dict, fill, ceil_mode: bool = False, overhang_fill=None) -> np.ndarray:
    """A [N, OH, OW, KH, KW, C] array of the input pixels under every window.

    The pads hold `fill`; in ceil mode the overhang of the last windows past
    the bottom/right pad holds `overhang_fill` (default: `fill`).
    """
    (kh, kw), (sy, sx), (dy, dx) = w["kernel"], w["stride"], w["dilation"]
    top, bottom, left, right = w["pads"]
    n, h, wd, c = x.shape
    oh = out_size(h, kh, sy, dy, top, bottom, ceil_mode)
    ow = out_size(wd, kw, sx, dx, left, right, ceil_mode)
    extra_b = max(0, (oh - 1) * sy + dy * (kh - 1) + 1 - (h + top + bottom))
    extra_r = max(0, (ow - 1) * sx + dx * (kw - 1) + 1 - (wd + left + right))
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    padded = np.pad(padded, ((0, 0), (0, extra_b), (0, extra_r), (0, 0)),
                    constant_values=fill if overhang_fill is None else overhang_fill)
    view = sliding_window_view(padded, (dy * (kh - 1) + 1, dx * (kw - 1) + 1), axis=(1, 2))
    view = view[:, : (oh - 1) * sy + 1: sy, : (ow - 1) * sx + 1: sx, :, ::dy, ::dx]
    return view.transpose(0, 1, 2, 4, 5, 3)


def window_counts(h: int, wd: int, w: dict, ceil_mode: bool, include_pad: bool) -> np.ndarray:
    """[OH, OW] number of elements each AVG window divides by: the input pixels,
    plus the pads when `include_pad`; never the ceil-mode overhang."""
    ones = np.ones((1, h, wd, 1), np.int64)
    return windows(ones, w, int(include_pad), ceil_mode, overhang_fill=0).sum(axis=(3, 4, 5))[0]
