"""Issue 11, acceptance 2: the Compass Optimizer's dataset and metric plugins (its plugins/
folder, ported with the documented rule only, on AIPUPLUGIN_PATH, so that its NumpyDataset,
TopKMetric, ... replace npuopt's) run end to end in `npuopt --cfg` on data generated here:
files in the format each dataset's __init__/__getitem__ reads and labels as each metric's
__call__ takes them, a model that hands its inputs (or slices of input 0) to its outputs,
calibration, quantization, the written IR, and the float and quantized forwards with the
metric, whose value must reach the report.

Every cfg runs through npuopt's command (`npuopt.cli.main`: the exit status and error line
of `npuopt --cfg`) in one subprocess that imports torch and loads the plugins once; a
subprocess per cfg would spend seconds on imports each.

Not fed here, and why:
- RandomDataset takes shapes, not files: a cfg's data path cannot feed it.
- BevFormerDataset, BevFormerStaticDataset, BEVFormerMetric: mmdet3d and nuScenes frames.
- IWSLTBLEUMetric, IWSLTBLEU2gramMetric: multi-bleu.perl with vocabulary and reference
  text files; OcrMetric: a character dictionary file; MobileDetSSDmAPMetric: anchor and
  decode-box JSON files; mIoUpointnetMetric: scene point-index files.
- Detectors' raw heads, decoded with grids, anchors and NMS fixed in each metric:
  YOLOV1tinyVOCmAPMetric, YOLOV3TfmAPMetric, YOLOV4OnnxmAPMetric, YOLOV4torchmAPMetric,
  YOLOV4tflitemAPMetric, YOLOXcocomAPMetric, FcosmAPMetric, retinanetmAP, efficientdetmAP,
  CenterNetMetric, DetrmAPMetric, MaskRcnnCOCOmAPMetric, MaskRcnnTorchmAPMetric and the
  face detectors' WiderFaceMetric, CenterFaceMetric, RetinafaceboxMetric, faceboxMetric,
  lightfaceMetric. Data could be generated for each, head by head; not done yet.
Every fed cfg runs (SphereFaceMetric, which reads samples 0 and 2 of each batch, needed
npuopt's metric check to use a whole first batch)."""
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest

from npuopt.dtype import Dtype
from npuopt.ir import write_graph
from npuopt.ir.builder import GraphBuilder

from conftest import npuopt_env, write_cfg

N = 4  # samples
IMAGE = (8, 8, 3)
IMAGE_NCHW = (IMAGE[2], IMAGE[0], IMAGE[1])

# each cfg through npuopt's command; its exit status, error line and the report's metrics
DRIVER = textwrap.dedent('''
    import contextlib, io, json, re, sys
    from npuopt.cli import main
    results = {}
    for name, cfg in json.loads(sys.argv[1]).items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(["--cfg", cfg], standalone_mode=False)
                rc = 0
            except SystemExit as e:
                rc = e.code
        errors = [l for l in err.getvalue().splitlines() if l.startswith("npuopt: error:")]
        report = re.search(r"report: (\\S+)", out.getvalue())
        metrics = json.load(open(report.group(1)))["metrics"] if report else {}
        results[name] = {"rc": rc, "error": errors[-1] if errors else "", "metrics": metrics}
    print(json.dumps(results))
''')


@dataclass
class Case:
    """One cfg: `dataset` over files that `write(folder, rng)` makes (data, label or None),
    a model taking `inputs` (per-sample shapes and dtypes), and `metric`. The model returns
    its inputs, or `outputs`: for each, an input's index (that input) or a per-sample shape
    (the next values of input 0, flattened: see packed)."""
    dataset: str
    inputs: Sequence[Tuple[Tuple[int, ...], Dtype]]
    write: Callable
    metric: str = ""
    fields: Dict[str, object] = field(default_factory=dict)
    outputs: Optional[Sequence[object]] = None
    expect: Optional[float] = None  # the metric's value on both graphs, where the data fixes it


def f32(*shape):
    return (tuple(shape), Dtype.FP32)


def save(folder: Path, name: str, value, pickled: bool = False) -> str:
    """Write `value` as `name` (.npy; an object array when pickled, a dict .npz for dicts of arrays)."""
    path = folder / name
    if isinstance(value, dict) and name.endswith(".npz"):
        np.savez(path, **value)
    elif pickled:
        np.save(path, np.array(value, dtype=object) if not isinstance(value, dict) else value, allow_pickle=True)
    else:
        np.save(path, value)
    return path.name


def images(rng, shape=IMAGE, n=N):
    return rng.uniform(0, 1, (n, *shape)).astype(np.float32)


def numpy_data(transform=lambda x: x, label=None):
    """A writer of N images (stored as `transform` of the model's layout) and `label(rng)`."""
    def write(folder, rng):
        x = images(rng)
        return save(folder, "data.npy", transform(x)), (save(folder, "label.npy", label(rng)) if label else None)
    return write


def zipped(shapes_key: bool = False):
    """Two inputs in an .npz (OPT's zipped op-test layout with its shape_<i> entries when asked),
    labels alike: the model's outputs."""
    def write(folder, rng):
        x, y = images(rng), images(rng, (5,))
        data, label = {"0": x, "1": y}, {"0": x + 0.01, "1": y}
        if shapes_key:
            data.update(shape_0=np.array([1, *IMAGE]), shape_1=np.array([1, 5]))
            label.update(shape_0=np.array([1, *IMAGE]), shape_1=np.array([1, 5]))
        return save(folder, "data.npz", data), save(folder, "label.npz", label)
    return write


def general_dict(folder, rng):
    """A list of per-sample dicts of arrays with a leading 1, for data and labels."""
    x, y = images(rng), images(rng, (5,))
    data = [{"a": x[i:i + 1], "b": y[i:i + 1]} for i in range(N)]
    return save(folder, "data.npy", data, pickled=True), save(folder, "label.npy", data, pickled=True)


def speech(frames: int, features: int, label_len: int = 6, label_features: int = 0):
    """Utterances of different lengths (an object array of [T, features]) and labels: tokens,
    or [T, label_features] frames."""
    def write(folder, rng):
        data = [rng.standard_normal((frames - 3 * i, features)).astype(np.float32) for i in range(N)]
        labels = [rng.integers(1, 20, (label_len - i, label_features) if label_features else label_len - i)
                  .astype(np.float32) for i in range(N)]
        return save(folder, "data.npy", data, pickled=True), save(folder, "label.npy", labels, pickled=True)
    return write


def llm_files(folder, rng):
    """The llm dataset's index (an object array of file stems as bytes) and per-sample .npz files <stem><i>.npz."""
    for i in range(N):
        np.savez(folder / f"sample{i}.npz", images(rng, IMAGE, 1), images(rng, (5,), 1))
    return save(folder, "data.npy", {i: b"sample" for i in range(N)}, pickled=True), None


def tusimple(folder, rng):
    """Lane heads (2 lanes x score, upper, lower, 4 polynomial coefficients) and TuSimple labels
    {i: [lanes' x at the sampled rows, the rows]}."""
    labels = {i: [rng.uniform(0, 1280, (2, 5)), np.arange(300, 700, 80)] for i in range(N)}
    return save(folder, "data.npy", images(rng, (2, 7))), save(folder, "label.npy", labels, pickled=True)


def yolo(pixels: int, v8: bool = False):
    """A writer of YOLO heads: six candidate boxes (centre x, y, width, height in pixels, an
    object score, 4 class scores; YOLOv8: no object score, channels first) around the
    labels' boxes, and COCO box labels."""
    def write(folder, rng):
        yxyx = np.concatenate([GT_BOXES, GT_BOXES[:1] + 0.2, [[0, 0, 0.1, 0.1]], GT_BOXES[1:2]])
        xywh = np.stack([(yxyx[:, 1] + yxyx[:, 3]) / 2, (yxyx[:, 0] + yxyx[:, 2]) / 2, yxyx[:, 3] - yxyx[:, 1],
                         yxyx[:, 2] - yxyx[:, 0]], 1) * pixels
        classes = np.eye(CLASSES)[[1, 1, 3, 0, 2, 3]] * 0.9
        heads = []
        for _ in range(N):
            xy = xywh + rng.uniform(-2, 2, xywh.shape)
            head = np.concatenate([xy, classes], 1) if v8 else np.concatenate([xy, np.full((6, 1), 0.9), classes], 1)
            heads.append(head.T if v8 else head)
        labels = {i: [[1, 1, 3], *GT_BOXES.T.tolist()] for i in range(N)}
        return save(folder, "data.npy", np.stack(heads).astype(np.float32)), save(folder, "label.npy", labels,
                                                                                   pickled=True)
    return write


def build_model(folder: Path, case: Case, without_batch: bool) -> Path:
    b = GraphBuilder("passthrough")
    for i, (shape, dtype) in enumerate(case.inputs):
        b.input(f"in{i}", list(shape) if without_batch else [1, *shape], dtype=dtype)
    outputs = case.outputs if case.outputs is not None else range(len(case.inputs))
    size = int(np.prod(case.inputs[0][0]))
    if any(isinstance(o, tuple) for o in outputs):
        b.layer("Reshape", "flat", ["in0"], {"shape": [1, size]})
    names, offset = [], 0
    for k, out in enumerate(outputs):
        if isinstance(out, tuple):  # the next values of input 0
            n = int(np.prod(out))
            b.layer("Slice", f"slice{k}", ["flat"], {"begin": [0, offset], "end": [1, offset + n],
                                                     "strides": [1, 1]})
            names += b.layer("Reshape", f"out{k}", [f"slice{k}"], {"shape": [1, *out]})
            offset += n
        else:
            shape = case.inputs[out][0]
            names += b.layer("Reshape", f"out{k}", [f"in{out}"],
                             {"shape": list(shape) if without_batch else [1, *shape]})
    assert offset <= size, "input 0 is too small for the outputs sliced from it"
    txt = folder / "model.txt"
    write_graph(b.build(names), str(txt))
    return txt


def packed(outputs, shape) -> np.ndarray:
    """One sample of input 0 (`shape`) whose flattened values begin with `outputs` (arrays), zeros after."""
    flat = np.concatenate([np.asarray(o, np.float32).reshape(-1) for o in outputs])
    return np.pad(flat, (0, int(np.prod(shape)) - flat.size)).reshape(shape)


# OPT's llama2 dataset: logits and present K/V (2 heads, its 2048 positions and 3 more, 4 wide),
# sliced from the embeddings input
LLAMA_PRESENT = (2, 2048 + 3, 4)
LLAMA_EMBEDDED = 6 + 2 * int(np.prod(LLAMA_PRESENT))

# mAPMetric's six detection outputs: object class count, class ids, boxes, boxes per class,
# scores, keep; as counts and ids they carry +0.25 so that int() still reads them after
# 8-bit quantization. Two classes (1 and 3) with two and one boxes near the labels' boxes.
CLASSES, BOXES = 4, 4
DETECTION = [(1,), (CLASSES,), (BOXES, 4), (CLASSES,), (BOXES,), (BOXES,)]
GT_BOXES = np.array([[0.1, 0.1, 0.5, 0.5], [0.2, 0.5, 0.6, 0.9], [0.5, 0.2, 0.9, 0.6]], np.float32)


def detection_outputs(rng):
    boxes = np.concatenate([GT_BOXES + rng.uniform(-0.03, 0.03, GT_BOXES.shape), [[0, 0, 0.1, 0.1]]])
    return [[2.25], [1.25, 3.25, 0, 0], boxes, [2.25, 1.25, 0, 0], rng.uniform(0.5, 1, BOXES), np.ones(BOXES)]


def detection_case(dataset: str, metric: str, positions: Sequence[int], total: int,
                   nchw: bool = False, store=lambda x: x, extra_inputs=()) -> Case:
    """A case whose model's `total` outputs carry mAPMetric's six at `positions` (one value
    elsewhere), sliced from an image (channels first when `nchw`; `store` turns it into the
    file's layout), with box labels {i: [class ids, ymin, xmin, ymax, xmax]} (the VOC/COCO
    datasets' format) that the predicted boxes match: mAP 1."""
    image = IMAGE_NCHW if nchw else IMAGE
    where = dict(zip(positions, DETECTION))

    def write(folder, rng):
        x = np.stack([packed([dict(zip(positions, detection_outputs(rng))).get(k, [0.0]) for k in range(total)],
                             image) for _ in range(N)])
        labels = {i: [[1, 1, 3], *GT_BOXES.T.tolist()] for i in range(N)}
        return save(folder, "data.npy", store(x)), save(folder, "label.npy", labels, pickled=True)
    return Case(dataset, [f32(*image), *extra_inputs], write, metric,
                outputs=[where.get(k, (1,)) for k in range(total)], expect=1.0)


CASES: Dict[str, Case] = {
    "NumpyDataset+TopKMetric": Case(
        "NumpyDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: rng.integers(0, 192, N)), "TopKMetric(5)"),
    "NumpyDataset+CosDistanceMetric": Case(
        "NumpyDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: images(rng)), "CosDistanceMetric"),
    "NumpyDataset+delta1Metric": Case(
        "NumpyDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: images(rng)), "delta1Metric"),
    "NumpyDataset+PsnrMetric": Case(
        "NumpyDataset", [f32(8, 8, 1)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (8, 8, 1)) * 255),
                             save(folder, "label.npy", images(rng) * 255)), "PsnrMetric", {"metric_batch_size": 1}),
    "NumpyDataset+KeywordSpottingMetric": Case(
        "NumpyDataset", [f32(12)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (12,))),
                             save(folder, "label.npy", np.eye(12, dtype=np.float32)[:N])),
        "KeywordSpottingMetric"),
    "NumpyDataset+IMDBMetric": Case(
        "NumpyDataset", [f32(2)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (2,))),
                             save(folder, "label.npy", rng.integers(0, 2, N))),
        "IMDBMetric", {"metric_batch_size": 1}),
    "NumpyDataset+ROCMetric": Case(
        "NumpyDataset", [f32(16)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (16,), 40)),
                             save(folder, "label.npy", rng.integers(0, 2, 40).astype(bool))),
        "ROCMetric"),
    "NumpyDataset+mIoUMetric": Case(
        "NumpyDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: rng.integers(0, 3, (N, 8, 8, 1))), "mIoUMetric"),
    "NumpyNHWC2NCHWDataset+mIoUNCHWMetric": Case(
        "NumpyNHWC2NCHWDataset", [f32(*IMAGE_NCHW)],
        numpy_data(label=lambda rng: rng.integers(0, 3, (N, 8, 8, 1))), "mIoUNCHWMetric"),
    "NumpyDataset+F1scoreMetric": Case(
        "NumpyDataset", [f32(8, 8, 2)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (8, 8, 2))),
                             save(folder, "label.npy", rng.integers(0, 2, (N, 8, 8, 1)))),
        "F1scoreMetric"),
    "NumpyDataset+RMSEMetric": Case(
        "NumpyDataset", [f32(8, 8)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (8, 8))),
                             save(folder, "label.npy", images(rng, (16, 16)) * 1000)),
        "RMSEMetric", {"metric_batch_size": 1}),
    "NumpyNCHW2NHWCDataset": Case(
        "NumpyNCHW2NHWCDataset", [f32(*IMAGE)],
        numpy_data(lambda x: x.transpose(0, 3, 1, 2))),
    "NUMPYNHWCRGB2BGR": Case(
        "NUMPYNHWCRGB2BGR", [f32(*IMAGE)], numpy_data()),
    "NumpyNHWCRGB2NCBGRHWDataset": Case(
        "NumpyNHWCRGB2NCBGRHWDataset", [f32(*IMAGE_NCHW)],
        numpy_data()),
    "NumpyWithDimDataset": Case(
        "NumpyWithDimDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: rng.integers(0, 192, N)), "TopKMetric"),
    "MTCNNDataset": Case(
        "MTCNNDataset", [f32(*IMAGE)], numpy_data()),
    "SphereFaceLFWDataset": Case(
        "SphereFaceLFWDataset", [f32(*IMAGE)], numpy_data()),
    "TensorFromNumpyMultiInputDataset": Case(
        "TensorFromNumpyMultiInputDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: images(rng)), "EachCosDistanceMetric"),
    "NumpyMultiInputDataset+EachCosDistanceMetric": Case(
        "NumpyMultiInputDataset",
        [f32(*IMAGE), f32(5)], zipped(), "EachCosDistanceMetric"),
    "NumpyMultiInputDataset+FlattenCosDistanceMetric": Case(
        "NumpyMultiInputDataset", [f32(*IMAGE), f32(5)], zipped(),
        "FlattenCosDistanceMetric"),
    "NumpyMultiInputDataset+MaxAbsErrorMetric": Case(
        "NumpyMultiInputDataset", [f32(*IMAGE), f32(5)], zipped(),
        "MaxAbsErrorMetric"),
    "NumpyMIMONCHWDataset": Case(
        "NumpyMIMONCHWDataset", [f32(*IMAGE_NCHW)],
        lambda folder, rng: (save(folder, "data.npz", {"0": images(rng)}), None)),
    "cgtdnnDataset": Case(
        "cgtdnnDataset", [f32(1, *IMAGE), f32(1, 5)], zipped(),
        "MaxAbsErrorMetric"),
    "NumpyMultiInputWithoutBatchDimDataset": Case(
        "NumpyMultiInputWithoutBatchDimDataset",
        [f32(*IMAGE), f32(5)], lambda folder, rng: (save(folder, "data.npz", {"a": images(rng)[0],
                                                                                "b": images(rng, (5,))[0]}), None)),
    "NumpyZippedDataset+OpTestCosDistanceMetric": Case(
        "NumpyZippedDataset",
        [f32(*IMAGE), f32(5)], zipped(shapes_key=True), "OpTestCosDistanceMetric"),
    "OpTestNumpyZippedDataset": Case(
        "OpTestNumpyZippedDataset", [f32(*IMAGE), f32(5)],
        zipped(shapes_key=True), "OpTestCosDistanceMetric"),
    "GeneralDictDataset": Case(
        "GeneralDictDataset", [f32(*IMAGE), f32(5)], general_dict,
        "FlattenCosDistanceMetric"),
    "StableDiffusionUNetDataset": Case(
        "StableDiffusionUNetDataset", [f32(4, 4, 2), f32(1), f32(3, 5)],
        lambda folder, rng: (save(folder, "data.npy", {"s": images(rng, (4, 4, 2)), "t": images(rng, (1,)),
                                                       "h": images(rng, (3, 5))}, pickled=True), None)),
    "IWSLTDataset": Case(
        "IWSLTDataset", [((10,), Dtype.INT32)],
        lambda folder, rng: (save(folder, "data.npy", rng.integers(0, 100, (N, 10)).astype(np.int32)), None)),
    "LibriSpeechDataset+WERMetric": Case(
        "LibriSpeechDataset",
        [f32(385, 6, 1), ((), Dtype.INT32)], speech(40, 6), "WERMetric"),
    "LibriSpeechNCHWDataset": Case(
        "LibriSpeechNCHWDataset", [f32(385, 6, 1), ((), Dtype.INT32)],
        speech(40, 6), "WERMetric"),
    "AiShellDataset+WERMetric": Case(
        "AiShellDataset", [f32(390, 6), ((), Dtype.INT32)], speech(40, 6),
        "WERMetric"),
    "RNNTLibriSpeechDataset+CosDistancewseqlenMetric": Case(
        "RNNTLibriSpeechDataset",
        [f32(249, 6)], speech(40, 6, label_features=6), "CosDistancewseqlenMetric"),
    "VOCNHWCDataset+mAPMetric": detection_case(
        "VOCNHWCDataset", "mAPMetric(4)", range(6), 6),
    "VOCNCHWDataset+SSDmAPMetric": detection_case(
        "VOCNCHWDataset", "SSDmAPMetric(4)",
        [2, 4, 5, 6, 7, 8], 9, nchw=True, store=lambda x: x.transpose(0, 2, 3, 1)),
    "CocoDataset+YOLOVOCmAPMetric": detection_case(
        "CocoDataset", "YOLOVOCmAPMetric(4)",
        [4, 3, 5, 6, 7, 8], 9),
    "FasterrcnnVocDataset+FasterRcnnCaffemAPMetric": detection_case(
        "FasterrcnnVocDataset",
        "FasterRcnnCaffemAPMetric(4)", [4, 3, 5, 6, 7, 8], 9, nchw=True, store=lambda x: x[:, ::-1].copy(),
        extra_inputs=[f32(3)]),
    "VOCNHWCDataset+FasterRcnnTorchmAPMetric": detection_case(
        "VOCNHWCDataset", "FasterRcnnTorchmAPMetric", [4, 3, 5, 6, 7, 8], 9),
    "VOCNHWCDataset+FasterRcnnTFmAPMetric": detection_case(
        "VOCNHWCDataset", "FasterRcnnTFmAPMetric", [6, 5, 7, 8, 9, 10], 11),
    "VOCNHWCDataset+RetinenateOnnxmAPMetric": detection_case(
        "VOCNHWCDataset", "RetinenateOnnxmAPMetric", [2, 4, 5, 6, 7, 8], 9),
    "NumpyDataset+mIoUafterargmaxMetric": Case(
        "NumpyDataset", [f32(8, 8, 1)],
        lambda folder, rng: (save(folder, "data.npy", rng.integers(0, 3, (N, 8, 8, 1)) + 0.25),
                             save(folder, "label.npy", rng.integers(0, 3, (N, 8, 8, 1)))),
        "mIoUafterargmaxMetric(3)"),
    "NumpyDataset+mIoUwithresizeMetric": Case(
        "NumpyDataset", [f32(21, 4, 4)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (21, 4, 4))),
                             save(folder, "label.npy", rng.integers(0, 21, (N, 513, 513)))),
        "mIoUwithresizeMetric"),
    "GeneralDictDataset+mIoUDilation8Metric": Case(
        "GeneralDictDataset", [f32(21, 8, 8)],
        lambda folder, rng: (save(folder, "data.npy", [{"x": images(rng, (21, 8, 8), 1)} for _ in range(N)],
                                  pickled=True),
                             save(folder, "label.npy", [{"label": rng.integers(0, 21, (500, 500, 1)),
                                                         "shape": np.array([300, 400])} for _ in range(N)],
                                  pickled=True)),
        "mIoUDilation8Metric"),
    "NumpyMultiInputDataset+LMHeadMetric": Case(
        "NumpyMultiInputDataset", [f32(3, 10)],
        lambda folder, rng: (save(folder, "data.npz", {"logits": images(rng, (3, 10))}),
                             save(folder, "label.npz", {"token": rng.integers(0, 10, N)})),
        "LMHeadMetric"),
    "CocokpDataset+cocokpMetric": Case(
        "CocokpDataset", [f32(2, 17, 2)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (2, 17, 2))),
                             save(folder, "label.npy", {i: {"area": np.array([900.0]),
                                                            "keypoints": rng.uniform(0, 30, (1, 51)),
                                                            "shape": np.array([32, 32]),
                                                            "bbox": np.array([[0.0, 0.0, 30.0, 30.0]])}
                                                        for i in range(N)}, pickled=True)),
        "cocokpMetric"),
    "MpiiDataset+PCKhMetric": Case(
        "MpiiDataset", [f32(16, 16, 4)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (16, 16, 4))),
                             save(folder, "label.npy", {"jnt_missing": np.zeros((4, N)),
                                                        "pos_gt_src": rng.uniform(0, 60, (4, 2, N)),
                                                        "headboxes_src": np.stack([np.zeros((2, N)),
                                                                                   np.full((2, N), 40.0)]),
                                                        "center": rng.uniform(20, 40, (N, 2)),
                                                        "scale": np.full(N, 0.3)}, pickled=True)),
        "PCKhMetric", outputs=[0, 0]),
    "SphereFaceLFWDataset+SphereFaceMetric": Case(
        "SphereFaceLFWDataset", [f32(6)],
        lambda folder, rng: (save(folder, "data.npy", images(rng, (6,), 40)),
                             save(folder, "label.npy", {i: [{"name1": f"a{i}"}, {"name2": f"b{i}"},
                                                            {"sameflag": i % 2}] for i in range(40)},
                                  pickled=True)),
        "SphereFaceMetric", {"metric_batch_size": 4}),
    "BaseLibriSpeechDataset": Case(
        "BaseLibriSpeechDataset", [f32(385, 6, 1), ((), Dtype.INT32)],
        speech(40, 6), "WERMetric"),
    "NumpyDataset+mIoUMetricBase": Case(
        "NumpyDataset", [f32(*IMAGE)],
        numpy_data(label=lambda rng: rng.integers(0, 3, (N, 8, 8, 1))), "mIoUMetricBase"),
    "LLama2Dataset": Case(  # takes present K/V back as history (consumer): present[0, :, 2048:, :]
        "LLama2Dataset", [f32(LLAMA_EMBEDDED), f32(6), f32(6), f32(2, 3, 4), f32(2, 3, 4)],
        lambda folder, rng: (save(folder, "data.npy", {"embedded": images(rng, (LLAMA_EMBEDDED,), 2),
                                                       "pos": images(rng, (6,), 2), "mask": images(rng, (6,), 2),
                                                       "k": images(rng, (2, 3, 4), 2), "v": images(rng, (2, 3, 4), 2)},
                                   pickled=True), None),
        outputs=[(6,), LLAMA_PRESENT, LLAMA_PRESENT]),
    "NumpyMultiInputDatasetllm": Case(
        "NumpyMultiInputDatasetllm", [f32(*IMAGE), f32(5)], llm_files),
    "widerfaceDataset": Case(
        "widerfaceDataset", [f32(*IMAGE_NCHW)],
        lambda folder, rng: (save(folder, "data.npy", images(rng)),
                             save(folder, "label.npy", {i: [[[1.0, 1.0, 5.0, 5.0]], [1], [1], [1]] for i in range(N)},
                                  pickled=True))),
    "tusimpleDataset": Case(
        "tusimpleDataset", [f32(2, 7)], tusimple),
    "tusimpleDataset+LanenetMetric": Case(
        "tusimpleDataset", [f32(2, 7)], tusimple, "LanenetMetric",
        {"metric_batch_size": 1}),
    "CocoDataset+YOLOV5onnxmAPMetric": Case(
        "CocoDataset", [f32(6, 9)], yolo(640), "YOLOV5onnxmAPMetric",
        {"metric_batch_size": 1, "activation_bits": 16}),
    "CocoDataset+YOLOV5tflitemAPMetric": Case(
        "CocoDataset", [f32(6, 9)], yolo(640), "YOLOV5tflitemAPMetric",
        {"metric_batch_size": 1, "activation_bits": 16}),
    "CocoDataset+YOLOV5cocomAPMetric": Case(
        "CocoDataset", [f32(6, 9)], yolo(640), "YOLOV5cocomAPMetric",
        {"metric_batch_size": 1, "activation_bits": 16}),
    "CocoDataset+YOLOV8onnxmAPMetric": Case(
        "CocoDataset", [f32(8, 6)], yolo(640, v8=True), "YOLOV8onnxmAPMetric",
        {"activation_bits": 16}),
    "RNNTLibriSpeechDataset+MaxAbsErrorwseqlenMetric": Case(
        "RNNTLibriSpeechDataset", [f32(249, 6)],
        speech(40, 6, label_features=6),
        "MaxAbsErrorwseqlenMetric", {"metric_batch_size": 1}),
}


OPT_DATASETS, OPT_METRICS = 36, 62  # classes OPT 4.2's plugin files register


@pytest.fixture(scope="module")
def results(ported, tmp_path_factory):
    rng = np.random.default_rng(0)
    cfgs = {}
    for name, case in CASES.items():
        folder = tmp_path_factory.mktemp("case")
        txt = build_model(folder, case, bool(case.fields.get("without_batch_dim")))
        data, label = case.write(folder, rng)
        fields = dict(graph=txt.name, bin="model.bin", dataset=case.dataset, calibration_data=data, data=data,
                      metric=case.metric, calibration_batch_size=2, metric_batch_size=2, output_dir="out")
        if label:
            fields["label"] = label
        fields.update(case.fields)
        cfgs[name] = str(write_cfg(folder / "opt.cfg", **fields))
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cfgs)], cwd=tmp_path_factory.mktemp("cwd"),
                         env=npuopt_env(ported / "plugins"), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def ran(results, kind: str) -> List[str]:
    """The OPT dataset (kind 0) or metric (kind 1) classes of the cfgs that ran."""
    names = {(case.dataset, case.metric.split("(")[0]) for name, case in CASES.items() if results[name]["rc"] == 0}
    return sorted({n[kind] for n in names if n[kind]})


@pytest.mark.shared
def test_opt_datasets_and_metrics_run(results):
    datasets, metrics = ran(results, 0), ran(results, 1)
    print(f"\nOPT plugins that ran end to end: {len(datasets)} of {OPT_DATASETS} datasets, {len(metrics)} of "
          f"{OPT_METRICS} metrics ({sum(r['rc'] == 0 for r in results.values())} of {len(CASES)} cfgs)")
    failed = {name: r["error"] for name, r in results.items() if r["rc"] != 0}
    assert not failed, "\n".join(f"{name}: {error}" for name, error in failed.items())
    for name, case in CASES.items():
        if case.metric:
            values = results[name]["metrics"]
            assert case.metric in values["float"] and case.metric in values["quant"], (name, values)
            if case.expect is not None:
                assert values["float"][case.metric] == values["quant"][case.metric] == case.expect, (name, values)
