"""Signal, colour, layout and BEV layers: OverlapAdd, RgbToYuv, YuvToRgb, Preprocess,
BatchToSpaceND, QueryRebatch and SlotUpdate.

The colour conversions read uint8 pixels (as the parser's gamut_preprocess makes the
graph input). Every case but OverlapAdd's and Preprocess's runs one sample: the tool
chain's forward of those layers takes the batch of the IR (BatchToSpaceND refuses another,
the BEV layers fill a top of the IR's batch, the colour conversions reshape to the batch
size its OptForward sets, 1)."""
import numpy as np
import torch

from op_cases.common import Case

# the parser's BT709 coefficients (float, shift 0) and the tool chain's integer ones (RgbToYuv: shift 10,
# YuvToRgb: shift 8)
BT709_RGB_TO_YUV = [0, 0, 0, 0, 128, 128, 0.2126, 0.7152, 0.0722, -0.114572, -0.385428, 0.5, 0.5, -0.454153,
                    -0.045847]
BT709_YUV_TO_RGB = [0, 128, 128, 0, 0, 0, 1.0, 0.0, 1.5748, 1.0, -0.187324, -0.468124, 1.0, 1.8556, 0.0]
INT_RGB_TO_YUV = [0, 0, 0, 0, 128, 128, 218, 732, 74, -118, -395, 512, 512, -465, -47]
INT_YUV_TO_RGB = [0, 128, 128, 0, 0, 0, 256, 0, 403, 256, -48, -120, 256, 475, 0]


def pixels(rng, shapes, n, value_range, run):
    """Pixel values over the whole 0..255 range (the cases give the inputs' dtype, uint8)."""
    return [rng.integers(0, 256, (n,) + s).astype(np.uint8) for s in shapes]


def _overlap_add(b, rng, x):
    """Frames [N, 3, 4, 6] added at steps of 2, 1 (the default) and 6 (no overlap); of a RELU
    too (an unsigned input)."""
    tops = b.layer("OverlapAdd", "step2", [x[0]], dict(frame_step=2))
    tops += b.layer("OverlapAdd", "step_default", [x[0]], {})
    tops += b.layer("OverlapAdd", "step_length", [x[0]], dict(frame_step=6))
    relu = b.layer("Activation", "relu", [x[0]], dict(method="RELU"))
    return tops + b.layer("OverlapAdd", "step3_unsigned", relu, dict(frame_step=3))


def _colour_params(coefficients, shift, conversion="SELF"):
    return dict(format="I420", bits=8, conversion=conversion, coefficient=list(coefficients),
                coefficient_dtype="int16" if shift else "float32", coefficient_shift=shift)


def _rgb_to_yuv(b, rng, x):
    """RgbToYuv with the integer coefficients (shift 10), the parser's BT709 ones (shift 0),
    and, on an odd-sized image, input offsets."""
    offsets = [16, -8, 4] + INT_RGB_TO_YUV[3:]
    return (b.layer("RgbToYuv", "int_coefficients", [x[0]], _colour_params(INT_RGB_TO_YUV, 10))
            + b.layer("RgbToYuv", "bt709", [x[0]], _colour_params(BT709_RGB_TO_YUV, 0, "BT709"))
            + b.layer("RgbToYuv", "odd_offsets", [x[1]], _colour_params(offsets, 10)))


def _yuv_to_rgb(b, rng, x):
    """YuvToRgb of a 4x6 image with the integer coefficients (shift 8) and the parser's BT709
    ones (shift 0), and of a 5x6 image (odd height) with output offsets."""
    offsets = INT_YUV_TO_RGB[:3] + [10, -5, 3] + INT_YUV_TO_RGB[6:]
    return (b.layer("YuvToRgb", "int_coefficients", [x[0]], _colour_params(INT_YUV_TO_RGB, 8),
                    top_shapes=[[1, 4, 6, 3]])
            + b.layer("YuvToRgb", "bt709", [x[0]], _colour_params(BT709_YUV_TO_RGB, 0, "BT709"),
                      top_shapes=[[1, 4, 6, 3]])
            + b.layer("YuvToRgb", "odd_offsets", [x[1]], _colour_params(offsets, 8), top_shapes=[[1, 5, 6, 3]]))


def _preprocess(b, rng, x):
    """A Preprocess after the two inputs, a layer after each of its tops."""
    a, c = b.layer("Preprocess", "preprocess", x, {}, n_tops=2)
    return b.layer("Activation", "relu", [a], dict(method="RELU")) + \
        b.layer("Activation", "sigmoid", [c], dict(method="SIGMOID"))


def _batch_to_space_nd(b, rng, x):
    """The input [1, 4, 2, 3, 2, 3] as a batch of 4 [4, 2, 3, 2, 3]; blocks of 2x1x2 with crops
    on every axis, and of 1x2x2 without."""
    batch = b.layer("Reshape", "as_batch", [x[0]], dict(shape=[4, 2, 3, 2, 3]))
    cropped = b.layer("BatchToSpaceND", "cropped", batch, dict(block_size=[2, 1, 2], crops=[[0, 1], [1, 0], [0, 2]]))
    plain = b.layer("BatchToSpaceND", "plain", batch, dict(block_size=[1, 2, 2], crops=[[0, 0], [0, 0], [0, 0]]))
    return cropped + plain


def _ints(b, name, values):
    return b.layer("Constant", name, [], {}, {"weights": torch.tensor(values, dtype=torch.int32)})[0]


def _bev(b, rng, x):
    """Queries [1, 6, 4] rebatched for 3 cameras (lists of 3, 2 and 4 queries; a negative index
    counts from the end), and camera queries [1, 3, 4, 4] put back into 6 slots (a slot that
    two cameras reach, one that none does)."""
    lists = [_ints(b, "camera0", [0, 2, 5]), _ints(b, "camera1", [1, -3]), _ints(b, "camera2", [4, 0, 1, 2])]
    rebatched = b.layer("QueryRebatch", "rebatch", [x[0]] + lists, {}, top_shapes=[[1, 3, 4, 4]])
    slots = [_ints(b, "slots0", [5, 0, 2, 1]), _ints(b, "slots1", [2]), _ints(b, "slots2", [3, 0, 4])]
    updated = b.layer("SlotUpdate", "update", [x[1]] + slots, {}, top_shapes=[[1, 6, 4]])
    round_trip = b.layer("SlotUpdate", "round_trip", rebatched + lists, {}, top_shapes=[[1, 6, 4]])
    return rebatched + updated + round_trip


CASES = [
    Case("overlap_add", "OverlapAdd at steps 2, 1 (default) and 6, and of a RELU", [(3, 4, 6)], _overlap_add),
    Case("rgb_to_yuv", "RgbToYuv with integer and BT709 float coefficients, input offsets on an odd-sized image",
         [(4, 6, 3), (3, 5, 3)], _rgb_to_yuv, data=pixels, dtypes=("uint8", "uint8"), run_samples=1),
    Case("yuv_to_rgb", "YuvToRgb with integer and BT709 float coefficients, output offsets on an odd height",
         [(36,), (42,)], _yuv_to_rgb, data=pixels, dtypes=("uint8", "uint8"), run_samples=1),
    Case("preprocess", "Preprocess of two inputs (the parser's copy of each)", [(4, 5), (3,)], _preprocess),
    Case("batch_to_space_nd", "BatchToSpaceND of a 5-D batch of 4, with and without crops",
         [(4, 2, 3, 2, 3)], _batch_to_space_nd, run_samples=1),
    Case("bev_rebatch_slots", "QueryRebatch for three cameras, SlotUpdate back into six slots",
         [(6, 4), (3, 4, 4)], _bev, run_samples=1),
]
