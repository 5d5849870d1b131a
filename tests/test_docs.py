"""The README and docs/ keep their promises (issue 46):

- the README is short (at most 250 lines), starts with the two set-up commands, and
  `.ci/run` runs its test command;
- docs/fields.md and the README's headline figures are as tools/gen_docs.py generates
  them: the page from the cfg field table, the figures copied from the tables the
  benchmarks write into docs/benchmarks.md (so no figure there is copied by hand);
- every benchmark in bench/ takes --write and has its table's place in docs/benchmarks.md;
- dates appear only in docs/benchmarks.md and docs/changelog.md (history stays out of
  the guides);
- every relative link of the README and docs/ reaches a file, and an anchor a heading.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import record  # noqa: E402

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
DATED = {"benchmarks.md", "changelog.md"}
DATE = re.compile(r"20\d\d-\d\d-\d\d")
BENCHMARKS = sorted(p for p in (REPO / "bench").glob("bench_*.py"))


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250: the manual goes into docs/)"
    head = "\n".join(lines[:12])
    install = "pip install -e '.[test]' && npuopt --cfg opt.cfg.example"
    assert install in head and "    python -m pytest" in head, head
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -q -e '.[test]'" in ci and "\npython -m pytest\n" in ci


def test_generated_docs_are_up_to_date():
    """docs/fields.md from the field table, the README's figures from docs/benchmarks.md."""
    done = subprocess.run([sys.executable, str(REPO / "tools" / "gen_docs.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_npuopt_field_markdown_prints_the_fields_page(tmp_path):
    done = subprocess.run([sys.executable, "-m", "npuopt", "--field", "--markdown"], cwd=tmp_path,
                          capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "AIPUPLUGIN_PATH"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "docs" / "fields.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_every_benchmark_writes_its_table(script):
    source = script.read_text(encoding="utf-8")
    assert "record.parser(" in source and "record.publish(" in source, \
        f"{script.name}: take --write and put its table into docs/benchmarks.md (bench/record.py)"
    text = record.BENCHMARKS.read_text(encoding="utf-8")
    assert f"<!-- bench:{script.stem}" in text and f"\n## {script.stem}\n" in text, \
        f"docs/benchmarks.md has no section '## {script.stem}' with its table's markers"
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO / "bench", capture_output=True, text=True)
    assert done.returncode == 0 and "--write" in done.stdout, f"{script.name} --help: {done.stderr[-500:]}"


def test_write_puts_a_table_and_the_headlines_in_place(tmp_path):
    docs, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    docs.write_text("# B\n\n## bench_quant\n\n<!-- bench:bench_quant -->\nNot measured yet.\n"
                    "<!-- /bench:bench_quant -->\n\nafter\n", encoding="utf-8")
    readme.write_text("intro\n<!-- figures -->\nold\n<!-- /figures -->\nend\n", encoding="utf-8")
    table = record.markdown(("measure", "value", "target"), [("calibration ratio", "0.731", "<= 1.0: met")])
    record.write("bench_quant", table, "best of 3", 2, docs=docs, readme=readme)
    text = docs.read_text(encoding="utf-8")
    assert "Not measured yet" not in text and text.endswith("<!-- /bench:bench_quant -->\n\nafter\n")
    assert re.search(r"Measured 20\d\d-\d\d-\d\d on CPU .*, \d+ cores, load \d+\.\d, 2 threads, best of 3", text), text
    assert record.cell("bench_quant", "calibration ratio", "value", docs) == "0.731"
    figures = readme.read_text(encoding="utf-8")
    assert figures.startswith("intro\n<!-- figures -->\n| figure | value |") and figures.endswith("end\n")
    assert "| Calibration time / PyTorch eager forward | 0.731 | [bench_quant](docs/benchmarks.md#bench_quant) |" \
        in figures
    assert f"| {record.NOT_MEASURED} |" in figures  # the other tables are empty here
    record.write("bench_new", "| a | b |\n|---|---|\n| x | 1 |", "1 run", 1, docs=docs, readme=readme)
    assert record.cell("bench_new", "x", "b", docs) == "1"  # a new table goes at the end


def test_dates_only_in_the_benchmarks_and_the_changelog():
    dated = [p.name for p in [README, *DOCS] if p.name not in DATED and DATE.search(p.read_text(encoding="utf-8"))]
    assert not dated, f"dates (history) in {dated}: measured figures go to docs/benchmarks.md, history to " \
                      f"docs/changelog.md"


def anchors(path: Path) -> set:
    """The anchors GitHub gives the headings of a markdown file."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {record.anchor(re.sub(r"[`*]", "", m)) for m in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_links_reach_their_files_and_headings(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(target)
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(target)
    assert not broken, f"{page.name}: links that reach nothing: {broken}"


def test_a_benchmark_child_s_peak_memory_is_its_own():
    """model_runs.child: the peak resident memory of the command alone, not the benchmark's
    that starts it (Linux folds the forked parent's resident set into a child's ru_maxrss:
    bench_llm, holding a decoder, measured its own 3994 MB in every run)."""
    import numpy as np
    from model_runs import child
    held = np.ones(300 << 17)  # 300 MB in this process
    _, peak_mb, text = child([sys.executable, "-c", "import numpy as np; a = np.ones(50 << 17); print(a.sum() > 0)"])
    assert text.strip() == "True" and 50 <= peak_mb < 200, peak_mb
    assert held.sum() > 0
