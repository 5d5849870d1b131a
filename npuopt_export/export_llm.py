"""npuopt-export for decoders: the prefill and the decode-step IRs of a Llama (llama.py).

    npuopt-export npuopt_export.gguf_llama:smollm2_135m --llm --max-length 128 -o out/smollm2

writes out/smollm2_prefill.txt/.bin (token ids [1, seq] in; logits [1, seq, vocab] and each
layer's key and value [1, kv_heads, seq, head_dim] out) and out/smollm2_decode.txt/.bin (one
token id and the caches [1, kv_heads, past, head_dim] in; logits [1, 1, vocab] and the caches
with the new position out). Both IRs are dynamic, as the parser writes them with dynamic axes:
the header's `dynamic_symbols` (`seq`, `past`), every layer's `ds_output_shape`, a Slice's
`ds_begin`/`ds_end`/`ds_strides`; their shapes are the largest (seq = max_length, past =
max_length - 1). With `--length N` they are static: N tokens, or a cache of N positions.

Each graph is traced once by torch.export with the length symbolic (so the rotary tables and
the causal mask are Slices of constants up to the length, not constants of one length); the
IR is built at three lengths from that trace, and every shape and param that differs
between them is written as the affine expression of the length that gives all three.
"""
import math
import os
from typing import Dict, List, Sequence, Tuple

import click
import torch
from torch.export import Dim

from npuopt.errors import ExportError
from npuopt.ir import write_graph
from npuopt.passes import run_stage1

from .export import MIN_COSINE, compare
from .export_decoder_ops import HANDLERS as DECODER_HANDLERS
from .export_graph import Exporter
from .export_ops import HANDLERS
from .llama import Decode, Llama, Prefill

STEPS = ("prefill", "decode")
SYMBOL = {"prefill": "seq", "decode": "past"}
SLICE_PARAMS = ("begin", "end", "strides")  # params with a ds_ form (the parser's Slice)


def step_inputs(model: Llama, step: str, length: int, seed: int = 0) -> List[torch.Tensor]:
    """Token ids (and for a decode step its caches) of one example: `length` prompt tokens,
    or one token after a cache of `length` positions."""
    c = model.config
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, c.vocab, (1, length if step == "prefill" else 1), generator=generator)
    if step == "prefill":
        return [ids]
    caches = [torch.randn(1, c.kv_heads, length, c.head_dim, generator=generator) for _ in range(2 * c.layers)]
    return [ids, *caches]


def max_length_of(model: Llama, step: str) -> int:
    """The longest prefill, or cache before a step (its step makes one more position)."""
    return model.config.max_length - (step == "decode")


def trace(model: Llama, step: str) -> torch.export.ExportedProgram:
    module = Prefill(model) if step == "prefill" else Decode(model)
    most = max_length_of(model, step)
    length = Dim(SYMBOL[step], min=1, max=most)
    examples = step_inputs(model, step, most)
    if step == "prefill":
        shapes = ({1: length},)
    else:
        shapes = {"ids": None, "caches": ({2: length},) * (len(examples) - 1)}
    try:
        return torch.export.export(module, tuple(examples), dynamic_shapes=shapes).run_decompositions({})
    except Exception as e:
        raise ExportError(f"torch.export cannot trace the {step} step with a dynamic length: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


def build(program, model: Llama, name: str, step: str, length: int):
    """The float IR of the traced step at one length (stage-1 passes run)."""
    exporter = Exporter(program, model, name, {**HANDLERS, **DECODER_HANDLERS})
    graph = exporter.run(step_inputs(model, step, length), nhwc_inputs=False, plain_layout=True)
    run_stage1(graph, merge_matmul_scales=False)
    return graph


def affine(values: Sequence[int], lengths: Sequence[int], symbol: str, where: str):
    """The value itself where it is the same at every length, else the expression
    `a*symbol+b` (the parser's printing) that gives it at each."""
    if len(set(values)) == 1:
        return values[0]
    (l0, v0), (l1, v1) = (lengths[0], values[0]), (lengths[1], values[1])
    a, rest = divmod(v1 - v0, l1 - l0)
    b = v0 - a * l0
    if rest or any(v != a * n + b for v, n in zip(values, lengths)):
        raise ExportError(f"internal: {where} takes {list(values)} at lengths {list(lengths)}, no affine "
                          f"expression of the length")
    term = symbol if a == 1 else f"({a}*{symbol})"
    return term if b == 0 else f"({term}{'+' if b > 0 else '-'}{abs(b)})"


def add_dynamic_fields(graphs, lengths: Sequence[int], symbol: str):
    """graphs[0] with the ds_ fields that give every other graph at its length: the same
    layers, constants and params, but for shapes and a Slice's begin/end/strides."""
    graph = graphs[0]
    for nodes in zip(*(g.nodes for g in graphs)):
        node = nodes[0]
        if any((n.name, n.type, list(n.params)) != (node.name, node.type, list(node.params)) for n in nodes):
            raise ExportError(f"internal: layer '{node.name}' differs between lengths {list(lengths)}")
        for cname, c in node.constants.items():
            if any(not torch.equal(n.constants[cname].betensor, c.betensor) for n in nodes[1:]):
                raise ExportError(f"internal: constant '{cname}' of layer '{node.name}' depends on the length")
        for key in list(node.params):
            values = [n.params[key] for n in nodes]
            if all(v == values[0] for v in values):
                continue
            if key not in SLICE_PARAMS + ("shape",):
                raise ExportError(f"internal: param '{key}' of layer '{node.name}' depends on the length")
            if key in SLICE_PARAMS:
                node.params["ds_" + key] = [affine(vs, lengths, symbol, f"{key} of '{node.name}'")
                                            for vs in zip(*values)]
        node.params["ds_output_shape"] = [
            [affine([int(d) for d in ds], lengths, symbol, f"top '{t.name}'") for ds in
             zip(*(n.outputs[i].ir_shape for n in nodes))] for i, t in enumerate(node.outputs)]
    graph.header["dynamic_symbols"] = [symbol]
    return graph


def check(model: Llama, graph, step: str, length: int) -> List[Tuple[float, float]]:
    """(cosine, max abs error) of each output of the IR's float forward against PyTorch's
    at one length; below MIN_COSINE the export is wrong."""
    inputs = step_inputs(model, step, length, seed=1)
    module = Prefill(model) if step == "prefill" else Decode(model)
    with torch.no_grad():
        wants = module(*inputs)
    got = graph.forward([inputs[0].to(torch.int32), *inputs[1:]])
    checks = [compare(g, w) for g, w in zip(got, wants)]
    for out, (cosine, _) in zip(graph.output_tensors, checks):
        if not cosine >= MIN_COSINE:
            raise ExportError(f"internal: the {step} IR's output '{out.name}' disagrees with PyTorch at length "
                              f"{length} (cosine {cosine:.6f})")
    return checks


def export_step(model: Llama, step: str, name: str, length: int = None):
    """The float IR of one step, dynamic up to the longest length (or static at `length`),
    and {length: checks} of its forward against PyTorch's (the longest and a short one)."""
    most = max_length_of(model, step)
    if length is not None and not 1 <= length <= most:
        raise ExportError(f"--length {length}: the {step} step takes 1 to {most} with --max-length "
                          f"{model.config.max_length}")
    program = trace(model, step)
    if length is not None:
        graph = build(program, model, name, step, length)
        return graph, {length: check(model, graph, step, length)}
    if most < 4:
        raise ExportError(f"--max-length {model.config.max_length}: a dynamic {step} IR needs at least 4 positions")
    lengths = [most, most - 1, max(2, most // 2)]
    graph = add_dynamic_fields([build(program, model, name, step, n) for n in lengths], lengths, SYMBOL[step])
    short = max(1, math.isqrt(most))
    return graph, {n: check(model, graph, step, n) for n in (most, short)}


def export_decoder(model: Llama, prefix_name: str, length: int = None) -> Dict[str, tuple]:
    """step -> (graph, checks) for the prefill and the decode step."""
    model.eval()
    return {step: export_step(model, step, f"{prefix_name}_{step}", length) for step in STEPS}


def write_decoder(model, out_prefix: str, outputs, max_length: int = None, length: int = None) -> None:
    """npuopt-export --llm: OUT_PREFIX_prefill and OUT_PREFIX_decode (.txt/.bin, each put in
    place by `outputs` once all are written) and a line per IR and per checked length."""
    if not isinstance(model, Llama):
        raise ExportError(f"--llm: the model is a {type(model).__name__}, not an npuopt_export.llama.Llama")
    if max_length:
        model.set_max_length(max_length)
    name = os.path.basename(out_prefix)
    graphs = export_decoder(model, name, length)
    with outputs:
        for step, (graph, _) in graphs.items():
            prefix = f"{out_prefix}_{step}"
            write_graph(graph, outputs.stage("-o", prefix + ".txt"), outputs.stage("-o", prefix + ".bin"),
                        bin_name=f"{name}_{step}.bin")
    for step, (graph, checks) in graphs.items():
        kind = f"{SYMBOL[step]} up to {max_length_of(model, step)}" if length is None else f"length {length}"
        click.echo(f"wrote {out_prefix}_{step}.txt and .bin: {len(graph.nodes)} layers, {kind}")
        for n, figures in checks.items():
            worst = min(cos for cos, _ in figures)
            error = max(err for _, err in figures)
            click.echo(f"  {SYMBOL[step]}={n}: outputs vs PyTorch on random inputs: worst cosine {worst:.7f}, "
                       f"max abs error {error:.3g}")
