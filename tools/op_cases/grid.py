"""Sampling grids: GridSample (4-D and 5-D, NEAREST/BILINEAR/LINEAR, ZEROS/BORDER, with and
without align_corners; CUBIC and REFLECTION, which stay float), AffineGrid (2-D and 3-D,
with and without align_corners, feeding a GridSample), Col2Im (2-D with strides, pads and
dilations; 3-D)."""
from op_cases.common import Case

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


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("grid_sample", "GridSample 4-D (NEAREST/BILINEAR/LINEAR, ZEROS/BORDER, align_corners) and 5-D; grid "
         "points reaching out of [-1, 1]", [MAP4, GRID4, MAP5, GRID5], _grid_sample, calib_range=(-1.25, 1.25),
         run_range=(-1.25, 1.25)),
    Case("grid_sample_asym", "the same with asymmetric activations", [MAP4, GRID4, MAP5, GRID5], _grid_sample,
         ASYM, calib_range=(-1.25, 1.5), run_range=(-1.25, 1.5)),
    Case("grid_sample_cubic_reflection", "GridSample CUBIC and REFLECTION (torch's; kept in float)",
         [MAP4, GRID4], _torch_only, calib_range=(-1.5, 1.5), run_range=(-1.5, 1.5)),
]
