"""The float Resize of H and W (NHWC) to the top shape: NEAREST or BILINEAR with the
half_pixel, align_corners or asymmetric coordinate mapping (docs/ir-ops.md); its
integer forward is npuopt's former one (ops/former.py)."""
import numpy as np


def _source(out_size: int, in_size: int, mode: str) -> np.ndarray:
    """The input coordinate of every output index."""
    d = np.arange(out_size, dtype=np.float64)
    if mode == "align_corners":
        return d * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    if mode == "half_pixel":
        return (d + 0.5) * (in_size / out_size) - 0.5
    return d * (in_size / out_size)


def _resize_axis(x: np.ndarray, axis: int, out_size: int, method: str, mode: str) -> np.ndarray:
    size = x.shape[axis]
    src = _source(out_size, size, mode)
    if method == "NEAREST":  # asymmetric floors; half_pixel and align_corners round halves up
        index = np.floor(src if mode == "asymmetric" else src + 0.5).astype(np.int64)
        return np.take(x, np.clip(index, 0, size - 1), axis=axis)
    src = np.maximum(src, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    frac = (src - low).astype(np.float32).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
    a, b = np.take(x, low, axis=axis), np.take(x, high, axis=axis)
    return a + (b - a) * frac


def resize_float(layer, xs, infos):
    x = xs[0]
    top = layer.top_shapes[0]
    if x.ndim != 4 or len(top) != 4:
        raise layer.error(f"Resize takes an NHWC input and a 4-D top shape, got {list(x.shape)} and {list(top)}")
    method = str(layer.param("method")).upper()
    mode = str(layer.param("mode", "half_pixel")).lower()
    if method not in ("NEAREST", "BILINEAR") or mode not in ("half_pixel", "align_corners", "asymmetric"):
        raise layer.error(f"unsupported Resize method/mode '{method}'/'{mode}' (NEAREST, BILINEAR; "
                          f"half_pixel, align_corners, asymmetric)", "method")
    out = _resize_axis(_resize_axis(x, 1, int(top[1]), method, mode), 2, int(top[2]), method, mode)
    return [out.astype(np.float32)]


FLOAT = {"Resize": resize_float}
INT = {}  # its integer forward is npuopt's former one (ops/former.py)
