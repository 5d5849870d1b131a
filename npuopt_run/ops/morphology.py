"""Dilation and Erosion: grey-scale morphology of an NHWC input with one structuring
element per channel, `weights` [C, kh, kw, 1], kernel/stride/dilation/pads as Pooling's.

Float: Dilation = max over the window of x + w[i, j]; Erosion = min over the window of
x - w[kh-1-i, kw-1-j] (the element reflected); padding never wins (-inf / +inf).
Integer: A = q + zp_in, W the stored weights, `scale_value` = [M_out, M_x, M_w],
`shift_value` s: X = max (min) over the window of A * M_x + W * M_w (W reflected and
negated for Erosion), out = clamp(round_half_even(X * M_out * 2^-s) - zp_out); a window
of padding alone gives the top's lowest (Dilation) or highest (Erosion) integer."""
import numpy as np

from ..intmath import check_range, requantize
from .geometry import windows
from .pool import checked_window
from .stage import shifted, stored_ints, top_bounds


def _element(layer, x, erosion: bool):
    """The [kh, kw, C] structuring element (reflected and negated for Erosion) and the window."""
    w = checked_window(layer)
    kernel = layer.const("weights")
    if x.ndim != 4 or kernel.shape != (x.shape[3],) + tuple(w["kernel"]) + (1,):
        raise layer.error(f"weights {list(kernel.shape)} do not fit a {w['kernel'][0]}x{w['kernel'][1]} kernel "
                          f"over an input of shape {list(x.shape)}", "weights_shape")
    element = np.moveaxis(kernel[..., 0], 0, -1)
    return (-element[::-1, ::-1] if erosion else element), w


def _float(erosion: bool):
    def forward(layer, xs, infos):
        element, w = _element(layer, xs[0], erosion)
        fill = np.inf if erosion else -np.inf
        v = windows(xs[0], w, fill) + element.astype(np.float64)
        return [v.min(axis=(3, 4)) if erosion else v.max(axis=(3, 4))]
    forward.__doc__ = f"{'Erosion' if erosion else 'Dilation'} in float."
    return forward


def _int(erosion: bool):
    def forward(layer, xs, infos):
        element, w = _element(layer, xs[0], erosion)
        scales = stored_ints(layer, "scale", "scale_value")
        if np.ndim(scales) != 1 or len(scales) != 3:
            raise layer.error(f"scale_value must be [M_out, M_x, M_w], got {np.asarray(scales).tolist()}",
                              "scale_value")
        m_out, m_x, m_w = (int(v) for v in scales)
        shift = stored_ints(layer, "shift", "shift_value")
        a = shifted(xs[0], infos[0], layer)
        check_range(layer, (int(np.abs(a).max(initial=0)) * m_x + int(np.abs(element).max(initial=0)) * m_w) * m_out,
                    "the scaled window values")
        inside = windows(np.ones(xs[0].shape, np.int64), w, 0).astype(bool)
        v = windows(a, w, 0) * m_x + element.astype(np.int64) * m_w
        zp, lo, hi = top_bounds(layer)
        if erosion:
            best, empty_value = np.where(inside, v, np.iinfo(np.int64).max).min(axis=(3, 4)), hi
        else:
            best, empty_value = np.where(inside, v, np.iinfo(np.int64).min).max(axis=(3, 4)), lo
        empty = ~inside.any(axis=(3, 4))
        out = requantize(layer, np.where(empty, 0, best), m_out, shift, zp, lo, hi)
        return [np.where(empty, empty_value, out)]
    forward.__doc__ = f"{'Erosion' if erosion else 'Dilation'} in integers."
    return forward


FLOAT = {"Dilation": _float(False), "Erosion": _float(True)}
INT = {"Dilation": _int(False), "Erosion": _int(True)}
