"""BoxAgreementMetric (plugins/aipubt_opt_metric_box_agreement.py): the share of label boxes
that the detections of the post-processing layers' outputs find (same class, IoU >= iou),
on outputs laid out as DecodeBox + NMS (ssd) and Region/RegionFuse + NMS (yolo) write them."""
import pytest
import torch

from npuopt.errors import DatasetError, PluginError
from npuopt.plugins import load_plugins
from npuopt.registry import PLUGINS, PluginType


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    load_plugins()


def metric(*args):
    return PLUGINS[PluginType.Metric].get("BoxAgreementMetric")(*args)


SLOTS = 8  # boxes and class groups per sample in the fake outputs


def outputs(layout: str, samples):
    """Fake post-processing outputs: `samples` is one list of (class, [boxes]) groups per sample,
    written where the layout's layers put them; the other outputs hold noise."""
    at_total, at_labels, at_boxes, at_counts = {"ssd": (2, 4, 5, 6), "yolo": (4, 3, 5, 6)}[layout]
    n = len(samples)
    pred = [torch.rand(n, SLOTS) for _ in range(9)]
    pred[at_boxes] = torch.rand(n, SLOTS, 4)  # unused slots hold boxes too: only the counted ones are read
    pred[at_total] = torch.zeros(n, 1)
    for i, groups in enumerate(samples):
        pred[at_total][i, 0] = len(groups)
        row = 0
        pred[at_labels][i], pred[at_counts][i] = 99, 7  # past `total`: ignored
        for g, (c, boxes) in enumerate(groups):
            pred[at_labels][i, g] = c
            pred[at_counts][i, g] = len(boxes)
            for b in boxes:
                pred[at_boxes][i, row] = torch.tensor(b)
                row += 1
    return pred


def labels(samples):
    """Labels as the VOC/COCO datasets collate them: per sample, classes and [n, 4] boxes."""
    return {"image_name": [torch.tensor(i) for i in range(len(samples))],
            "label_index": [torch.tensor([c for c, _ in s], dtype=torch.int64) for s in samples],
            "bbox": [torch.tensor([b for _, b in s], dtype=torch.float64).reshape(-1, 4) for s in samples]}


BOX = [0.2, 0.2, 0.6, 0.6]
SHIFTED_IOU_06 = [0.2, 0.25, 0.6, 0.65]  # IoU with BOX: 0.35 * 0.4 / (0.16 + 0.16 - 0.14) = 0.778
HALF = [0.2, 0.4, 0.6, 0.8]  # IoU with BOX: 0.08 / 0.24 = 1/3


@pytest.mark.parametrize("layout", ["ssd", "yolo"])
def test_share_of_label_boxes_found(layout):
    detections = [[(3, [BOX, [0.0, 0.0, 0.1, 0.1]]), (5, [HALF])],
                  [(1, [SHIFTED_IOU_06])]]
    wanted = [[(3, BOX),             # found: the same box, same class
               (5, BOX),             # not found: class 5's box overlaps by 1/3
               (4, BOX)],            # not found: no class-4 detection
              [(1, BOX),             # found: IoU 0.78
               (3, BOX)]]            # not found: sample 1 has no class 3
    m = metric(layout)
    m(outputs(layout, detections), labels(wanted))
    assert (m.found, m.total) == (2, 5)
    assert m.compute() == pytest.approx(0.4)
    assert "2 of 5" in m.report()


def test_the_iou_argument_sets_the_bar():
    detections = [[(2, [HALF])]]
    wanted = [[(2, BOX)]]
    for iou, share in [("0.5", 0.0), ("0.3", 1.0)]:
        m = metric("ssd", iou)
        m(outputs("ssd", detections), labels(wanted))
        assert m.compute() == share


def test_the_layout_decides_which_outputs_are_read():
    detections = [[(3, [BOX])]]
    m = metric("yolo")
    m(outputs("ssd", detections), labels([[(3, BOX)]]))  # ssd's outputs read as yolo's: noise, no class 3
    assert m.compute() == 0.0


def test_batches_accumulate_and_reset_clears():
    m = metric()
    m(outputs("ssd", [[(1, [BOX])]]), labels([[(1, BOX)]]))
    m(outputs("ssd", [[]]), labels([[(1, BOX), (2, HALF)]]))
    assert (m.found, m.total) == (1, 3)
    m.reset()
    assert m.compute() == 0.0  # no label box: no agreement to claim


@pytest.mark.parametrize("args, match", [(("retina",), "layout must be one of ssd, yolo"),
                                         (("ssd", "x"), "iou must be a number"),
                                         (("ssd", "0"), r"iou must be in \(0, 1\]")])
def test_bad_arguments(args, match):
    with pytest.raises(PluginError, match=match):
        metric(*args)


@pytest.mark.parametrize("target", [None, torch.full((2,), -1), {"label_index": [1, 2]}])
def test_labels_that_are_not_boxes(target):
    with pytest.raises(DatasetError, match="expected box labels"):
        metric()(outputs("ssd", [[], []]), target)


def test_label_classes_and_boxes_must_pair():
    target = {"label_index": [torch.tensor([1, 2])], "bbox": [torch.tensor([BOX])]}
    with pytest.raises(DatasetError, match="2 label classes and 1 label boxes"):
        metric()(outputs("ssd", [[]]), target)


def test_too_few_outputs():
    with pytest.raises(DatasetError, match="the model has 4 outputs"):
        metric("yolo")([torch.zeros(1, 4)] * 4, labels([[(1, BOX)]]))
