"""Shared shapes of op code: NHWC<->NCHW views, explicit padding, window sizes,
per-axis broadcasting and param parsing."""
import math

import torch

from ..errors import IRError


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


def padded_nchw(x_nhwc: torch.Tensor, pads, value: float) -> torch.Tensor:
    """NHWC `x` as float32 NCHW (channels_last memory), H and W padded by (top, bottom,
    left, right) with `value`: one converting copy into a buffer whose border alone is
    filled (a float32 copy and then a pad would pass over the whole tensor three times)."""
    top, bottom, left, right = pads
    n, h, w, c = x_nhwc.shape
    buf = torch.empty((n, h + top + bottom, w + left + right, c), dtype=torch.float32, device=x_nhwc.device)
    for border in (buf[:, :top], buf[:, top + h:], buf[:, top: top + h, :left], buf[:, top: top + h, left + w:]):
        border.fill_(value)
    buf[:, top: top + h, left: left + w].copy_(x_nhwc)
    return nhwc_to_nchw(buf)


def along_axis(vec: torch.Tensor, axis: int, ndim: int) -> torch.Tensor:
    """A 1-D per-channel vector viewed so it broadcasts along `axis` of an ndim-D tensor."""
    return vec.reshape((-1,) + (1,) * (ndim - 1 - axis % ndim))


def axis_list(node, key: str, ndim: int):
    """A non-empty axes param (a list, or one int) as sorted non-negative axes."""
    axes = node.get_param(key)
    axes = [axes] if isinstance(axes, int) else list(axes)
    if not axes:
        raise IRError(f"layer '{node.name}' ({node.type}): {key} must name at least one axis")
    return sorted(int(a) % ndim for a in axes)


def optional_constant(node, key: str):
    """A constant's value, or None when the layer has none (e.g. bias-free layers)."""
    return node.constants[key].betensor if key in node.constants else None


def param_choice(node, key: str, choices, default=None):
    """An enumerated param, matched case-insensitively and returned as spelled in
    `choices`; anything else is an IRError naming the layer and the accepted values."""
    value = node.get_param(key) if default is None else node.get_param(key, default)
    spelled = {c.upper(): c for c in choices}
    if str(value).upper() not in spelled:
        raise IRError(f"layer '{node.name}' ({node.type}): unsupported {key} '{value}' "
                      f"(supported: {', '.join(choices)})")
    return spelled[str(value).upper()]
