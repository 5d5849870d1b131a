"""Issue 45, acceptance 4: the recurrent model tests end to end. model_tests/kws_lstm (keyword
spotting, an LSTM over log-mel features of synthetic speech) and model_tests/crnn_ocr (text
recognition: convolutions, a bidirectional LSTM, CTC greedy decoding) are exported by
npuopt-export from their committed trained weights, calibrated on one split, quantized with
npuopt's defaults and measured on another (500 samples); each run.sh checks its floors, set
before measuring (docs/model-tests.md): the decoded sequence identical to the float model's on
at least 98% (KWS) / 95% (CRNN) of the samples, and the accuracy of both graphs at least 95% /
85%. Then OPT's reader (OptForward) runs the quantized IR on 20 of the measured samples and
computes npuopt's integers within 1 LSB (the decoded labels exactly). Slow (well under 2
CPU-minutes each); they skip where ../shared is absent."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import REPO, SHARED_DATA

# model -> (the metric in its report, the floor of its accuracy)
MODELS = {"kws_lstm": ("KeywordSpottingMetric", 0.95), "crnn_ocr": ("OcrMetric(ch,work/charset.txt,false)", 0.85)}
TARBALL = SHARED_DATA.parent / "reference" / "compass_optimizer_4.2.tar.gz"
OPT_SAMPLES = 20


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_recurrent_model_keeps_the_float_decoding(model, record_property, oracle, tmp_path):
    if not (SHARED_DATA / "imagenet_sample" / "labels.tsv").is_file() or not TARBALL.is_file():
        pytest.skip("../shared (data/imagenet_sample, the Compass Optimizer's tarball) is not beside this checkout")
    folder = REPO / "model_tests" / model
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("AIPUPLUGIN_PATH", None)
    start = time.time()
    proc = subprocess.run(["sh", str(folder / "run.sh")], capture_output=True, text=True, env=env, timeout=1200)
    record_property("seconds", round(time.time() - start, 1))
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[-1] == "PASS", proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sum(line == "PASS" for line in lines) == 2  # the report's floors and the decoded sequences'
    with open(folder / "work" / "out" / f"{model}_report.json") as f:
        metrics = json.load(f)["metrics"]
    metric, floor = MODELS[model]
    assert metrics["float"][metric] >= floor and metrics["quant"][metric] >= floor
    record_property(metric, {kind: metrics[kind][metric] for kind in ("float", "quant")})
    figures = agrees_with_opt(folder / "work", model, oracle, tmp_path)
    record_property("opt", figures)
    print(model, "OPT vs npuopt:", figures)


def agrees_with_opt(work, model: str, oracle, tmp_path) -> list:
    """OPT's OptForward of the quantized IR against npuopt's forward of it, every output;
    per output (the largest difference in LSB, the share of identical elements)."""
    import npuopt.ops  # noqa: F401
    from npuopt.ir import read_graph
    from opt_oracle import OptJob

    txt = work / "out" / f"{model}_o.txt"
    samples = np.load(work / "val.npy")[:OPT_SAMPLES]
    jobs = []
    for i in range(len(samples)):  # one sample a job: the IR's constants (CTC lengths) hold batch 1
        np.save(tmp_path / f"x{i}.npy", samples[i:i + 1])
        jobs.append(OptJob(txt, txt.with_suffix(".bin"), [tmp_path / f"x{i}.npy"], tmp_path / f"opt{i}.npz"))
    results = oracle.forward(jobs, timeout=1200)
    for result in results:
        assert not result.errors, result.errors
        assert all(result.quantized.values()), [name for name, q in result.quantized.items() if not q]
    with torch.no_grad():
        ours = read_graph(str(txt), str(txt.with_suffix(".bin"))).forward([torch.from_numpy(samples)])
    figures = []
    for index, mine in enumerate(ours):
        theirs = np.concatenate([r.outputs[index] for r in results]).astype(np.int64).reshape(mine.shape)
        diff = np.abs(mine.numpy().astype(np.int64) - theirs)
        figures.append((int(diff.max()), round(float((diff == 0).mean()), 4)))
        assert diff.max() <= (1 if index == 0 else 0), figures  # the decoded labels exactly
    return figures
