"""Detection post-processing: Region (YOLO heads: even and odd grids, grid_compensate both
ways, many anchors and classes), RegionFuse of two and three Regions."""
from op_cases.common import Case

ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
ACT16 = dict(activation_bits="16")
YOLO2_ANCHORS = [1.3221, 1.73145, 3.19275, 4.00944, 5.05587, 8.09892, 9.47112, 4.84053, 11.2364, 10.0071]


def region(b, name, bottom, shape, anchors, thresh=0.3, compensate=True, max_boxes=5000, **extra):
    gh, gw, a, channels = shape
    params = dict(grid_width=gw, grid_height=gh, box_per_grid=a, max_box_num=max_boxes, class_num=channels - 5,
                  obj_thresh=thresh, anchors=anchors[:2 * a], grid_compensate=compensate, **extra)
    return b.layer("Region", name, [bottom], params, n_tops=5)


def _region_even(b, rng, x):
    """A 4x4 grid (grid_compensate moves the centres), 5 anchors, 4 classes."""
    return region(b, "region", x[0], (4, 4, 5, 9), YOLO2_ANCHORS)


def _region_odd(b, rng, x):
    """A 5x3 grid (no compensation on an odd grid), 3 anchors, 6 classes, threshold 0.2."""
    return region(b, "region", x[0], (5, 3, 3, 11), YOLO2_ANCHORS[4:], thresh=0.2)


def _region_plain(b, rng, x):
    """An even 6x4 grid with grid_compensate off, 2 anchors, 20 classes."""
    return region(b, "region", x[0], (6, 4, 2, 25), [0.6, 0.9, 2.5, 1.7], thresh=0.1, compensate=False)


CASES = [
    Case("region_even", "Region on an even 4x4 grid (compensated centres), 5 anchors, 4 classes", [(4, 4, 5, 9)],
         _region_even, calib_range=(-3.0, 3.0), run_range=(-3.0, 3.0)),
    Case("region_odd", "Region on an odd 5x3 grid, 3 anchors, 6 classes, asymmetric activations", [(5, 3, 3, 11)],
         _region_odd, ASYM, calib_range=(-3.0, 2.5), run_range=(-3.0, 2.5)),
    Case("region_act16", "Region on 16-bit activations, grid_compensate off, 2 anchors, 20 classes",
         [(6, 4, 2, 25)], _region_plain, ACT16, calib_range=(-4.0, 4.0), run_range=(-4.0, 4.0)),
]
