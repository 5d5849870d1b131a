"""The files a run writes: checked before any work, written under temporary names,
put in place only when the whole run succeeded.

An output that would overwrite one of the run's own inputs (graph, bin, data, labels,
opt_config, the cfg ...), a file where a folder is expected and the reverse, or a folder
that cannot be made or written into (not writable, or under a file) is a ConfigError
before anything runs (`check`). While the run goes on, each file is written
under a name unique to the run (pid + random) beside its final place (`stage`); at the
very end `commit` renames them all into place, holding a lock on each folder so that
concurrent runs into one folder never leave a mix of their files. When the run fails or
is interrupted (SIGINT, SIGTERM), leaving the `with` block removes every temporary file
and every folder created for them: outputs appear only when the whole run succeeded.
"""
import fcntl
import os
import secrets
import tempfile
from typing import Dict, List, Set

import numpy as np

from .errors import ConfigError
from .logger import OPT_INFO


def safe_name(text: str) -> str:
    """A name output files start with (model_name, out_ir_name): no folder part and no
    '..', so that outputs cannot leave output_dir. ValueError otherwise (a cfg parser)."""
    if any(bad in text for bad in ("/", "\\", "..", "\0")):
        raise ValueError(text)
    return text


def temp_path(path: str) -> str:
    """A hidden name beside `path`, unique to this process and call, same extension
    (np.save and the like append theirs otherwise)."""
    folder, base = os.path.split(path)
    stem, ext = os.path.splitext(base)
    return os.path.join(folder, f".{stem}.npuopt-{os.getpid()}-{secrets.token_hex(4)}{ext}")


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def run_inputs(cfg) -> dict:
    """The files a run reads (a dataset file without its ':split' selector), which it never overwrites."""
    files = {f"field '{name}'": getattr(cfg, name) for name in ("graph", "calibration_data", "data", "label",
                                                                 "opt_config")}
    files = {what: p if os.path.exists(p) else p.split(":")[0] for what, p in files.items() if p}
    files["field 'bin'"] = cfg.bin or os.path.splitext(cfg.graph)[0] + ".bin"
    if os.path.isfile(cfg.statistic_file):  # else it is an output
        files["field 'statistic_file'"] = cfg.statistic_file
    files["the cfg file"] = cfg.source
    return files


class RunOutputs:
    """The outputs of one run; `inputs` maps a cfg field (or what it is) to a file the
    run reads and must never overwrite."""

    def __init__(self, inputs: Dict[str, str], announce: bool = True):
        self.inputs = {_real(path): what for what, path in inputs.items() if path}
        self.announce = announce           # log the files put in place (a command that says it itself: not)
        self.staged: Dict[str, str] = {}   # final path -> temporary path
        self.created: List[str] = []       # folders made for staged files, outermost first
        self.writable: Set[str] = set()    # folders found writable (absolute paths)

    def check(self, what: str, path: str, folder: bool = False) -> None:
        """`path` (a file, or a folder with `folder`) may be written as `what`."""
        if os.path.exists(path) and os.path.isdir(path) != folder:
            raise ConfigError(f"{what} '{path}' is {'a file' if folder else 'a folder'}, not "
                              f"{'a folder' if folder else 'a file'}")
        owner = self.inputs.get(_real(path))
        if owner is not None and not folder:
            raise ConfigError(f"{what} '{path}' would overwrite an input of the run ({owner}); a run never "
                              f"overwrites its inputs: choose another output_dir, out_ir_name or model_name")
        self._check_writable(what, path, path if folder else os.path.dirname(os.path.abspath(path)))

    def _check_writable(self, what: str, path: str, folder: str) -> None:
        """`folder` (where `path` goes) can be made where missing and written into: tried for
        real, by a folder made in its nearest existing parent and removed at once, since
        permission bits say nothing to root nor of a read-only or special file system."""
        folder = os.path.abspath(folder)
        if folder in self.writable:
            return
        base = folder
        while not os.path.isdir(base):
            if os.path.lexists(base):
                raise ConfigError(f"{what} '{path}' cannot be created: '{base}' is a file, not a folder")
            base = os.path.dirname(base)
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".npuopt-probe-", dir=base))
        except OSError as e:
            done = "written into" if base == folder else f"created in '{base}'"
            raise ConfigError(f"{what} '{path}' cannot be {done}: {e.strerror or e}") from None
        self.writable.add(folder)

    def dump(self, graph, folder: str) -> None:
        """Every tensor `graph` holds (the first metric batch, kept) into `folder`, one .npy each."""
        for node in graph.nodes:
            for t in node.outputs:
                safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in t.name)
                np.save(self.stage("dump", os.path.join(folder, f"{safe}.npy")), t.betensor.detach().cpu().numpy())
        OPT_INFO(f"dumped every tensor of the first batch into '{folder}'")

    def stage(self, what: str, path: str) -> str:
        """The temporary name to write `path` under; it is put in place by commit()."""
        self.check(what, path)
        self._make_folder(os.path.dirname(os.path.abspath(path)))
        self.staged[path] = temp_path(path)
        return self.staged[path]

    def _make_folder(self, folder: str) -> None:
        missing = []
        while not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        for path in reversed(missing):
            os.makedirs(path, exist_ok=True)
            self.created.append(path)

    def commit(self) -> None:
        """Every staged file into place, under an exclusive lock on each of their folders
        (taken in one order, so concurrent runs wait for each other, never deadlock)."""
        folders = sorted({os.path.dirname(os.path.abspath(p)) for p in self.staged})
        locks = []
        try:
            for folder in folders:
                fd = os.open(folder, os.O_RDONLY)
                locks.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX)
            for final, temp in self.staged.items():
                os.replace(temp, final)
        finally:
            for fd in locks:
                os.close(fd)  # releases the lock
        if self.staged and self.announce:
            OPT_INFO(f"outputs in place: {', '.join(self.staged)}")
        self.staged, self.created = {}, []

    def discard(self) -> None:
        """Remove what a failed run staged, and the folders made for it when empty."""
        for temp in self.staged.values():
            if os.path.lexists(temp):
                os.remove(temp)
        for folder in reversed(self.created):
            try:
                os.rmdir(folder)
            except OSError:  # not empty: another run's files, or the user's
                pass
        self.staged, self.created = {}, []

    def __enter__(self) -> "RunOutputs":
        return self

    def __exit__(self, exc_type, *_):
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.discard()
        return False
