"""RoiAlign, PyramidROIAlign, CropAndResize, GridSample, AffineGrid, Col2Im: float forwards
against torch/torchvision where those compute the same op, real-sized ROI layers in a
fraction of a second, impossible params as one-line errors (in the forward and through
`npuopt --cfg`, which writes nothing). Bit-exactness against the tool chain is
tests/test_conformance.py's job (op tests roialign*, pyramid_roi*, crop_and_resize*,
grid_sample*, affine_grid*, col2im*, parser_*)."""
import shutil
import time
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import torchvision

from conftest import REPO, assert_one_line_error, edit_ir, run_in_process
from npuopt.errors import IRError
from tests.test_ops_float import close, nhwc, run


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def boxes(count, height, width, batch=1, inside=True):
    """torchvision's [count, 5] boxes (batch, x1, y1, x2, y2) in pixels."""
    x1, y1 = torch.rand(count) * width * 0.5, torch.rand(count) * height * 0.5
    x2 = x1 + 1 + torch.rand(count) * (width * 0.5 - 2 if inside else width)
    y2 = y1 + 1 + torch.rand(count) * (height * 0.5 - 2 if inside else height)
    return torch.stack([torch.randint(0, batch, (count,)).float(), x1, y1, x2, y2], 1)


def as_ir_rois(b):
    """(batch, y1, x1, y2, x2), as the parser writes RoiAlign's boxes."""
    return b[:, [0, 2, 1, 4, 3]]


# ---- float -------------------------------------------------------------------------------
@pytest.mark.parametrize("sampling", [2, 0])
def test_roi_align_output_half_pixel_is_torchvisions(sampling):
    x, b = torch.randn(2, 5, 16, 20), boxes(30, 32, 40, batch=2, inside=False)
    params = dict(pooled_shape=[3, 4], spatial_scale_value=[0.5, 0.5], sample=[sampling, sampling], method="AVG",
                  coordinate_transformation_mode="OUTPUT_HALF_PIXEL")
    want = torchvision.ops.roi_align(x, b, (3, 4), 0.5, sampling if sampling else -1, aligned=False)
    close(run("RoiAlign", [nhwc(x), as_ir_rois(b)], params), nhwc(want))


def test_roi_align_half_pixel_inside_the_map_is_torchvisions():
    """The tool chain's loop equals torchvision's aligned roi_align where no sample lies left
    of or above the map."""
    x = torch.randn(1, 3, 12, 12)
    b = torch.tensor([[0, 2.0, 3.0, 15.0, 20.0], [0, 5.0, 1.5, 9.0, 22.0]])
    params = dict(pooled_shape=[4, 3], spatial_scale_value=[0.5, 0.5], sample=[2, 2], method="AVG",
                  coordinate_transformation_mode="HALF_PIXEL")
    want = torchvision.ops.roi_align(x, b, (4, 3), 0.5, 2, aligned=True)
    close(run("RoiAlign", [nhwc(x), as_ir_rois(b)], params), nhwc(want))


@pytest.mark.parametrize("method,padding,align", [("BILINEAR", "ZEROS", False), ("BILINEAR", "BORDER", True),
                                                  ("NEAREST", "ZEROS", True), ("CUBIC", "REFLECTION", False),
                                                  ("BILINEAR", "REFLECTION", True), ("CUBIC", "BORDER", False)])
def test_grid_sample_is_torchs(method, padding, align):
    x, grid = torch.randn(2, 3, 6, 7), torch.rand(2, 4, 5, 2) * 2.6 - 1.3
    got = run("GridSample", [nhwc(x), grid], dict(method=method, padding_mode=padding, align_corners=align))
    mode = {"BILINEAR": "bilinear", "NEAREST": "nearest", "CUBIC": "bicubic"}[method]
    close(got, nhwc(F.grid_sample(x, grid, mode=mode, padding_mode=padding.lower(), align_corners=align)))


def test_grid_sample_5d_is_torchs():
    x, grid = torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 4, 3) * 2.4 - 1.2
    got = run("GridSample", [x.permute(0, 2, 3, 4, 1), grid], dict(method="BILINEAR", padding_mode="ZEROS",
                                                                   align_corners=False))
    close(got, F.grid_sample(x, grid, align_corners=False).permute(0, 2, 3, 4, 1))


@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_is_torchs(align):
    theta = torch.randn(2, 2, 3)
    got = run("AffineGrid", [theta, torch.tensor([2, 5, 6, 3], dtype=torch.int32)], dict(align_corners=align))
    close(got, F.affine_grid(theta, [2, 3, 5, 6], align_corners=align))


def test_col2im_is_torchs_fold():
    x = torch.randn(2, 3 * 6, 4 * 3)
    params = dict(kernel_y=2, kernel_x=3, stride_y=1, stride_x=2, dilation_y=2, dilation_x=1, pad_top=1,
                  pad_bottom=1, pad_left=1, pad_right=1)
    got = run("Col2Im", [x, torch.tensor([4, 6], dtype=torch.int32), torch.tensor([2, 3], dtype=torch.int32)],
              params)
    close(got, F.fold(x, (4, 6), (2, 3), dilation=(2, 1), padding=(1, 1), stride=(1, 2)))


def test_crop_and_resize_of_the_whole_map_is_align_corners_bilinear():
    """A box [0, 0, 1, 1] crops the whole map: bilinear with aligned corners."""
    x = torch.randn(1, 3, 7, 9)
    got = run("CropAndResize", [nhwc(x), torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.zeros(1, dtype=torch.int32)],
              dict(method="BILINEAR", crop_size=[4, 5], extrapolation_value=0.0))
    close(got, nhwc(F.interpolate(x, (4, 5), mode="bilinear", align_corners=True)))


# ---- real sizes -----------------------------------------------------------------------------
def test_roi_align_on_hundreds_of_boxes_takes_a_fraction_of_a_second():
    """300 boxes, 7x7 bins of 2x2 samples on a 64-channel map: float and integer forms."""
    from npuopt.ir.builder import GraphBuilder
    from tests.test_quantize_ops import quantize
    x, b = torch.randn(1, 50, 50, 64), as_ir_rois(boxes(300, 400, 400))
    g = GraphBuilder("t")
    names = [g.input("x", list(x.shape), x), g.layer("Constant", "rois", [], {}, {"weights": b})[0]]
    params = dict(pooled_shape=[7, 7], spatial_scale_value=[0.125, 0.125], sample=[2, 2], method="AVG",
                  coordinate_transformation_mode="HALF_PIXEL")
    graph = g.build(g.layer("RoiAlign", "op", names, params))
    start = time.perf_counter()
    graph.forward([x])
    assert time.perf_counter() - start < 3.0
    qg = quantize(graph, [(x,)])
    assert qg.node("op").quantized
    start = time.perf_counter()
    qg.forward([x])
    assert time.perf_counter() - start < 5.0


# ---- errors ----------------------------------------------------------------------------------
MAP, ROIS = torch.randn(1, 6, 7, 3), torch.tensor([[0.0, 1.0, 1.0, 5.0, 6.0]])
ROI = dict(pooled_shape=[2, 2], spatial_scale_value=[1.0, 1.0], sample=[2, 2], method="AVG",
           coordinate_transformation_mode="HALF_PIXEL")
PYRAMID = dict(resize_height=2, resize_width=2, image_height=64, image_width=64, proposal_normalized=False,
               spatial_scale_value=[0.25, 0.125, 0.0625, 0.03125], sample=[2, 2])
GRID = dict(method="BILINEAR", padding_mode="ZEROS", align_corners=False)
COL2IM = dict(kernel_y=2, kernel_x=2, stride_y=1, stride_x=1)


def _pyramid_inputs():
    return [torch.tensor([[[1.0, 1.0, 30.0, 30.0]]])] + [torch.randn(1, s, s, 3) for s in (16, 8, 4, 2)]


def _crop_inputs(index=0):
    return [MAP, torch.tensor([[0.1, 0.1, 0.9, 0.8]]), torch.tensor([index], dtype=torch.int32)]


def _col2im_inputs(blocks=9):
    return [torch.randn(1, 8, blocks), torch.tensor([4, 4], dtype=torch.int32), torch.tensor([2, 2],
                                                                                       dtype=torch.int32)]


BAD = [
    ("RoiAlign", [MAP, ROIS], dict(ROI, method="SUM"), "'op' \\(RoiAlign\\): unsupported method 'SUM'"),
    ("RoiAlign", [MAP, ROIS], dict(ROI, pooled_shape=[0, 2]), "pooled_shape \\[0, 2\\] must be two positive"),
    ("RoiAlign", [MAP, ROIS], dict(ROI, spatial_scale_value=[1.0]), "spatial_scale_value \\[1.0\\] must be 2"),
    ("RoiAlign", [MAP, ROIS], dict(ROI, sample=[2, 1.5]), "sample \\[2, 1.5\\] must be two integers"),
    ("RoiAlign", [MAP, ROIS], dict(ROI, coordinate_transformation_mode="ALIGNED"),
     "unsupported coordinate_transformation_mode 'ALIGNED'"),
    ("RoiAlign", [MAP, ROIS[:, :4]], ROI, "input 1 must hold boxes \\[R, 5\\]"),
    ("PyramidROIAlign", _pyramid_inputs(), dict(PYRAMID, resize_width=0), "resize_width 0 must be a positive"),
    ("PyramidROIAlign", _pyramid_inputs()[:4], PYRAMID, "takes 5 inputs, got 4"),
    ("PyramidROIAlign", _pyramid_inputs(), dict(PYRAMID, proposal_normalized=True, resize_height=1),
     "at least 2 with proposal_normalized=true"),
    ("PyramidROIAlign", _pyramid_inputs(), dict(PYRAMID, spatial_scale_value=[0.25, 0.125]),
     "spatial_scale_value \\[0.25, 0.125\\] must be 4 positive numbers"),
    ("CropAndResize", _crop_inputs(), dict(method="AREA", crop_size=[2, 2]), "unsupported method 'AREA'"),
    ("CropAndResize", _crop_inputs(), dict(method="BILINEAR", crop_size=[2]), "crop_size \\[2\\] must be two"),
    ("CropAndResize", _crop_inputs(3), dict(method="BILINEAR", crop_size=[2, 2]),
     "box_indices \\[3\\] fall outside the map's batch of 1"),
    ("GridSample", [MAP, torch.rand(1, 2, 2, 2)], dict(GRID, padding_mode="WRAP"), "unsupported padding_mode 'WRAP'"),
    ("GridSample", [MAP, torch.rand(1, 2, 2, 3)], GRID, "needs a map \\[N, \\(D,\\) H, W, C\\] and a grid"),
    ("GridSample", [MAP, torch.rand(1, 2, 2, 2)], dict(GRID, align_corners="yes"), "align_corners 'yes' must be"),
    ("AffineGrid", [torch.randn(1, 2, 3), torch.tensor([1, 5, 3], dtype=torch.int32)], {},
     "size \\[1, 5, 3\\] must be 4 values"),
    ("AffineGrid", [torch.randn(1, 2, 4), torch.tensor([1, 5, 6, 3], dtype=torch.int32)], {},
     "theta must be \\[N, 2, 3\\] or \\[N, 3, 4\\]"),
    ("Col2Im", _col2im_inputs(8), COL2IM, "input 0 \\[1, 8, 8\\] must be \\[N, C \\* 4, 9\\]"),
    ("Col2Im", _col2im_inputs(), dict(COL2IM, stride_x=0), "stride_x 0 must be a positive integer"),
    ("Col2Im", _col2im_inputs(), dict(COL2IM, kernel_x=3), "kernel_x 3 differs from the block shape input's 2"),
]


@pytest.mark.parametrize("optype,inputs,params,message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_impossible_params_are_one_line_errors(optype, inputs, params, message):
    with pytest.raises(IRError, match=message) as info:
        run(optype, inputs, params)
    assert "\n" not in str(info.value)


CLI_BAD = [  # (op test, layer, key, value, fragments of the error line)
    ("roialign", "avg_half_pixel", "method", "SUM", ["layer 'avg_half_pixel' (RoiAlign)", "method 'SUM'"]),
    ("pyramid_roi", "pixels", "resize_height", "0", ["layer 'pixels' (PyramidROIAlign)", "resize_height 0"]),
    ("crop_and_resize", "bilinear", "crop_size", "[4]", ["layer 'bilinear' (CropAndResize)", "crop_size [4]"]),
    ("grid_sample", "bilinear_zeros", "padding_mode", "WRAP", ["layer 'bilinear_zeros' (GridSample)", "'WRAP'"]),
    ("affine_grid", "grid", "align_corners", "maybe", ["layer 'grid' (AffineGrid)", "align_corners 'maybe'"]),
    ("col2im", "fold", "stride_x", "3", ["layer 'fold' (Col2Im)", "input 0 [1, 12, 12] must be"]),
]


@pytest.mark.parametrize("case,layer,key,value,fragments", CLI_BAD, ids=[f"{c[0]}-{c[2]}" for c in CLI_BAD])
def test_an_impossible_param_stops_npuopt_with_one_line_and_nothing_written(tmp_path, monkeypatch, case, layer,
                                                                            key, value, fragments):
    """`npuopt --cfg` (in this process) on a copy of the op test with one param made impossible."""
    folder = tmp_path / case
    shutil.copytree(REPO / "op_tests" / case, folder, ignore=shutil.ignore_patterns("work"))
    edit_ir(folder / f"{case}.txt", layer, key, value)
    before = sorted(p.name for p in folder.iterdir())
    monkeypatch.chdir(folder)
    result = run_in_process("--cfg", "opt.cfg")
    assert_one_line_error(SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr),
                          *fragments, only_line=False)
    assert sorted(p.name for p in folder.iterdir()) == before
