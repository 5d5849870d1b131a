"""Issue 45, acceptance 3: the recurrent IRs as the parser writes them from ONNX, quantized.

op_tests/parser_lstm (torch's nn.LSTM, 2 layers) and op_tests/parser_gru_bi (nn.GRU,
bidirectional: GRUv1 layers and ReverseSequence), 50 steps of 10 features, 20 cells,
written by the tool chain's parser (tools/parser_cases/rnn.py). Each is quantized by
`npuopt --cfg` with the defaults (and with 16-bit activations) on 32 random sequences
(N(0, 1)); over 100 other random sequences the output's cosine to the float model's,
the mean over the sequences, is at least 0.99 (0.9999 with 16-bit activations), and OPT's reader
(OptForward) computes npuopt's integers within 1 LSB on every output element. The GRU's
IR fixes batch 1 and runs a batch one sequence at a time; its statistics are still those
of each calibration batch of 8, as OPT's (under `mean`, with each sequence's own extrema
averaged, its input and Concat clipped at 16 bits: 0.99987). At 16
bits OPT's GRU forward holds integers in float32 (test_conformance.OPT_GRU_FLOAT32): there
the check is that OPT's own forward with those float32 steps in float64 gives npuopt's
integers exactly.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, run_in_process, write_cfg

MODELS = ["parser_lstm", "parser_gru_bi"]
# setting -> (npuopt --set arguments, the floor of the mean cosine)
SETTINGS = {"defaults": ([], 0.99), "act16": (["activation_bits=16"], 0.9999),
            "act16_extrema": (["activation_bits=16", "calibration_strategy_for_activation=extrema"], 0.9999)}
CALIBRATION, SEQUENCES = 32, 100
OPT_SEQUENCES = {"parser_lstm": SEQUENCES, "parser_gru_bi": 10}  # the GRU's OPT runs one sample per job
# OPT's GRU forward with its float32 steps in float64 (the text of its module, edited as it loads)
FLOAT64_GRU = """
import contextlib, io, os, sys
import numpy as np
os.environ["AIPUOPT_SILENTLOADING"] = "1"
with contextlib.redirect_stdout(io.StringIO()):
    from AIPUBuilder.Optimizer.tools.optimizer_forward import OptForward
    import AIPUBuilder.Optimizer.ops.gruv3 as gru
    source = open(gru.__file__).read().replace(".float()", ".double()").replace("torch.float)", "torch.double)")
    exec(compile(source, gru.__file__, "exec"), gru.__dict__)
    import AIPUBuilder.Optimizer.ops.gruv1 as gru1
    exec(compile(open(gru1.__file__).read(), gru1.__file__, "exec"), gru1.__dict__)
txt, inputs, out = sys.argv[1], sys.argv[2:-1], sys.argv[-1]
arrays = {}
for i, path in enumerate(inputs):
    with contextlib.redirect_stdout(io.StringIO()):
        y = OptForward(txt, txt[:-4] + ".bin").forward([np.load(path)], transfer_to_float=False)
    arrays[f"sample{i}"] = np.asarray(y[0])
np.savez(out, **arrays)
"""


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)


@pytest.fixture(scope="module")
def sequences(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("sequences")
    rng = np.random.default_rng(45)
    files = {}
    for split, n in (("calib", CALIBRATION), ("val", SEQUENCES)):
        files[split] = folder / f"{split}.npy"
        np.save(files[split], rng.standard_normal((n, 50, 10)).astype(np.float32))
    return files


def quantize(model: str, setting: str, sequences: dict, folder: Path) -> Path:
    ir = REPO / "op_tests" / model / f"{model}.txt"
    cfg = write_cfg(folder / "opt.cfg", graph=ir, bin=ir.with_suffix(".bin"), model_name=model,
                    dataset="NumpyDataset", calibration_data=sequences["calib"], calibration_batch_size=8,
                    output_dir=folder / "out", device="cpu")
    sets = [arg for item in SETTINGS[setting][0] for arg in ("--set", item)]
    result = run_in_process("--cfg", cfg, *sets)
    assert result.exit_code == 0, result.output
    return folder / "out" / f"{model}_o.txt"


def forward(txt: Path, x: np.ndarray) -> np.ndarray:
    import npuopt.ops  # noqa: F401
    from npuopt.ir import read_graph
    graph = read_graph(str(txt), str(txt.with_suffix(".bin")))
    return graph.forward([torch.from_numpy(x)])[0].detach().numpy(), graph.output_tensors[0]


@pytest.mark.slow
@pytest.mark.parametrize("model, setting", [pytest.param(m, s, id=f"{m}-{s}") for m in MODELS for s in SETTINGS])
def test_quantized_recurrent_models(model, setting, sequences, tmp_path, oracle, record_property):
    start = time.time()
    txt = quantize(model, setting, sequences, tmp_path)
    quantized_in = time.time() - start
    val = np.load(sequences["val"])
    want, _ = forward(REPO / "op_tests" / model / f"{model}.txt", val)
    start = time.time()
    got, top = forward(txt, val)
    ran_in = time.time() - start
    cos = cosines(want, (got.astype(np.float64) + float(top.zerop)) / float(top.scale))
    figures = dict(model=model, setting=setting, cosine_min=float(cos.min()), cosine_mean=float(cos.mean()),
                   quantize_s=round(quantized_in, 1), run_100_s=round(ran_in, 2))

    n = OPT_SEQUENCES[model]
    inputs = [tmp_path / f"seq{i}.npy" for i in range(n)] if n < SEQUENCES else [sequences["val"]]
    if n < SEQUENCES:
        for i, path in enumerate(inputs):
            np.save(path, val[i:i + 1])
    theirs = opt_outputs(oracle, txt, inputs, model == "parser_gru_bi" and setting.startswith("act16"), tmp_path)
    diff = np.abs(theirs.astype(np.int64) - got[:len(theirs)].astype(np.int64))
    figures.update(opt_sequences=len(theirs), opt_max_lsb=int(diff.max()), opt_identical=float((diff == 0).mean()))
    record_property("figures", json.dumps(figures))
    print(json.dumps(figures))
    assert diff.max() <= 1, figures
    assert cos.mean() >= SETTINGS[setting][1], figures


def opt_outputs(oracle, txt: Path, inputs, float64_gru: bool, tmp_path: Path) -> np.ndarray:
    """OPT's integers on the inputs (one .npy per job), stacked: its OptForward, or at 16 bits
    for the GRU its forward with the float32 steps in float64."""
    if float64_gru:
        out = tmp_path / "opt_float64.npz"
        run = subprocess.run([sys.executable, "-c", FLOAT64_GRU, str(txt), *map(str, inputs), str(out)],
                             env=oracle._environment(), cwd=tmp_path, capture_output=True, text=True, timeout=1200)
        assert run.returncode == 0, run.stderr[-3000:]
        with np.load(out) as data:
            return np.concatenate([data[f"sample{i}"] for i in range(len(inputs))])
    from opt_oracle import OptJob
    results = oracle.forward([OptJob(txt, txt.with_suffix(".bin"), [p], tmp_path / f"opt{i}.npz")
                              for i, p in enumerate(inputs)], timeout=1200)
    for r in results:
        assert not r.errors, r.errors
    return np.concatenate([r.outputs[0] for r in results])
