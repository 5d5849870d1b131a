"""The recurrent model tests' figures: the float IR and the quantized IR npuopt wrote, each
run by npuopt over the measured samples (work/val.npy), decoded as a user of the model
decodes them, compared with each other and with the ground truth.

    python rnn_check.py MODEL [--min-identical FRACTION] [--min-accuracy FRACTION]

- kws_lstm: the keyword (the best of the 10 scores) against labels.npy (one-hot);
- crnn_ocr: the label sequence of the CTCGreedyDecoder output (output 1; the padding past
  the labels differs in type: int32's largest in float, uint16's quantized), as text,
  against labels.txt.
Prints the share of samples whose decoded sequence is identical to the float model's, and
each graph's accuracy; then PASS, or FAIL naming each floor missed (exit status 1).
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import rnn_data

BATCH = 50


def run(txt: Path, x: np.ndarray, output: int) -> np.ndarray:
    import npuopt.ops  # noqa: F401
    from npuopt.ir import read_graph
    graph = read_graph(str(txt), str(txt.with_suffix(".bin")))
    with torch.no_grad():
        return np.concatenate([graph.forward([torch.from_numpy(x[i:i + BATCH])])[output].numpy()
                               for i in range(0, len(x), BATCH)])


def decoded(model: str, out: np.ndarray) -> list:
    """Per sample the decoded sequence: (keyword,) or the text."""
    if model == "kws_lstm":
        return [(int(k),) for k in out.argmax(-1)]
    classes = len(rnn_data.CHARSET)
    return ["".join(rnn_data.CHARSET[v] for v in row if 0 <= v < classes) for row in out.reshape(len(out), -1)]


def truth(model: str, work: Path) -> list:
    if model == "kws_lstm":
        return [(int(k),) for k in np.load(work / "labels.npy").argmax(-1)]
    return (work / "labels.txt").read_text().splitlines()


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("model", choices=["kws_lstm", "crnn_ocr"])
    args.add_argument("--min-identical", type=float, default=0.0)
    args.add_argument("--min-accuracy", type=float, default=0.0)
    opts = args.parse_args(argv)
    work = Path(opts.model) / "work"
    x = np.load(work / "val.npy")
    output = 0 if opts.model == "kws_lstm" else 1
    want = decoded(opts.model, run(work / f"{opts.model}.txt", x, output))
    got = decoded(opts.model, run(work / "out" / f"{opts.model}_o.txt", x, output))
    labels = truth(opts.model, work)
    identical = float(np.mean([a == b for a, b in zip(got, want)]))
    float_accuracy = float(np.mean([a == b for a, b in zip(want, labels)]))
    quant_accuracy = float(np.mean([a == b for a, b in zip(got, labels)]))
    print(f"{opts.model}: {len(x)} samples; decoded sequence identical to float's {identical:.4f}; "
          f"accuracy float {float_accuracy:.4f} quant {quant_accuracy:.4f}")
    missed = [f"{what} {value:.4f} < {floor}" for what, value, floor in (
        ("identical to float", identical, opts.min_identical), ("float accuracy", float_accuracy, opts.min_accuracy),
        ("quant accuracy", quant_accuracy, opts.min_accuracy)) if value < floor]
    print("PASS" if not missed else "FAIL: " + "; ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
