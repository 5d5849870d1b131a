"""Port Compass Optimizer plugin files to npuopt with the documented rule and nothing else:
in import lines, the module prefix `AIPUBuilder.Optimizer` becomes `npuopt`.

    python tools/port_opt_plugins.py SRC_DIR DEST_DIR

SRC_DIR is OPT's package folder (the one holding plugins/ and ops/) or a folder of
plugin files; every .py of SRC_DIR/plugins, SRC_DIR/ops (or SRC_DIR itself) is written,
ported, to DEST_DIR/plugins, DEST_DIR/ops (or DEST_DIR)."""
import re
import sys
from pathlib import Path

OLD, NEW = "AIPUBuilder.Optimizer", "npuopt"
IMPORT_LINE = re.compile(r"^\s*(from\s+\S+\s+import\b|import\s)")


def port_text(text: str) -> str:
    """The file with the prefix replaced in its import lines only."""
    lines = text.splitlines(keepends=True)
    return "".join(line.replace(OLD, NEW) if IMPORT_LINE.match(line) else line for line in lines)


def port_dir(src: Path, dest: Path) -> int:
    """Port every .py of src into dest (created); returns how many files were written."""
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for path in sorted(src.glob("*.py")):
        (dest / path.name).write_text(port_text(path.read_text(encoding="utf-8")), encoding="utf-8")
        count += 1
    return count


def port(src: Path, dest: Path) -> dict:
    subdirs = [d for d in ("plugins", "ops") if (src / d).is_dir()]
    if not subdirs:
        return {".": port_dir(src, dest)}
    return {d: port_dir(src / d, dest / d) for d in subdirs}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src, dest = Path(args[0]), Path(args[1])
    if not src.is_dir():
        print(f"port_opt_plugins: '{src}' is not a folder", file=sys.stderr)
        return 2
    for sub, n in port(src, dest).items():
        print(f"{n} file(s) ported into {dest / sub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
