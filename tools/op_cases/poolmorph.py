"""Morphology and index pooling: Dilation and Erosion (kernels, strides, dilations, pads),
MaxPoolingWithArgMax (every flatten_dim, storage_order, ceil_mode, pads, dilation),
MaxUnpool and UpsampleByIndex (their indices from MaxPoolingWithArgMax, overlapping
windows that name one position twice, a top of another size), FractionalPool (MAX and
AVG, random and pseudo-random, overlapping, several seeds, seed 0) and Meshgrid (xy/ij,
sparse, scaled and integer inputs). Inputs are coarse (multiples of 1/8) so that windows
tie often."""
import numpy as np
import torch

from op_cases.common import Case, uniform_inputs, weights

ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")


def coarse(rng, shapes, n, value_range, run):
    return [np.round(x * 8) / 8 for x in uniform_inputs(rng, shapes, n, value_range, run)]


def _window(k, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0)):
    return dict(kernel_y=k[0], kernel_x=k[1], stride_y=stride[0], stride_x=stride[1], dilation_y=dilation[0],
                dilation_x=dilation[1], pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3])


# ---- Dilation / Erosion --------------------------------------------------------------
def _morph(b, rng, kind, name, bottom, channels, k, positive=False, **window):
    w = weights(rng, channels, k[0], k[1], 1, scale=0.3)
    w = w.abs() if positive else w
    return b.layer(kind, name, [bottom], _window(k, **window), {"weights": w})[0]


def _morphology(b, rng, x):
    """Dilation and Erosion with dilated, strided and padded kernels; one Dilation with
    non-negative weights (an unsigned output where the input is too)."""
    return [_morph(b, rng, "Dilation", "dilation", x[0], 4, (3, 2), stride=(1, 2), dilation=(2, 1), pads=(2, 2, 0, 1)),
            _morph(b, rng, "Dilation", "dilation_plain", x[0], 4, (2, 2), positive=True, stride=(2, 2)),
            _morph(b, rng, "Erosion", "erosion", x[0], 4, (3, 2), stride=(2, 1)),
            _morph(b, rng, "Erosion", "erosion_padded", x[0], 4, (2, 3), dilation=(1, 2), pads=(1, 0, 2, 2))]


# ---- MaxPoolingWithArgMax, MaxUnpool, UpsampleByIndex ------------------------------------------
def _argmax_pool(b, name, bottom, flatten, k, storage_order=0, ceil_mode=False, **window):
    params = dict(_window(k, **window), ceil_mode=ceil_mode, flatten_dim=flatten, storage_order=storage_order)
    return b.layer("MaxPoolingWithArgMax", name, [bottom], params, n_tops=2)


def _argmax_pooling(b, rng, x):
    """Indices of HW and HWC (per sample: graph outputs), row- and column-major, with
    ceil_mode, pads (a window of the padding alone) and dilation."""
    tops = _argmax_pool(b, "hw", x[0], "HW", (3, 3), stride=(2, 2), pads=(1, 1, 1, 1), ceil_mode=True)
    tops += _argmax_pool(b, "hw_col", x[0], "HW", (2, 3), storage_order=1, stride=(2, 1), pads=(0, 1, 1, 0))
    tops += _argmax_pool(b, "hwc", x[0], "HWC", (2, 2), stride=(1, 2), dilation=(2, 2), pads=(3, 0, 0, 1))
    tops += _argmax_pool(b, "hwc_col", x[0], "HWC", (3, 2), storage_order=1, stride=(2, 2), ceil_mode=True)
    return tops


def _unpooling(b, rng, x):
    """Pooled values put back by their indices: NCHW and HW into MaxUnpool, NHWC and HWC
    (overlapping windows: one position named twice) into UpsampleByIndex, HW into a top of
    a wider top (the indices of a 7-wide input into an 8-wide top: misplaced, never past the end)."""
    tops = []
    for flatten, kind, k, stride in (("NCHW", "MaxUnpool", (2, 2), (2, 2)), ("HW", "MaxUnpool", (3, 2), (2, 2)),
                                     ("NHWC", "UpsampleByIndex", (3, 3), (2, 1)),
                                     ("HWC", "UpsampleByIndex", (2, 3), (1, 2))):
        name = flatten.lower()
        values, index = _argmax_pool(b, f"pool_{name}", x[0], flatten, k, stride=stride)
        shape = [1, 6, 7, 3]
        key = "output_shape" if kind == "MaxUnpool" else "shape"
        tops += b.layer(kind, f"unpool_{name}", [values, index], {key: shape, "flatten_dim": flatten},
                        top_shapes=[shape])
    values, index = _argmax_pool(b, "pool_segnet", x[0], "HW", (2, 2), stride=(2, 2))
    tops += b.layer("UpsampleByIndex", "upsample_x2", [values, index], dict(flatten_dim="HW", shape=[1, 6, 8, 3]),
                    top_shapes=[[1, 6, 8, 3]])
    return tops


# ---- FractionalPool --------------------------------------------------------------------
def _fractional(b, name, bottom, method, out_hw, pseudo, overlap, seed):
    params = dict(method=method, pseudo=pseudo, overlap=overlap, seed=seed)
    return b.layer("FractionalPool", name, [bottom], params, n_tops=3,
                   top_shapes=[[1, out_hw[0], out_hw[1], 3], [out_hw[0] + 1], [out_hw[1] + 1]])


def _fractional_pooling(b, rng, x):
    return (_fractional(b, "max_random", x[0], "MAX", (6, 7), False, False, 87654321)
            + _fractional(b, "max_pseudo_overlap", x[0], "MAX", (4, 8), True, True, 7)
            + _fractional(b, "avg_random_overlap", x[0], "AVG", (5, 5), False, True, 12345)
            + _fractional(b, "avg_pseudo", x[0], "AVG", (7, 4), True, False, 3))


def _fractional_seed0(b, rng, x):
    """seed 0: TensorFlow's and the tool chain's fresh regions on every run; npuopt's fixed ones."""
    return (_fractional(b, "max_seed0", x[0], "MAX", (6, 7), False, False, 0)
            + _fractional(b, "avg_seed0", x[0], "AVG", (5, 8), True, True, 0))


# ---- Meshgrid ---------------------------------------------------------------------------
def _meshgrid(b, rng, x):
    """The 1-D input (its length the batch) against a float and an integer constant, xy and ij,
    dense and sparse (the input on the batch axis of the tops), and two integer constants."""
    c = b.layer("Constant", "c", [], {}, {"weights": weights(rng, 4, scale=0.8)})[0]
    i3 = b.layer("Constant", "i3", [], {}, {"weights": torch.tensor([3, -1, 7], dtype=torch.int32)})[0]
    i4 = b.layer("Constant", "i4", [], {}, {"weights": torch.tensor([0, 5, 2, 9], dtype=torch.int32)})[0]
    tops = []
    for name, pair, indexing, sparse in (("ij", [x[0], c], "ij", False), ("xy", [c, x[0]], "xy", False),
                                         ("ij_sparse", [x[0], i3], "ij", True), ("xy_sparse", [c, x[0]], "xy", True),
                                         ("ints", [i3, i4], "xy", False)):
        tops += b.layer("Meshgrid", name, pair, dict(indexing=indexing, sparse=sparse, copy=True), n_tops=2)
    return tops


CASES = [
    Case("morphology", "Dilation and Erosion with dilated, strided and padded kernels", [(7, 9, 4)], _morphology),
    Case("morphology_asym", "the same with asymmetric activations", [(7, 9, 4)], _morphology, ASYM,
         calib_range=(-0.4, 1.5), run_range=(-0.4, 1.5)),
    Case("argmax_pool", "MaxPoolingWithArgMax: HW and HWC indices, row/column-major, ceil_mode, pads, dilation",
         [(6, 7, 3)], _argmax_pooling, data=coarse),
    Case("argmax_pool_asym", "the same with asymmetric activations", [(6, 7, 3)], _argmax_pooling, ASYM,
         calib_range=(-0.4, 1.5), run_range=(-0.4, 1.5), data=coarse),
    Case("unpool", "MaxUnpool and UpsampleByIndex of MaxPoolingWithArgMax's NCHW, HW, NHWC, HWC indices",
         [(6, 7, 3)], _unpooling, data=coarse),
    Case("unpool_asym", "the same with asymmetric activations", [(6, 7, 3)], _unpooling, ASYM,
         calib_range=(-0.4, 1.5), run_range=(-0.4, 1.5), data=coarse),
    Case("fractional_pool", "FractionalPool MAX and AVG, random and pseudo-random, overlapping, seeded",
         [(9, 11, 3)], _fractional_pooling),
    Case("fractional_pool_asym", "the same with asymmetric activations", [(9, 11, 3)], _fractional_pooling, ASYM,
         calib_range=(-0.4, 1.5), run_range=(-0.4, 1.5)),
    Case("fractional_pool_seed0", "FractionalPool with seed 0 (npuopt's fixed regions)", [(9, 11, 3)],
         _fractional_seed0),
    Case("meshgrid", "Meshgrid xy/ij, dense and sparse, of the input and constants, and of integers", [()],
         _meshgrid),
]
