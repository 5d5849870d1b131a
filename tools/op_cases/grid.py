"""Sampling grids: GridSample (4-D and 5-D, NEAREST/BILINEAR/LINEAR, ZEROS/BORDER, with and
without align_corners; CUBIC and REFLECTION, which stay float), AffineGrid (2-D and 3-D,
with and without align_corners, feeding a GridSample), Col2Im (2-D with strides, pads and
dilations; 3-D)."""
import numpy as np
import torch

from op_cases.common import Case, uniform

MAP4, GRID4 = (6, 7, 3), (4, 5, 2)
MAP5, GRID5 = (3, 4, 5, 2), (2, 3, 4, 3)
GRID_LAYERS_4D = [("bilinear_zeros", dict(method="BILINEAR", padding_mode="ZEROS", align_corners=False)),
                  ("bilinear_border_align", dict(method="BILINEAR", padding_mode="BORDER", align_corners=True)),
                  ("nearest_zeros_align", dict(method="NEAREST", padding_mode="ZEROS", align_corners=True)),
                  ("nearest_border", dict(method="NEAREST", padding_mode="BORDER", align_corners=False)),
                  ("linear_zeros", dict(method="LINEAR", padding_mode="ZEROS", align_corners=False))]
GRID_LAYERS_5D = [("trilinear_zeros", dict(method="BILINEAR", padding_mode="ZEROS", align_corners=False)),
                  ("trilinear_border_align", dict(method="BILINEAR", padding_mode="BORDER", align_corners=True)),
                  ("nearest_5d_zeros", dict(method="NEAREST", padding_mode="ZEROS", align_corners=False))]
TORCH_ONLY = [("bicubic_zeros", dict(method="CUBIC", padding_mode="ZEROS", align_corners=False)),
              ("bicubic_border_align", dict(method="CUBIC", padding_mode="BORDER", align_corners=True)),
              ("bilinear_reflection", dict(method="BILINEAR", padding_mode="REFLECTION", align_corners=False)),
              ("nearest_reflection_align", dict(method="NEAREST", padding_mode="REFLECTION", align_corners=True)),
              ("bicubic_reflection", dict(method="CUBIC", padding_mode="REFLECTION", align_corners=False))]


def _grid_sample(b, rng, x):
    """Every 4-D variant on (map, grid) 0/1 and every 5-D one on 2/3."""
    return [b.layer("GridSample", name, [x[0], x[1]], p)[0] for name, p in GRID_LAYERS_4D] + \
        [b.layer("GridSample", name, [x[2], x[3]], p)[0] for name, p in GRID_LAYERS_5D]


def _torch_only(b, rng, x):
    return [b.layer("GridSample", name, [x[0], x[1]], p)[0] for name, p in TORCH_ONLY]


AFFINE_MAP = (6, 8, 3)


def _theta_data(rng, shapes, n, value_range, run):
    """One sample (the tool chain's float AffineGrid sizes its output by the IR's batch):
    thetas near the identity (rotated, scaled, shifted), and a map for the sampler."""
    lo, hi = value_range
    t2 = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]) + rng.uniform(-0.3, 0.3, (2, 3))
    t3 = np.concatenate([np.eye(3), np.zeros((3, 1))], 1) + rng.uniform(-0.3, 0.3, (3, 4))
    return [t2[None].astype(np.float32) * hi, t3[None].astype(np.float32) * hi,
            uniform(rng, value_range, (1,) + AFFINE_MAP)]


def _affine(b, rng, x):
    """2-D grids (align_corners false and true), one sampled by a GridSample, and a 3-D grid."""
    size2 = b.layer("Constant", "size2", [], {}, {"weights": torch.tensor([1, 5, 7, 3], dtype=torch.int32)})[0]
    size3 = b.layer("Constant", "size3", [], {}, {"weights": torch.tensor([1, 3, 4, 5, 2], dtype=torch.int32)})[0]
    grid = b.layer("AffineGrid", "grid", [x[0], size2], dict(align_corners=False))[0]
    grid_align = b.layer("AffineGrid", "grid_align", [x[0], size2], dict(align_corners=True))[0]
    grid3 = b.layer("AffineGrid", "grid_3d", [x[1], size3], dict(align_corners=False))[0]
    sampled = b.layer("GridSample", "sampled", [x[2], grid], dict(method="BILINEAR", padding_mode="ZEROS",
                                                                   align_corners=False))[0]
    return [grid, grid_align, grid3, sampled]


COL2IM_2D = dict(kernel_y=2, kernel_x=3, stride_y=1, stride_x=2, dilation_y=2, dilation_x=1, pad_top=1,
                 pad_bottom=0, pad_left=0, pad_right=1)     # image 5 x 7: blocks 4 x 3
COL2IM_3D = dict(kernel_z=2, kernel_y=2, kernel_x=2, stride_z=1, stride_y=1, stride_x=1, dilation_z=1,
                 dilation_y=1, dilation_x=1, pad_z_begin=0, pad_z_end=0, pad_y_begin=0, pad_y_end=0,
                 pad_x_begin=0, pad_x_end=0)                # image 3 x 4 x 3: blocks 2 x 3 x 2


def _col2im(b, rng, x):
    """2-D with strides, dilations and pads; plain 2-D; 3-D (stride 1, no pads: the tool chain's
    N-D loop computes only those right)."""
    def shape(name, values):
        return b.layer("Constant", name, [], {}, {"weights": torch.tensor(values, dtype=torch.int32)})[0]
    plain = dict(kernel_y=2, kernel_x=2, stride_y=1, stride_x=1, dilation_y=1, dilation_x=1, pad_top=0,
                 pad_bottom=0, pad_left=0, pad_right=0)
    return [b.layer("Col2Im", "fold", [x[0], shape("image", [5, 7]), shape("block", [2, 3])], COL2IM_2D)[0],
            b.layer("Col2Im", "fold_plain", [x[1], shape("image_plain", [4, 4]), shape("block_plain", [2, 2])],
                    plain)[0],
            b.layer("Col2Im", "fold_3d", [x[2], shape("image_3d", [3, 4, 3]), shape("block_3d", [2, 2, 2])],
                    COL2IM_3D)[0]]


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("grid_sample", "GridSample 4-D (NEAREST/BILINEAR/LINEAR, ZEROS/BORDER, align_corners) and 5-D; grid "
         "points reaching out of [-1, 1]", [MAP4, GRID4, MAP5, GRID5], _grid_sample, calib_range=(-1.25, 1.25),
         run_range=(-1.25, 1.25)),
    Case("grid_sample_asym", "the same with asymmetric activations", [MAP4, GRID4, MAP5, GRID5], _grid_sample,
         ASYM, calib_range=(-1.25, 1.5), run_range=(-1.25, 1.5)),
    Case("grid_sample_cubic_reflection", "GridSample CUBIC and REFLECTION (torch's; kept in float)",
         [MAP4, GRID4], _torch_only, calib_range=(-1.5, 1.5), run_range=(-1.5, 1.5)),
    Case("affine_grid", "AffineGrid 2-D (align_corners false/true) feeding a GridSample, and 3-D",
         [(2, 3), (3, 4), AFFINE_MAP], _affine, data=_theta_data),
    Case("affine_grid_asym", "the same with asymmetric activations (theta with a zero point stays float)",
         [(2, 3), (3, 4), AFFINE_MAP], _affine, ASYM, data=_theta_data, calib_range=(-0.5, 1.5),
         run_range=(-0.5, 1.5)),
    Case("col2im", "Col2Im 2-D (strides, dilations, pads), plain 2-D, 3-D", [(12, 12), (8, 9), (16, 12)], _col2im),
    Case("col2im_asym", "the same with asymmetric activations (an input with a zero point stays float)",
         [(12, 12), (8, 9), (16, 12)], _col2im, ASYM, calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5)),
]
