"""Output cosine to float of the parser's transformer encoder under each number format,
with the default global calibration and with nearest rounding.

    python bench/bench_formats.py [--formats w8a8,w16a16,...] [--write]

../shared/data/parser_irs/transformer_encoder (2 layers of nn.TransformerEncoderLayer,
d_model 128, written by the tool chain's parser) is quantized by `npuopt --cfg` from 64
calibration samples of N(0, std of its reference input), once per format as its cfg
fields ask, with the default `global_calibration` (auto) and with `none` (nearest
rounding); each quantized IR, read back, runs 16 other such samples, and the cosine of
its dequantized output to the float IR's over all of them is printed (the figures of
docs/formats.md; tests/test_minifloat.py holds the floors). `--write` puts the table into
docs/benchmarks.md. About 5 minutes on 2 cores; needs ../shared beside the checkout.
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from npuopt.config import load_config  # noqa: E402
from npuopt.ir import read_graph  # noqa: E402
from npuopt.logger import set_quiet  # noqa: E402
from npuopt.optmaster import OptMaster  # noqa: E402
from npuopt.plugins import load_plugins  # noqa: E402
import record  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ENCODER = REPO.parent / "shared" / "data" / "parser_irs" / "transformer_encoder"
# format -> the cfg fields that ask for it
FORMATS = {
    "w8a8": {},
    "w16a16": {"quant_type": "w16a16"},
    "w4afp16_blocks32": {"quant_type": "w4afp16", "quantize_method_for_weight": "per_block_asymmetric",
                              "weight_block_size": "32"},
    "wfp8afp8": {"quant_type": "wfp8afp8"},
    "wfp8e5m2afp8e5m2": {"quant_type": "wfp8e5m2afp8e5m2"},
    "wfp4_blocks32": {"quant_type": "wfp4", "quantize_method_for_weight": "per_block_symmetric_restricted_range",
                           "weight_block_size": "32"},
    "wfp4afp8e4m3": {"quant_type": "wfp4afp8e4m3",
                     "quantize_method_for_weight": "per_channel_symmetric_restricted_range"},
}


def cosine(folder: Path, fields: dict, calib: Path, val: np.ndarray, expected: np.ndarray) -> float:
    """Quantize with `fields`, read the IR back, and compare its dequantized outputs on `val`."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "opt.cfg"
    values = dict(graph=ENCODER / "transformer_encoder.txt", model_name="enc", output_dir=folder / "out",
                  dataset="NumpyDataset", calibration_data=calib, calibration_batch_size=16, device="cpu", **fields)
    cfg.write_text("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()), encoding="utf-8")
    OptMaster(load_config(str(cfg))).run()
    quantized = read_graph(str(folder / "out" / "enc_o.txt"))
    out = quantized.output_tensors[0]
    got = np.concatenate([quantized.forward([torch.from_numpy(x[None])])[0].numpy().ravel() for x in val])
    got = got.astype(np.float64)
    if out.is_quantized:  # integers or fp8 values: dequantized
        got = (got + float(out.zerop)) / float(out.scale)
    return float(expected @ got / np.linalg.norm(expected) / np.linalg.norm(got))


def main():
    p = record.parser(__doc__)
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated names of FORMATS")
    args = p.parse_args()
    record.require_samples("bench_formats", ENCODER)
    load_plugins()
    set_quiet()  # the table, not each run's log
    reference = np.load(ENCODER / "ref_input.npy")
    rng = np.random.default_rng(0)
    calib_set, val = (rng.standard_normal((n,) + reference.shape[1:]).astype(np.float32) * reference.std()
                      for n in (64, 16))
    float_graph = read_graph(str(ENCODER / "transformer_encoder.txt"))
    expected = np.concatenate([float_graph.forward([torch.from_numpy(x[None])])[0].numpy().ravel() for x in val])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        calib = Path(tmp) / "calib.npy"
        np.save(calib, calib_set)
        for name in args.formats.split(","):
            fields = FORMATS[name]
            default = cosine(Path(tmp) / "default", fields, calib, val, expected)
            nearest = cosine(Path(tmp) / "nearest", dict(fields, global_calibration="none"), calib, val, expected)
            described = "; ".join(f"{k} = {v}" for k, v in fields.items()) or "the defaults"
            rows.append((name, described, f"{default:.5f}", f"{nearest:.5f}"))
            print(" | ".join(rows[-1]), flush=True)
    what = "transformer_encoder (parser IR), 64 calibration and 16 other samples, output cosine to float over the 16"
    table = record.markdown(("format", "cfg fields", "cosine (default global calibration)",
                             "cosine (global_calibration = none)"), rows)
    record.publish(args, "bench_formats", table, what, "1 run each", record.default_threads())


if __name__ == "__main__":
    main()
