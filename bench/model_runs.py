"""What the benchmarks that run npuopt on a model test share: the model tests' IRs,
exported by npuopt-export when absent (as their run.sh does: resnet18 and ViT-B/16 with
torchvision's random weights from seed 0, EfficientNet-Lite0 pretrained), and a
subprocess's wall time and peak resident set size (ru_maxrss of that process).

Children import npuopt from this checkout (PYTHONPATH), wherever they run: a model
test's cfg names its files relative to its folder, and from there an installed npuopt
(another checkout's) would be found first."""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABELS = REPO.parent / "shared" / "data" / "imagenet_sample" / "labels.tsv"
IMAGENET = "123.675,116.28,103.53", "58.395,57.12,57.375"
MODELS = {  # model test folder: (IR name, npuopt-export's model, preprocessing, image mean, std)
    "resnet18": ("resnet18", "torchvision:resnet18", "imagenet", *IMAGENET),
    "efficientnet_lite0": ("lite0", "npuopt_export.models:efficientnet_lite0", "lite", "127", "128"),
    "vit_b_16": ("vit_b_16", "torchvision:vit_b_16", "imagenet", *IMAGENET),
}
BATCH_ONE = {"vit_b_16"}  # the exported ViT runs at batch 1 only (model_tests/vit_b_16/opt.cfg)


def ir_of(model: str) -> Path:
    """The model test's IR (its path without .txt), exported first when absent."""
    name, spec = MODELS[model][:2]
    prefix = REPO / "model_tests" / model / "work" / name
    if not prefix.with_suffix(".txt").is_file():
        prefix.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-c", "from npuopt_export.export import main; main()", spec,
                               "--input-shape", "1,3,224,224", "-o", str(prefix)], cwd=REPO, env=child_env(),
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{Path(sys.argv[0]).stem}: exporting {model} failed: {done.stderr.strip().splitlines()[-1:]}")
    return prefix


def child_env(threads: int = None) -> dict:
    """The environment of a child: this checkout first on PYTHONPATH; `threads` CPU threads."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


# Linux counts in a child's ru_maxrss the resident set of the process it was forked from
# (exec folds the old memory's high-water mark in): a benchmark holding a model measured
# its own size in every child (bench_llm: 3994 MB for runs that peaked lower). A small
# python forks the command instead and writes the command's own peak (KiB) to the pipe
# whose descriptor is its first argument.
LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
os.write(int(sys.argv[1]), str(usage.ru_maxrss).encode())
sys.exit(os.waitstatus_to_exitcode(status))
"""


def child(command, threads: int = None, cwd: Path = REPO):
    """(wall seconds, peak resident MB, stdout + stderr) of one subprocess (LAUNCHER); exits
    naming the command and its last line where it fails."""
    start = time.perf_counter()
    read, write = os.pipe()
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(write), *map(str, command)], stdout=out,
                                   stderr=subprocess.STDOUT, env=child_env(threads), text=True, cwd=cwd,
                                   pass_fds=(write,))
        os.close(write)
        with os.fdopen(read) as peak:
            peak_kib = peak.read()
        status = process.wait()
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    if status != 0:
        sys.exit(f"{Path(sys.argv[0]).stem}: {' '.join(map(str, command[:4]))} failed: "
                 f"{text.strip().splitlines()[-1:]}")
    return seconds, int(peak_kib) / 1024, text
