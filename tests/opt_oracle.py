"""The Compass Optimizer 4.2 ("OPT"), the tool chain's own quantizer, as a test oracle.

Its `OptForward` is the tool chain's reader and forward of quantized IRs: what it
computes on an IR is what that IR means. The reference tarball in ../shared is
extracted once per session into a temporary folder; OPT then runs in subprocesses
with that folder on PYTHONPATH (it changes global state and logging, and its
plugin search imports `aipubt_*` modules from the working directory, so each run
gets an empty one and no AIPUPLUGIN_PATH). One subprocess evaluates a whole list
of jobs, because importing OPT takes seconds.
"""
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OPT_TARBALL = REPO.parent / "shared" / "reference" / "compass_optimizer_4.2.tar.gz"
RUNNER = Path(__file__).with_name("opt_runner.py")
OPT_REQUIREMENTS = ("scipy", "cv2", "editdistance", "ml_dtypes")


@dataclass
class OptJob:
    """OptForward of one IR on float inputs (.npy files, one per graph input)."""
    txt: Path
    bin: Path
    inputs: Sequence[Path]
    output: Path  # the .npz the runner writes


@dataclass
class OptResult:
    quantized: Dict[str, bool]  # layer name -> whether OPT read it as quantized
    errors: List[str]  # what OPT logged as errors, or why it stopped
    npz: Path
    _arrays: Dict[str, np.ndarray] = field(default=None, repr=False)

    @property
    def arrays(self) -> Dict[str, np.ndarray]:
        if self._arrays is None:
            with np.load(self.npz) as data:
                self._arrays = dict(data)
        return self._arrays

    @property
    def outputs(self) -> List[np.ndarray]:
        """The graph outputs in the IR's dtypes, as OptForward returns them."""
        return [self.arrays[f"output{i}"] for i in range(sum(k.startswith("output") for k in self.arrays))]

    def tensor(self, name: str) -> np.ndarray:
        return self.arrays[f"tensor:{name}"]


class Oracle:
    def __init__(self, root: Path, workdir: Path):
        self.root = root  # the folder that holds the extracted AIPUBuilder package
        self.workdir = workdir
        self._runs = 0

    def _environment(self) -> dict:
        env = dict(os.environ)
        env.pop("AIPUPLUGIN_PATH", None)
        env["PYTHONPATH"] = str(self.root)
        # one thread: OPT's float64 (depthwise) convolutions get many times slower with more
        # threads on a busy machine, and the tests compute npuopt's side meanwhile
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
        return env

    def _fresh_folder(self, kind: str) -> Path:
        self._runs += 1
        folder = self.workdir / f"{kind}{self._runs}"
        folder.mkdir(parents=True)
        return folder

    def forward(self, jobs: Sequence[OptJob], timeout: int = 600) -> List[OptResult]:
        """OptForward of every job in one subprocess; each job's result, in order."""
        folder = self._fresh_folder("forward")
        jobs_file, results_file = folder / "jobs.json", folder / "results.json"
        jobs_file.write_text(json.dumps([{"txt": str(j.txt), "bin": str(j.bin), "output": str(j.output),
                                          "inputs": [str(p) for p in j.inputs]} for j in jobs]))
        run = subprocess.run([sys.executable, str(RUNNER), str(jobs_file), str(results_file)], cwd=folder,
                             env=self._environment(), capture_output=True, text=True, timeout=timeout)
        if run.returncode != 0:
            raise RuntimeError(f"the OPT runner failed (rc={run.returncode}):\n{run.stderr[-4000:]}")
        results = json.loads(results_file.read_text())
        return [OptResult(r["quantized"], r["errors"], Path(j.output)) for r, j in zip(results, jobs)]

    def optimize(self, cfg: Path, timeout: int = 600) -> subprocess.CompletedProcess:
        """OPT's own optimizer (`optimizer_main --cfg`), which writes a quantized IR of its own."""
        folder = self._fresh_folder("optimize")
        command = [sys.executable, "-m", "AIPUBuilder.Optimizer.tools.optimizer_main", "--cfg", str(cfg)]
        return subprocess.run(command, cwd=folder, env=self._environment(), capture_output=True, text=True,
                              timeout=timeout)


def extract_opt(dest: Path) -> Path:
    """Extract the reference tarball into `dest`; returns the folder that holds AIPUBuilder/."""
    with tarfile.open(OPT_TARBALL) as tar:
        tar.extractall(dest, filter="data")
    found = sorted(dest.rglob("AIPUBuilder/Optimizer/tools/optimizer_forward.py"), key=lambda p: len(p.parts))
    if not found:
        raise RuntimeError(f"{OPT_TARBALL} holds no AIPUBuilder/Optimizer/tools/optimizer_forward.py")
    return found[0].parents[3]
