"""npuopt-export: a PyTorch model to a float IR (OUT_PREFIX.txt + OUT_PREFIX.bin).

    npuopt-export torchvision:resnet18 --input-shape 1,3,224,224 -o out/resnet18
    npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o out/lite0

The model is traced with torch.export and each aten op of the traced graph is
mapped to IR layers (npuopt_export/export_ops.py) following docs/ir-ops.md; 4-D
activations are NHWC in the IR. The stage-1 passes then fold BatchNorms and fuse
activations, and the IR is checked against PyTorch on the example input before
it is written.
"""
import importlib
import math
import os
import pickle
import re
import sys
import traceback
import warnings
from collections import Counter
from typing import List, Optional, Sequence, Tuple

import click
import torch

from npuopt.errors import ExportError, NpuoptError
from npuopt.ir import write_graph
from npuopt.ir.reader import MAX_ELEMENTS_LOG2
from npuopt.outputs import RunOutputs
from npuopt.passes import run_stage1

from .export_graph import Exporter, canonical_perm
from .export_ops import HANDLERS
from .export_rnn import HANDLERS as RNN_HANDLERS

MIN_COSINE = 0.9999  # below this the exported IR is wrong, not just rounded differently
EXAMPLE_COPIES = 4  # float32 copies of the example inputs the export holds at once, at most


def load_model(spec: str, weights: str = None, seed: int = 0) -> torch.nn.Module:
    """`torchvision:NAME` (random weights from `seed`) or `module.path:callable`
    (importable from the working directory), in eval mode, with `weights` loaded."""
    source, sep, name = spec.partition(":")
    if not sep or not source or not name:
        raise ExportError(f"model '{spec}': expected torchvision:NAME or module.path:callable")
    torch.manual_seed(seed)
    if source == "torchvision":
        import torchvision
        names = torchvision.models.list_models(module=torchvision.models)
        if name not in names:
            import difflib
            close = difflib.get_close_matches(name, names, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ExportError(f"model '{spec}': torchvision has no classification model '{name}'{hint}")
        model = torchvision.models.get_model(name, weights=None)
    else:
        model = _call_factory(spec, source, name)
    if weights:
        _load_weights(model, weights)
    return model.eval()


def _call_factory(spec: str, module_path: str, name: str) -> torch.nn.Module:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_path), name)
    except (ImportError, AttributeError) as e:
        raise ExportError(f"model '{spec}': cannot import it: {_first_line(e)}") from e
    except (Exception, SystemExit) as e:  # the module itself fails on import, or ends the process
        raise ExportError(f"model '{spec}': importing {module_path} failed: {_raised(e)}") from e
    if not callable(factory):
        raise ExportError(f"model '{spec}': {name} is a {type(factory).__name__}, not a callable")
    try:
        model = factory()
    except (Exception, SystemExit) as e:
        raise ExportError(f"model '{spec}': calling {name}() failed: {_raised(e)}") from e
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"model '{spec}': the callable returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _load_weights(model: torch.nn.Module, path: str) -> None:
    """Load a state dict (or a checkpoint dict holding one under `state_dict`/`model`)
    with torch.load(weights_only=True); keys and shapes must fit the model exactly."""
    where = f"--weights '{path}'"
    if not os.path.isfile(path):
        raise ExportError(f"{where}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ExportError(f"{where}: not a file torch.load can read with weights_only=True "
                          f"(a state dict saved by torch.save): UnpicklingError") from e
    except Exception as e:
        raise ExportError(f"{where}: torch.load cannot read it: {type(e).__name__}: {_first_line(e)}") from e
    if isinstance(state, dict):
        for key in ("state_dict", "model"):
            if isinstance(state.get(key), dict):
                state = state[key]
                break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ExportError(f"{where}: holds a {type(state).__name__}, not a state dict of tensors")
    own = model.state_dict()
    if state and own and all(k.startswith("module.") for k in state) and not any(k.startswith("module.") for k in own):
        state = {k[len("module."):]: v for k, v in state.items()}  # saved from DataParallel
    problems = []
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    for what, keys in (("missing", missing), ("unexpected", unexpected)):
        if keys:
            shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
            problems.append(f"{len(keys)} {what} key{'s' if len(keys) > 1 else ''} ({shown})")
    mismatched = [k for k in own if k in state and state[k].shape != own[k].shape]
    if mismatched:
        k = mismatched[0]
        problems.append(f"{len(mismatched)} shape mismatch{'es' if len(mismatched) > 1 else ''} "
                        f"({k}: file {list(state[k].shape)}, model {list(own[k].shape)}"
                        f"{', ...' if len(mismatched) > 1 else ''})")
    if problems:
        raise ExportError(f"{where}: does not fit {type(model).__name__}: {'; '.join(problems)}")
    model.load_state_dict(state)


def _raised(e: BaseException) -> str:
    """What the user's code raised: its type and first line, or the sys.exit it called
    with its code and where (a SystemExit would end npuopt-export without a word)."""
    if not isinstance(e, SystemExit):
        return f"{type(e).__name__}: {_first_line(e)}"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")]
    where = f" in {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"it called sys.exit({e.code!r}){where}"


def _first_line(e: Exception) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def to_ir_layout(value: torch.Tensor) -> torch.Tensor:
    """A PyTorch tensor as the IR holds a graph input or output (4-D: NHWC)."""
    return value.permute(canonical_perm(value.dim())).contiguous()


def cosine(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Cosine similarity along the last axis; unlike F.cosine_similarity no epsilon,
    so that the tiny outputs of randomly initialized deep models compare fairly."""
    got, want = got.double(), want.double()
    norms = got.norm(dim=-1) * want.norm(dim=-1)
    dots = (got * want).sum(dim=-1)
    both_zero = (got.norm(dim=-1) == want.norm(dim=-1)).double()
    return torch.where(norms > 0, dots / norms, both_zero)


def compare(got: torch.Tensor, want: torch.Tensor) -> Tuple[float, float]:
    """Cosine similarity and max absolute error of two tensors."""
    got, want = got.double().flatten(), want.double().flatten()
    return cosine(got, want).item(), (got - want).abs().max().item()


def export_model(model: torch.nn.Module, input_shapes: Sequence[Sequence[int]], name: str,
                 input_layout: str = "nhwc", seed: int = 0):
    """The folded float IR of `model` and, per output, (cosine, max abs error) of its
    forward against PyTorch's on a random example input."""
    generator = torch.Generator().manual_seed(seed)
    shapes_text = " ".join(",".join(map(str, s)) for s in input_shapes)
    try:
        examples = [torch.randn(tuple(shape), generator=generator) for shape in input_shapes]
    except (RuntimeError, MemoryError) as e:
        raise ExportError(f"--input-shape {shapes_text}: cannot make the example input: {_first_line(e)}") from e
    try:
        with torch.no_grad():
            reference = model(*examples)
    except (Exception, SystemExit) as e:
        raise ExportError(f"the model does not run on input shape {shapes_text}: {_raised(e)}") from e
    try:
        with warnings.catch_warnings():
            # nn.LSTM/nn.GRU re-read their weights into _flat_weights on every call: harmless
            warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights")
            program = torch.export.export(model, tuple(examples)).run_decompositions({})
    except (Exception, SystemExit) as e:
        raise ExportError(f"torch.export cannot trace the model: {_raised(e)}") from e
    graph = Exporter(program, model, name, {**HANDLERS, **RNN_HANDLERS}).run(examples, input_layout == "nhwc")
    run_stage1(graph, merge_matmul_scales=False)  # a float IR as the parser writes: no fused_multiplier
    inputs = [to_ir_layout(x) if input_layout == "nhwc" else x for x in examples]
    got = graph.forward(inputs)
    wants = [t for t in torch.utils._pytree.tree_leaves(reference) if isinstance(t, torch.Tensor)]
    checks = [compare(g, to_ir_layout(w)) for g, w in zip(got, wants)]
    for out, (cosine, _) in zip(graph.output_tensors, checks):
        if not cosine >= MIN_COSINE:
            raise ExportError(f"internal: the exported IR's output '{out.name}' disagrees with PyTorch "
                              f"(cosine {cosine:.6f} on the example input)")
    return graph, checks


def runs_batched(graph, input_shapes: Sequence[Sequence[int]], input_layout: str = "nhwc",
                 seed: int = 0) -> bool:
    """Whether the IR also runs at twice its batch, giving each sample what it gives
    alone: npuopt feeds it `calibration_batch_size`/`metric_batch_size` samples at once.
    False for graphs whose layers move the batch off the first axis (ViT's attention
    in its (L, N, E) layout); such an IR runs at the exported batch only."""
    generator = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(tuple(shape), generator=generator) for shape in input_shapes]
    inputs = [to_ir_layout(x) if input_layout == "nhwc" else x for x in inputs]
    try:
        single = [o.clone() for o in graph.forward(inputs)]
        double = graph.forward([torch.cat([x, x]) for x in inputs])
    except Exception:  # a Reshape or Concat that cannot follow the batch
        return False
    for one, two in zip(single, double):
        n = one.shape[0] if one.dim() else 0
        if two.dim() != one.dim() or (one.dim() and two.shape[0] != 2 * n):
            return False
        # another batch may take other kernels: equal up to float rounding, as exports are
        tolerance = 1e-4 * float(one.abs().max())
        if max(float((two[:n] - one).abs().max()), float((two[n:] - one).abs().max())) > tolerance:
            return False
    return True


def _parse_shape(text: str) -> List[int]:
    """One --input-shape: comma-separated positive integers (plain digits), holding at most
    2^MAX_ELEMENTS_LOG2 elements, as many as an IR tensor may."""
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) for p in parts) or min(int(p) for p in parts) < 1:
        raise ExportError(f"--input-shape '{text}': expected comma-separated positive integers, e.g. 1,3,224,224")
    shape = [int(p) for p in parts]
    if math.prod(shape) > 1 << MAX_ELEMENTS_LOG2:
        raise ExportError(f"--input-shape '{text}': {math.prod(shape)} elements, more than the 2^{MAX_ELEMENTS_LOG2} "
                          f"an IR tensor may hold")
    return shape


def _check_memory(shapes: Sequence[Sequence[int]], texts: Sequence[str]) -> None:
    """The example inputs must fit memory: the export holds EXAMPLE_COPIES float32 copies
    of them (the input, its IR layout, the batch of two of the batching check), besides
    the model's activations."""
    need = EXAMPLE_COPIES * 4 * sum(math.prod(s) for s in shapes)
    free = available_memory()
    if free is not None and need > free:
        raise ExportError(f"--input-shape {' '.join(texts)}: the example inputs need {need / 2**30:.1f} GiB "
                          f"({EXAMPLE_COPIES} float32 copies); {free / 2**30:.1f} GiB of memory is available")


def available_memory() -> Optional[int]:
    """Bytes of memory this process may still take: MemAvailable of /proc/meminfo, less
    where a cgroup (v2) limit leaves less; None where neither can be read."""
    free = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f, \
                open("/sys/fs/cgroup/memory.current", encoding="ascii") as g:
            limit = f.read().strip()
            left = int(limit) - int(g.read().strip()) if limit != "max" else None
    except (OSError, ValueError):
        left = None
    known = [v for v in (free, left) if v is not None]
    return min(known) if known else None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="N,C,H,W",
              help="the PyTorch input shape (repeat for several inputs); not with --llm")
@click.option("-o", "--output", "out_prefix", required=True, metavar="OUT_PREFIX",
              help="writes OUT_PREFIX.txt and OUT_PREFIX.bin")
@click.option("--weights", metavar="FILE", help="a state dict to load into the model")
@click.option("--input-layout", type=click.Choice(["nhwc", "nchw"], case_sensitive=False), default="nhwc",
              show_default=True, help="layout of 4-D IR inputs (the PyTorch input is always NCHW)")
@click.option("--seed", type=int, default=0, show_default=True,
              help="torch.manual_seed before the model is built (random weights) and seed of the check input")
@click.option("--llm", is_flag=True, help="MODEL is a decoder (npuopt_export.llama.Llama): write "
              "OUT_PREFIX_prefill and OUT_PREFIX_decode, dynamic in the sequence and cache lengths")
@click.option("--max-length", type=click.IntRange(min=4), metavar="N",
              help="with --llm: the most positions a prefill or a cache and its step take (default: the model's)")
@click.option("--length", type=click.IntRange(min=1), metavar="N",
              help="with --llm: static IRs instead, a prefill of N tokens and a step after N cached positions")
@click.option("--verbose", "-v", is_flag=True, help="a traceback on errors")
def main(model, input_shapes, out_prefix, weights, input_layout, seed, verbose, llm, max_length, length):
    """Export a PyTorch MODEL to a float npuopt IR: OUT_PREFIX.txt and OUT_PREFIX.bin
    (with --llm a decoder's two IRs, OUT_PREFIX_prefill and OUT_PREFIX_decode).

    \b
    MODEL is one of:
      torchvision:NAME      a torchvision classification model (resnet18, vit_b_16, ...),
                            random weights from --seed unless --weights is given
      module.path:callable  callable() returns a torch.nn.Module; the module is
                            imported from the working directory or sys.path

    \b
      npuopt-export torchvision:resnet18 --input-shape 1,3,224,224 -o out/resnet18
      npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o out/lite0
      npuopt-export npuopt_export.gguf_llama:smollm2_135m --llm --max-length 128 -o out/smollm2

    The model is traced in eval mode with torch.export and mapped to IR layers
    (4-D activations NHWC); BatchNorms are folded and activations fused. The IR is
    then run against PyTorch on a random input and the cosine and max abs error
    are printed. Errors (an op with no IR mapping, with its module path; a model
    that does not run on the input shape; weights that do not fit) are one line
    and exit status 1.
    """
    if llm or max_length or length:
        from .export_llm import write_decoder
        try:
            if not llm or input_shapes:
                raise ExportError("--max-length and --length go with --llm, which takes no --input-shape")
            outputs = _outputs(out_prefix, weights, ("_prefill", "_decode"))
            write_decoder(load_model(model, weights, seed), out_prefix, outputs, max_length, length)
        except NpuoptError as e:
            _fail(str(e), verbose)
        except Exception as e:
            _fail(f"internal error: {type(e).__name__}: {_first_line(e)} (run with --verbose for the traceback)",
                  verbose)
        return
    try:
        if not input_shapes:
            raise ExportError("--input-shape is required (or --llm for a decoder)")
        outputs = _outputs(out_prefix, weights)
        shapes = [_parse_shape(s) for s in input_shapes]
        _check_memory(shapes, input_shapes)
        module = load_model(model, weights, seed)
        graph, checks = export_model(module, shapes, os.path.basename(out_prefix), input_layout.lower(), seed)
        with outputs:
            write_graph(graph, outputs.stage("-o", out_prefix + ".txt"), outputs.stage("-o", out_prefix + ".bin"),
                        bin_name=os.path.basename(out_prefix) + ".bin")
    except NpuoptError as e:
        _fail(str(e), verbose)
    except Exception as e:  # a bug of ours: still one line, with a pointer to --verbose
        _fail(f"internal error: {type(e).__name__}: {_first_line(e)} (run with --verbose for the traceback)", verbose)
    types = Counter(node.type for node in graph.nodes)
    click.echo(f"wrote {out_prefix}.txt and {out_prefix}.bin: {len(graph.nodes)} layers "
               f"({', '.join(f'{n} {t}' for t, n in types.most_common())})")
    for out, (cosine, err) in zip(graph.output_tensors, checks):
        click.echo(f"output '{out.name}' {list(out.ir_shape)} vs PyTorch on a random input: "
                   f"cosine {cosine:.7f}, max abs error {err:.3g}")
    if not runs_batched(graph, shapes, input_layout.lower(), seed):
        batch = shapes[0][0]
        click.echo(f"note: this IR runs at batch {batch} only (its layers move the batch off the first axis); "
                   f"in npuopt set calibration_batch_size and metric_batch_size to {batch}")
    elif not graph.keeps_samples_apart():
        click.echo("note: this IR fixes batch 1 in its shapes (its layers move the batch off the first axis); "
                   "npuopt runs its batches one sample at a time")


def _outputs(out_prefix: str, weights: Optional[str], suffixes: Sequence[str] = ("",)) -> RunOutputs:
    """OUT_PREFIX{suffix}.txt and .bin checked before any work, as npuopt checks its outputs: a
    prefix that ends in a folder separator, a folder under a regular file or one that cannot be made or
    written into, or the --weights file, is one line; the files appear only once written whole."""
    if not os.path.basename(out_prefix):
        raise ExportError(f"-o '{out_prefix}' names a folder; give the files' prefix, e.g. "
                          f"'{os.path.join(out_prefix, 'model')}' for model.txt and model.bin in it")
    outputs = RunOutputs({"--weights": weights} if weights else {}, announce=False)
    for path in (out_prefix + suffix + ext for suffix in suffixes for ext in (".txt", ".bin")):
        outputs.check("-o", path)
    return outputs


def _fail(message: str, verbose: bool) -> None:
    if verbose:
        traceback.print_exc()
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    click.echo(f"npuopt-export: error: {message}", err=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
