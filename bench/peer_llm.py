"""The peer side of npuopt's LLM perplexity benchmark: llmcompressor quantizes SmolLM2-135M
(loaded from the same GGUF file as npuopt's exporter) and transformers measures perplexity on
the token windows npuopt's benchmark wrote. These figures are the peer's in bench/bench_llm.py,
which runs this script as
    VENV/bin/python bench/peer_llm.py --gguf FILE.gguf --windows W.npz --scheme S[,S...] --out R.json

It runs in its own environment (it never imports npuopt): llmcompressor 0.14 requires
torch <= 2.14.0 while npuopt pins 2.14.1. Make it with
    python3.11 -m venv VENV && VENV/bin/pip install torch==2.13.0 &&
    VENV/bin/pip install llmcompressor==0.14.0.1 gguf==0.19.0
(on CPU-only machines install torch from https://download.pytorch.org/whl/cpu).

Schemes (every nn.Linear of the decoder, INCLUDING lm_head, is quantized; llmcompressor's
examples leave lm_head out, npuopt quantizes it, so here it is untied from the embedding
table, which stays float, and quantized like the other Linears):
    float         the GGUF weights dequantized to float32, nothing quantized
    rtn_w4g128    round to nearest, 4-bit asymmetric weights per group of 128 input columns
                  of each output row (float activations, weight-only); SmolLM2's 576-column
                  Linears do not divide into 128s, which compressed-tensors' `group` strategy
                  refuses, so there it is `block` [1, 128]: the same grid with a last group of
                  64 columns, as npuopt's per_block_asymmetric (`group` where all divide)
    rtn_w4g64     the same with groups of 64 (`group`: 576 and 1536 divide)
    rtn_w8ch      round to nearest, 8-bit symmetric weights per output channel, weight-only
    gptq_w4g128, gptq_w4g64, gptq_w8ch   the same formats by GPTQModifier (its defaults:
                  block size 128, dampening 0.01, static activation ordering)
    rtn_w8a8      8-bit per-channel symmetric weights and 8-bit static per-tensor asymmetric
                  activations on every Linear's input (QuantizationModifier), calibrated on
                  the calibration windows with llmcompressor's default activation observer
                  (`minmax`: a moving average of each window's min/max, constant 0.01)
    sq_gptq_w8a8  SmoothQuantModifier(smoothing_strength=0.5, Llama mappings) then GPTQ, w8a8
GPTQ and activation ranges use the first --calibration windows of the file, in order, as
they are (no re-tokenization). The model is not saved: compressed-tensors' fake quantization runs in
the forward of every quantized Linear while perplexity is measured.

Each scheme runs in a fresh child process of this script, so each record's peak_rss_mb
(ru_maxrss) is that scheme's alone; `seconds` is the oneshot call only. Perplexity is
exp(sum of next-token NLL over the windows / (windows * (tokens - 1))); `window_nll` has each
window's sum, so any subset can be recomputed.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version

import numpy as np

GROUPS = {"w4g128": 128, "w4g64": 64}
SCHEMES = ["float", "rtn_w4g128", "rtn_w4g64", "rtn_w8ch", "gptq_w4g128", "gptq_w4g64",
           "gptq_w8ch", "sq_gptq_w8a8", "rtn_w8a8"]
TOOLS = ["torch", "transformers", "llmcompressor", "compressed-tensors", "gguf"]


def load_model(gguf: str):
    """SmolLM2 in float32 on the CPU, lm_head untied from the embedding table."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                                 dtype=torch.float32).eval()
    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone(), requires_grad=False)
    model.config.update({"tie_word_embeddings": False})
    return model


def recipe(model, scheme: str):
    """llmcompressor modifiers of a scheme (targets: every Linear, none ignored)."""
    import torch
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
    method, fmt = scheme.split("_", 1)[0], scheme.rsplit("_", 1)[1]
    if fmt in GROUPS:  # compressed-tensors' `group` needs groups that divide every row;
        size = GROUPS[fmt]  # `block` [1, size] is the same grid with a last, shorter group
        divides = all(m.in_features % size == 0 for m in model.modules() if isinstance(m, torch.nn.Linear))
        shape = dict(strategy="group", group_size=size) if divides else \
            dict(strategy="block", block_structure=[1, size])
        weights = QuantizationArgs(num_bits=4, type="int", symmetric=False, **shape)
    else:
        weights = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    inputs = None
    if fmt == "w8a8":
        inputs = QuantizationArgs(num_bits=8, type="int", symmetric=False, strategy="tensor", dynamic=False)
    groups = {"group_0": QuantizationScheme(targets=["Linear"], weights=weights, input_activations=inputs)}
    modifiers = [SmoothQuantModifier(smoothing_strength=0.5)] if method == "sq" else []
    quantizer = QuantizationModifier if method == "rtn" else GPTQModifier
    return modifiers + [quantizer(config_groups=groups, ignore=[])]


def quantize(model, scheme: str, gguf: str, calibration: np.ndarray) -> float:
    """Runs llmcompressor's oneshot in memory; returns its seconds."""
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoTokenizer
    data = Dataset.from_dict({"input_ids": calibration.tolist(),
                              "attention_mask": np.ones_like(calibration).tolist()})
    # oneshot wants a processor when given data (unused: the windows are token ids already)
    # and re-reads the model's config from its folder, which for a GGUF holds no config.json
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    with tempfile.TemporaryDirectory() as folder:
        del model.config.quantization_config  # {"quant_method": "gguf"}: the weights are float now
        model.config.save_pretrained(folder)
        model.config.update({"_name_or_path": folder})
        start = time.perf_counter()
        oneshot(model=model, processor=tokenizer, dataset=data, recipe=recipe(model, scheme),
                num_calibration_samples=len(calibration), max_seq_length=calibration.shape[1],
                shuffle_calibration_samples=False)
        return time.perf_counter() - start


def check_quantized(model, scheme: str) -> None:
    """Every Linear (lm_head included) carries the scheme, and the forward really uses
    quantized weights: for w4, a Linear's effective weight (its output for the identity)
    holds at most 16 distinct values per group of each row."""
    import torch
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    bare = [n for n, m in linears if getattr(m, "quantization_scheme", None) is None]
    if bare or "lm_head" not in dict(linears):
        raise SystemExit(f"peer_llm: {scheme}: Linears left unquantized: {bare or ['lm_head missing']}")
    fmt = scheme.rsplit("_", 1)[1]
    if fmt in GROUPS:
        layer = model.model.layers[0].self_attn.q_proj
        with torch.no_grad():
            weight = layer(torch.eye(layer.in_features)).T
        groups = weight.split(GROUPS[fmt], dim=1)
        levels = max(int(((g.sort(dim=1).values.diff(dim=1) != 0).sum(dim=1) + 1).max()) for g in groups)
        if levels > 16:
            raise SystemExit(f"peer_llm: {scheme}: q_proj of layer 0 is not on a 4-bit grid ({levels} levels)")


def window_nll(model, windows: np.ndarray) -> list:
    """Each window's summed next-token NLL (float64), one window per forward."""
    import torch
    out = []
    with torch.no_grad():
        for w in torch.from_numpy(windows):
            logits = model(input_ids=w[None]).logits[0]
            out.append(torch.nn.functional.cross_entropy(logits[:-1].double(), w[1:], reduction="sum").item())
    return out


def run_scheme(args) -> dict:
    """One scheme in this process: load, quantize, evaluate."""
    import torch
    windows = np.load(args.windows)
    model = load_model(args.gguf)
    embedding = model.get_input_embeddings().weight.detach().clone()
    seconds = 0.0
    if args.scheme != "float":
        seconds = quantize(model, args.scheme, args.gguf, windows["calibration"][:args.calibration])
        check_quantized(model, args.scheme)
        if not torch.equal(model.get_input_embeddings().weight, embedding):
            raise SystemExit(f"peer_llm: {args.scheme}: the embedding table changed")
    del embedding
    scheme = getattr(model.get_output_embeddings(), "quantization_scheme", None)
    nll = window_nll(model, windows["evaluation"])
    return {"scheme": args.scheme, "perplexity": math.exp(sum(nll) / (len(nll) * (windows["evaluation"].shape[1] - 1))),
            "seconds": round(seconds, 2), "windows": len(nll), "calibration": args.calibration,
            "threads": torch.get_num_threads(), "versions": {tool: version(tool) for tool in TOOLS},
            "lm_head_scheme": scheme and scheme.model_dump(mode="json", exclude_none=True), "window_nll": nll}


def run_child(args, scheme: str) -> dict:
    """`scheme` in a fresh child process; adds the child's peak resident memory."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "record.json")
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", "--gguf", args.gguf,
                                  "--windows", args.windows, "--calibration", str(args.calibration),
                                  "--scheme", scheme, "--out", out])
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"peer_llm: scheme {scheme} failed (exit {child.returncode}); see its output above")
        with open(out) as f:
            record = json.load(f)
    record["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)  # Linux: KiB
    return record


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct GGUF file")
    p.add_argument("--windows", required=True, help=".npz with int64 'calibration' and 'evaluation' windows [n, tokens]")
    p.add_argument("--calibration", type=int, default=16, help="calibration windows used (the first N)")
    p.add_argument("--scheme", required=True, help="comma-separated: " + ", ".join(SCHEMES))
    p.add_argument("--out", required=True, help="JSON list of records, one per scheme")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for path, what in ((args.gguf, "GGUF file"), (args.windows, "windows file")):
        if not os.path.isfile(path):
            raise SystemExit(f"peer_llm: {what} '{path}' not found")
    unknown = [s for s in args.scheme.split(",") if s not in SCHEMES]
    if unknown:
        raise SystemExit(f"peer_llm: unknown scheme '{unknown[0]}'; known: {', '.join(SCHEMES)}")
    with np.load(args.windows) as w:
        if not {"calibration", "evaluation"} <= set(w.files):
            raise SystemExit(f"peer_llm: '{args.windows}' lacks the 'calibration' or 'evaluation' array")
        if w["evaluation"].ndim != 2 or w["calibration"].ndim != 2 or w["evaluation"].shape[1] < 2:
            raise SystemExit(f"peer_llm: '{args.windows}': windows must be [n, tokens] (2 tokens or more)")
        if not 0 < args.calibration <= len(w["calibration"]):
            raise SystemExit(f"peer_llm: --calibration {args.calibration}: the file has "
                             f"{len(w['calibration'])} calibration windows")
    return args


def main(argv=None):
    args = parse(argv)
    if args.child:
        record = run_scheme(args)
        with open(args.out, "w") as f:
            json.dump(record, f)
        return
    records = []
    for scheme in args.scheme.split(","):
        records.append(run_child(args, scheme))
        print(f"{scheme}: perplexity {records[-1]['perplexity']:.4f}, {records[-1]['seconds']} s, "
              f"{records[-1]['peak_rss_mb']} MB", flush=True)
        with open(args.out, "w") as f:  # written after each scheme: a later failure keeps these
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
