"""`npuopt-run`: run a quantized IR with the reference integer arithmetic, streaming the
inputs batch by batch (npuopt_run/stream.py).

Errors are one line `npuopt-run: error: ...` and exit status 1, and leave no file behind;
--verbose adds the traceback.
"""
import argparse
import os
import sys
import traceback
from typing import List

import numpy as np

from . import symbols
from .errors import RefrunError
from .generate import generate
from .irfile import read_model
from .runner import Runner
from .stream import NpyInput, Writer

PROG = "npuopt-run"
DEFAULT_BATCH_SIZE = 4  # EfficientNet-Lite0 at 224x224: a few hundred MB peak resident (docs/npuopt-run.md)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line and exit status 1, like every other error."""

    def error(self, message):
        _fail(f"{message} (see {PROG} --help)", False)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Independent integer reference runner for npuopt's quantized IR: reads only the IR "
                    "(graph .txt + weights .bin) and computes every layer in NumPy integer arithmetic, "
                    "as docs/integer-semantics.md writes it down. Layers left in float run in float32.",
        epilog=f"example: {PROG} out/model_o.txt --input images.npy -o ref.npz --dump ref_dump")
    p.add_argument("model", help="the quantized graph file (MODEL_o.txt; a float IR is refused)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NPY",
                   help="one .npy per graph input, in the IR's input_tensors order; first axis the batch")
    p.add_argument("-o", "--output", required=True, metavar="OUT.npz",
                   help="write each output tensor (integers) under its name and its dequantized float "
                        "under '<name>.float'; the file appears only once the whole run has succeeded")
    p.add_argument("--bin", help="the weights file (default: the graph file's name with .bin)")
    p.add_argument("--integer-input", action="store_true",
                   help="inputs are already quantized integers (default: float, quantized with the "
                        "Input layer's layer_top_scale/layer_top_zp)")
    p.add_argument("--dump", metavar="DIR",
                   help="write every tensor as DIR/<name>.npy (integers as stored; see DIR/index.json), "
                        "batch by batch")
    p.add_argument("--batch-size", "--batch", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"samples run at once (default {DEFAULT_BATCH_SIZE}); inputs are read and outputs "
                        f"written batch by batch, so memory follows the model and N, not the number of "
                        f"samples; results do not depend on N (a model with shapes that follow the data, "
                        f"whose layers span the batch, runs all its samples at once)")
    p.add_argument("--generate", metavar="DECODE_o.txt",
                   help="MODEL is a decoder's prefill IR and this its decode-step IR (npuopt-export --llm): "
                        "generate --tokens token ids greedily after each prompt of the one --input (token ids "
                        "[prompts, N]), the KV cache kept by the runner; -o gets them as 'tokens' [prompts, T]")
    p.add_argument("--tokens", type=int, default=32, metavar="T", help="tokens to generate (default 32)")
    p.add_argument("--verbose", "-v", action="store_true", help="print the traceback on errors")
    return p


def main(argv: List[str] = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except RefrunError as e:
        _fail(str(e), args.verbose)
    except KeyboardInterrupt:
        _fail("interrupted", args.verbose)
    except Exception as e:  # a bug of the runner: still one line
        _fail(f"internal error: {type(e).__name__}: {e} (run with --verbose for the traceback)",
                     args.verbose)


def _fail(message: str, verbose: bool) -> None:
    if verbose:
        traceback.print_exc()
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(1)


def run(args) -> None:
    """Stream the inputs through the model batch by batch into the Writer: memory follows
    the model and --batch-size, and nothing is written unless every batch ran."""
    if args.generate:
        return run_generation(args)
    if args.batch_size < 1:
        raise RefrunError(f"--batch-size must be at least 1, got {args.batch_size}")
    with Writer(args.output, args.dump) as writer:
        sources = [NpyInput(path) for path in args.input]
        runner = Runner(symbols.bind(read_model(args.model, args.bin), [source.shape for source in sources]))
        runner.check_inputs(sources, args.integer_input, args.input)
        samples = {source.shape[0] for source in sources}
        if len(samples) > 1:
            counts = ", ".join(f"'{s.path}' {s.shape[0]}" for s in sources)
            raise RefrunError(f"the input files hold different numbers of samples ({counts})")
        total = samples.pop() if samples else 1
        writer.begin(runner)
        size = total if runner.bounded else args.batch_size  # NonZero, Unique... span the batch
        for start in range(0, total, size):
            batch = [source.rows(start, start + size) for source in sources]
            runner.stream(runner.prepare_inputs(batch, args.integer_input), writer.wanted, writer.add)
        writer.publish()


def run_generation(args) -> None:
    """--generate: the prompts one by one through generate.generate; -o written whole at the end."""
    if len(args.input) != 1 or args.tokens < 1:
        raise RefrunError(f"--generate takes one --input (the prompts' token ids) and --tokens of at least 1, "
                          f"got {len(args.input)} --input and --tokens {args.tokens}")
    prompts = NpyInput(args.input[0]).rows(0, None)
    if prompts.ndim != 2 or not np.issubdtype(prompts.dtype, np.integer):
        raise RefrunError(f"input file '{args.input[0]}': token ids [prompts, N] as integers, got {prompts.dtype} "
                          f"{list(prompts.shape)}")
    prefill, decode = read_model(args.model, args.bin), read_model(args.generate)
    tokens = np.array([generate(prefill, decode, list(p), args.tokens) for p in prompts], dtype=np.int64)
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise RefrunError(f"-o '{args.output}': folder '{folder}' does not exist")
    staged = os.path.join(folder, f".{os.path.basename(args.output)}.{os.getpid()}.tmp.npz")
    try:
        np.savez(staged, tokens=tokens)
        os.replace(staged, args.output)
    finally:
        if os.path.exists(staged):
            os.remove(staged)


if __name__ == "__main__":
    main()
