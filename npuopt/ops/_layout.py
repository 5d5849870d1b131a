"""Shared shapes of op code: NHWC<->NCHW views, explicit padding, window sizes."""
import math

import torch


def nhwc_to_nchw(x: torch.Tensor) -> torch.Tensor:
    """A view, not a copy: an NHWC tensor is an NCHW one in channels_last memory."""
    return x.permute(0, 3, 1, 2)


def nchw_to_nhwc(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 2, 3, 1)


def window_params(node):
    """Kernel, stride, dilation and pads of a 2-D windowed layer, as the IR names them."""
    p = node.get_param
    return dict(
        kernel=(p("kernel_y"), p("kernel_x")),
        stride=(p("stride_y", 1), p("stride_x", 1)),
        dilation=(p("dilation_y", 1), p("dilation_x", 1)),
        pads=(p("pad_top", 0), p("pad_bottom", 0), p("pad_left", 0), p("pad_right", 0)),
    )


def pooled_size(size, kernel, stride, dilation, pad_begin, pad_end, ceil_mode) -> int:
    """Output length of a window op, with PyTorch's ceil-mode rule that the last
    window must start inside the input or its leading pad."""
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def pad_nchw(x: torch.Tensor, pads, value=0.0) -> torch.Tensor:
    """Pad H and W by (top, bottom, left, right); no-op when all zero."""
    top, bottom, left, right = pads
    if not any(pads):
        return x
    return torch.nn.functional.pad(x, (left, right, top, bottom), value=value)
