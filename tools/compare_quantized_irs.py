"""Are the quantized IRs of this tree byte-identical to those of an older revision?

    python tools/compare_quantized_irs.py [--base REV] [--new REV] [--only ops,parser,lite0]

A refactoring promises that nothing a user sees changes: this script checks that
promise. It exports `--base` (default HEAD) and `--new` (default: the working tree as
it is) into a temporary folder, quantizes the same jobs with each, in one process per
tree (PYTHONPATH set to that tree, both side by side on one thread each), and compares
each job's `_o.txt`, `_o.bin` and `_opt_template.json` byte by byte (a job that fails
must fail with the same message on both sides).

The jobs: every op test in op_tests/, every float IR in ../shared/data/parser_irs
(8 calibration inputs: sample images for a 3-channel NCHW input, else normal samples
scaled like its ref_input.npy) and EfficientNet-Lite0 (npuopt-export's IR, the first
100 `calib` images), each under the settings of SETTINGS: its cfg as written and
per-channel weights with asymmetric activations, each alone, with
`global_calibration = adaround`, with `unify_scales_for_concat = true` and with both.
Prints one line per differing job and a summary; exits 1 when any job differs.
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
COMPARED = ("_o.txt", "_o.bin", "_opt_template.json")

METHODS = {"defaults": [],
           "per_channel_asym": ["quantize_method_for_weight=per_channel_symmetric_restricted_range",
                                "quantize_method_for_activation=per_tensor_asymmetric"]}
VARIANTS = {"plain": [], "adaround": ["global_calibration=adaround"],
            "unify_concat": ["unify_scales_for_concat=true"],
            "adaround+unify_concat": ["global_calibration=adaround", "unify_scales_for_concat=true"]}
SETTINGS = {f"{m}+{v}": METHODS[m] + VARIANTS[v] for m in METHODS for v in VARIANTS}
DEFAULT_SETTINGS = list(SETTINGS)
# the methods that read decisions from the plan, beyond adaround: by --settings only
SETTINGS.update({f"defaults+{name}": [f"global_calibration={name}"]
                 for name in ("easy_quant", "svd_quant", "svd_quant[3]", "mvn_correction", "gptq_zy", "adaquant_zy")})
CALIBRATION_INPUTS = 8


def export_tree(rev: str, folder: Path) -> Path:
    """The files of revision `rev` in `folder` (git archive: no worktree to clean up)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def write_cfg(path: Path, **fields) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[Common]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items()), encoding="utf-8")
    return path


def op_test_jobs():
    for folder in sorted(p for p in (REPO / "op_tests").iterdir() if (p / "opt.cfg").is_file()):
        yield f"op/{folder.name}", folder / "opt.cfg"


def images(count: int, height: int, width: int):
    import numpy as np
    from PIL import Image
    root = SHARED_DATA / "imagenet_sample"
    with open(root / "labels.tsv", encoding="utf-8") as f:
        names = [r["file"] for r in csv.DictReader(f, delimiter="\t") if r["split"] == "calib"][:count]
    pixels = np.stack([np.asarray(Image.open(root / n).convert("RGB").resize((width, height)), dtype=np.float32)
                       for n in names])
    return ((pixels - 127) / 128).transpose(0, 3, 1, 2)


def parser_ir_jobs(work: Path):
    import numpy as np
    root = SHARED_DATA / "parser_irs"
    if not root.is_dir():
        print(f"parser IRs skipped: {root} is absent")
        return
    for folder in sorted(p for p in root.iterdir() if (p / f"{p.name}.txt").is_file()):
        txt = folder / f"{folder.name}.txt"
        shape = ref = None
        for line in txt.read_text(encoding="utf-8").splitlines():
            if line.startswith("layer_top_shape=") and shape is None:
                shape = json.loads(line.split("=", 1)[1].replace("[[", "[").replace("]]", "]"))
        ref_file = folder / "ref_input.npy"
        if ref_file.is_file():
            ref = np.load(ref_file)
            shape = list(ref.shape)
        if len(shape) == 4 and shape[1] == 3:
            calib = images(CALIBRATION_INPUTS, shape[2], shape[3])
        else:
            std = float(ref.std()) if ref is not None else 1.0
            calib = (np.random.default_rng(0).standard_normal([CALIBRATION_INPUTS] + shape[1:]) * std)
        data = work / "parser" / folder.name / "calib.npy"
        data.parent.mkdir(parents=True, exist_ok=True)
        np.save(data, calib.astype(np.float32))
        yield f"parser/{folder.name}", write_cfg(
            work / "parser" / folder.name / "opt.cfg", graph=txt, bin=txt.with_suffix(".bin"), model_name=folder.name,
            dataset="NumpyDataset", calibration_data=data, calibration_batch_size=CALIBRATION_INPUTS, device="cpu")


def lite0_jobs(work: Path):
    labels = SHARED_DATA / "imagenet_sample" / "labels.tsv"
    if not labels.is_file():
        print(f"EfficientNet-Lite0 skipped: {labels} is absent")
        return
    out = work / "lite0" / "lite0"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not Path(f"{out}.txt").is_file():
        subprocess.run(["npuopt-export", "npuopt_export.models:efficientnet_lite0", "--input-shape", "1,3,224,224",
                        "-o", str(out)], check=True, capture_output=True)
    yield "lite0", write_cfg(work / "lite0" / "opt.cfg", graph=f"{out}.txt", bin=f"{out}.bin", model_name="lite0",
                             dataset="ImageFolderDataset", image_mean=127, image_std=128,
                             calibration_data=f"{labels}:calib:100", calibration_batch_size=25,
                             quantize_method_for_weight="per_tensor_symmetric_restricted_range",
                             quantize_method_for_activation="per_tensor_symmetric_restricted_range",
                             calibration_strategy_for_activation="99.999percentile", device="cpu")


def run_worker(jobs_file: str, out_root: str) -> None:
    """One tree's side: every job in this process (npuopt from PYTHONPATH)."""
    import torch

    import npuopt
    from npuopt.config import load_config
    from npuopt.optmaster import OptMaster
    from npuopt.plugins import load_plugins
    tree = os.environ["PYTHONPATH"]
    assert Path(npuopt.__file__).resolve().is_relative_to(Path(tree).resolve()), npuopt.__file__
    torch.set_num_threads(1)
    load_plugins()
    jobs = json.loads(Path(jobs_file).read_text())
    results = {}
    for i, job in enumerate(jobs):
        out = Path(out_root) / job["id"]
        started = time.perf_counter()
        try:
            cfg = load_config(job["cfg"], dict(kv.split("=", 1) for kv in job["overrides"] + [f"output_dir={out}"]))
            OptMaster(cfg).run()
            results[job["id"]] = "ok"
        except Exception as e:  # noqa: BLE001  (the message is what is compared)
            results[job["id"]] = f"{type(e).__name__}: {e}"
        print(f"[{i + 1}/{len(jobs)}] {job['id']}: {results[job['id']][:100]} "
              f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    (Path(out_root) / "results.json").write_text(json.dumps(results, indent=1))


def compared_files(folder: Path):
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.name.endswith(COMPARED))


def compare(jobs, base: Path, new: Path) -> int:
    base_results = json.loads((base / "results.json").read_text())
    new_results = json.loads((new / "results.json").read_text())
    differing = 0
    counts = {}
    for job in jobs:
        job_id = job["id"]
        kind = job_id.split("/")[0]
        counts.setdefault(kind, [0, 0])[0] += 1
        why = None
        if base_results[job_id] != new_results[job_id]:
            why = f"base: {base_results[job_id]} | new: {new_results[job_id]}"
        else:
            files_base, files_new = compared_files(base / job_id), compared_files(new / job_id)
            if files_base != files_new:
                why = f"files differ: base {list(map(str, files_base))}, new {list(map(str, files_new))}"
            else:
                for f in files_base:
                    if (base / job_id / f).read_bytes() != (new / job_id / f).read_bytes():
                        why = f"{f} differs"
                        break
        if why:
            differing += 1
            print(f"DIFFERS {job_id}: {why}")
        else:
            counts[kind][1] += 1
    for kind, (total, same) in counts.items():
        print(f"{kind}: {same} of {total} jobs identical")
    failed = sum(r != "ok" for r in base_results.values())
    print(f"{len(jobs)} jobs, {len(jobs) - differing} identical, {differing} differ "
          f"({failed} jobs stop with the same error on both sides)")
    return differing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the older revision (default HEAD)")
    parser.add_argument("--new", default=None, help="the newer revision (default: the working tree)")
    parser.add_argument("--only", default="ops,parser,lite0", help="job families, comma-separated")
    parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                        help=f"settings, comma-separated (default: the first {len(DEFAULT_SETTINGS)}; known: "
                             f"{', '.join(SETTINGS)})")
    parser.add_argument("--keep", default=None, help="keep the outputs in this folder; a later run with the same "
                        "folder, base commit and jobs reuses the base side's outputs")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(*args.worker)
        return 0
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="compare_irs_"))
    try:
        base_commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.base], check=True,
                                     capture_output=True, text=True).stdout.strip()
        stamp = work / "base" / "made_by.json"
        reused = stamp.is_file()
        if not reused:
            shutil.rmtree(work, ignore_errors=True)
        base_tree = work / "base_tree" if reused else export_tree(base_commit, work / "base_tree")
        new_tree = export_tree(args.new, work / "new_tree") if args.new else REPO
        families = set(args.only.split(","))
        cases = (list(op_test_jobs()) if "ops" in families else []) + \
            (list(parser_ir_jobs(work)) if "parser" in families else []) + \
            (list(lite0_jobs(work)) if "lite0" in families else [])
        jobs = [{"id": f"{case}/{s}", "cfg": str(cfg), "overrides": SETTINGS[s]}
                for case, cfg in cases for s in args.settings.split(",")]
        if reused and json.loads(stamp.read_text()) != {"commit": base_commit, "jobs": jobs}:
            shutil.rmtree(work / "base")
            reused = False
        (work / "jobs.json").write_text(json.dumps(jobs, indent=1))
        print(f"{len(jobs)} jobs: base {args.base} ({base_tree}), new {args.new or 'working tree'} ({new_tree})")
        started = time.perf_counter()
        workers = []
        for side, tree in [("base", base_tree)] * (not reused) + [("new", new_tree)]:
            shutil.rmtree(work / side, ignore_errors=True)
            log = open(work / f"{side}.log", "w")
            env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
            workers.append((subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker",
                                              str(work / "jobs.json"), str(work / side)],
                                             env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT), log))
        for process, log in workers:
            process.wait()
            log.close()
            if process.returncode:
                print(f"a worker failed (exit {process.returncode}); see {log.name}")
                return 2
        print(f"quantized in {time.perf_counter() - started:.0f} s" + (" (base side reused)" if reused else ""))
        stamp.write_text(json.dumps({"commit": base_commit, "jobs": jobs}))
        return 1 if compare(jobs, work / "base", work / "new") else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
