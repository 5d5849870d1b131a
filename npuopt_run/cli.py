"""`npuopt-run`: run a quantized IR with the reference integer arithmetic.

Errors are one line `npuopt-run: error: ...` and exit status 1; --verbose
adds the traceback.
"""
import argparse
import json
import os
import sys
import traceback
from typing import Dict, List

import numpy as np

from .errors import RefrunError
from .irfile import read_model
from .runner import Runner
from . import intmath

PROG = "npuopt-run"


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
    p.add_argument("model", help="the quantized graph file (MODEL_o.txt)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NPY",
                   help="one .npy per graph input, in the IR's input_tensors order; first axis the batch")
    p.add_argument("-o", "--output", required=True, metavar="OUT.npz",
                   help="write each output tensor (integers) under its name and its dequantized float "
                        "under '<name>.float'")
    p.add_argument("--bin", help="the weights file (default: the graph file's name with .bin)")
    p.add_argument("--integer-input", action="store_true",
                   help="inputs are already quantized integers (default: float, quantized with the "
                        "Input layer's layer_top_scale/layer_top_zp)")
    p.add_argument("--dump", metavar="DIR",
                   help="write every tensor as DIR/<name>.npy (integers as stored; see DIR/index.json)")
    p.add_argument("--batch", type=int, default=16, metavar="N",
                   help="samples run at once (memory bound only; results do not depend on it)")
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
    if args.batch < 1:
        raise RefrunError(f"--batch must be at least 1, got {args.batch}")
    model = read_model(args.model, args.bin)
    runner = Runner(model)
    arrays = [_load_npy(path) for path in args.input]
    inputs = runner.prepare_inputs(arrays, args.integer_input)
    total = inputs[0].shape[0] if inputs else 1
    chunks: Dict[str, List[np.ndarray]] = {}
    for start in range(0, max(total, 1), args.batch):
        values = runner.run([x[start: start + args.batch] for x in inputs])
        for name, value in values.items():
            chunks.setdefault(name, []).append(value)
    values = {name: np.concatenate(parts) if len(parts) > 1 else parts[0] for name, parts in chunks.items()}
    _write_outputs(runner, values, args.output)
    if args.dump:
        write_dump(runner, values, args.dump)


def _load_npy(path: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise RefrunError(f"input file '{path}' not found")
    try:
        value = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise RefrunError(f"input file '{path}' is not a readable .npy: {e}") from None
    if not isinstance(value, np.ndarray) or value.ndim == 0:
        raise RefrunError(f"input file '{path}' must hold one array with the batch as its first axis")
    return value


def stored(runner: Runner, name: str, value: np.ndarray) -> np.ndarray:
    """An integer tensor in its IR dtype's NumPy type (int4 as int8); floats as float32."""
    info = runner.infos[name]
    return value.astype(info.dtype.storage if info.is_int else np.float32)


def _write_outputs(runner: Runner, values: Dict[str, np.ndarray], path: str) -> None:
    out = {}
    for name in runner.model.outputs:
        info = runner.infos[name]
        out[name] = stored(runner, name, values[name])
        out[name + ".float"] = (intmath.dequantize(values[name], info.scale, info.zp)
                                if info.is_int and info.scale is not None else values[name].astype(np.float32))
    _save(path, lambda f: np.savez(f, **out))


def write_dump(runner: Runner, values: Dict[str, np.ndarray], folder: str) -> None:
    """One .npy per tensor, named like npuopt's dumps; index.json maps tensor names to files."""
    os.makedirs(folder, exist_ok=True)
    index = {}
    for layer in runner.order:
        for name in layer.tops:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            fname, n = safe + ".npy", 1
            while fname in index.values():
                n += 1
                fname = f"{safe}~{n}.npy"
            index[name] = fname
            _save(os.path.join(folder, fname), lambda f, v=stored(runner, name, values[name]): np.save(f, v))
    _save(os.path.join(folder, "index.json"), lambda f: f.write(json.dumps(index, indent=1).encode()))


def _save(path: str, write) -> None:
    try:
        with open(path, "wb") as f:
            write(f)
    except OSError as e:
        raise RefrunError(f"cannot write '{path}': {e}") from None


if __name__ == "__main__":
    main()
