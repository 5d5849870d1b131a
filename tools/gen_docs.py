"""Write the generated parts of the docs: docs/fields.md from the cfg field table
(npuopt/config.py and the built-in plugins' fields, as `npuopt --field --markdown` prints
it) and the README's headline figures from the tables of docs/benchmarks.md (which the
benchmarks' --write fill).

    python tools/gen_docs.py            # write them
    python tools/gen_docs.py --check    # exit 1, naming each, where a file is not as generated

tests/test_docs.py runs the check. Only the built-in plugins count: a ./plugin folder or
AIPUPLUGIN_PATH is left out, so the page is the same wherever it is made.
"""
import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

FIELDS_PAGE = REPO / "docs" / "fields.md"


def fields_page() -> str:
    os.environ.pop("AIPUPLUGIN_PATH", None)
    os.chdir(tempfile.gettempdir())  # no ./plugin of the working directory
    from npuopt.config import field_table, fields_markdown
    from npuopt.plugins import load_plugins

    own = {f.name for f in field_table()}
    load_plugins()
    return fields_markdown(own)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file differs")
    args = p.parse_args()
    import record

    wanted = {FIELDS_PAGE: fields_page(), record.README: record.with_headlines(record.README.read_text(encoding="utf-8"))}
    stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(REPO)} is not as generated: run python tools/gen_docs.py")
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path], encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
