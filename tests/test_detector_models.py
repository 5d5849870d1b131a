"""Issue 43, acceptance 3: the detector model tests end to end (model_tests/ssd_lite0: SSD
post-processing, DecodeBox + NMS; model_tests/yolo_lite0: YOLOv3-tiny post-processing, Region
x2 + RegionFuse + NMS; both float IRs written by the tool chain's parser). Each run.sh ports the
Compass Optimizer's plugins, writes the float model's detections on the 500 `val` images as box
labels, quantizes with the defaults and measures: the quantized model keeps at least 95% of the
float boxes (BoxAgreementMetric), and OPT's SSDmAP / YOLOmAP plugins run on both graphs. Slow
(about 2 CPU minutes each, both together 4.2 with OMP_NUM_THREADS=1, figures in
docs/detector-model-tests.md); they skip where ../shared is absent."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, SHARED_DATA

MODELS = {"ssd_lite0": ("BoxAgreementMetric(ssd)", "SSDmAPMetric(8)"),
          "yolo_lite0": ("BoxAgreementMetric(yolo)", "YOLOVOCmAPMetric(80)")}


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_detector_keeps_the_float_boxes(model, record_property):
    if not (SHARED_DATA / "imagenet_sample" / "labels.tsv").is_file():
        pytest.skip("../shared/data/imagenet_sample is not beside this checkout")
    folder = REPO / "model_tests" / model
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("AIPUPLUGIN_PATH", None)
    start = time.time()
    proc = subprocess.run(["sh", str(folder / "run.sh")], capture_output=True, text=True, env=env, timeout=1800)
    record_property("seconds", round(time.time() - start, 1))
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "PASS", proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(folder / "work" / "out" / f"{model}_report.json") as f:
        metrics = json.load(f)["metrics"]
    agreement, mean_ap = MODELS[model]
    # the labels are the float IR's detections: the pipeline's float forward finds them again
    # (but for boxes whose score sits on the threshold within float rounding)
    assert metrics["float"][agreement] >= 0.99
    assert metrics["quant"][agreement] >= 0.95
    assert metrics["float"][mean_ap] >= 0.99 and 0 < metrics["quant"][mean_ap] <= 1
    for name in MODELS[model]:
        record_property(name, {kind: metrics[kind][name] for kind in ("float", "quant")})
