"""Runs the Compass Optimizer's OptForward (the tool chain's reader and forward of
quantized IRs) over a list of jobs, in a process of its own: OPT changes global
state and logging, and importing it costs seconds, so one process serves many jobs.

    python opt_runner.py JOBS.json RESULTS.json

Each job is {"txt", "bin", "inputs": [.npy, ...], "output": .npz}. Its .npz holds
`output<i>` (graph output i in the IR's dtype, as OptForward returns it) and
`tensor:<name>` (every layer's output in its IR dtype, to name the first layer
that differs). RESULTS.json lists per job {"quantized": {layer: bool} (a subgraph section's
layers as "SECTION/layer"), "errors":
[lines OPT logged as errors, or the exception that stopped it]}.
The extracted OPT must be on PYTHONPATH; OPT's stdout is silenced.
"""
import contextlib
import io
import json
import os
import sys
import traceback

import numpy as np


def main(jobs_file: str, results_file: str) -> None:
    with open(jobs_file, encoding="utf-8") as f:
        jobs = json.load(f)
    os.environ["AIPUOPT_SILENTLOADING"] = "1"
    with contextlib.redirect_stdout(io.StringIO()):
        from AIPUBuilder.Optimizer.tools.optimizer_forward import OptForward
        from AIPUBuilder.Optimizer.utils import dtype2nptype
    results = [run_job(job, OptForward, dtype2nptype) for job in jobs]
    with open(results_file, "w", encoding="utf-8") as f:
        json.dump(results, f)


def run_job(job: dict, OptForward, dtype2nptype) -> dict:
    log = io.StringIO()
    result = {"quantized": {}, "errors": []}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(log):
            forward = OptForward(job["txt"], job["bin"])
            graph = forward.optimizer.g
            result["quantized"] = {node.name: bool(node.quantized) for node in graph.nodes}
            result["quantized"].update({f"{name}/{node.name}": bool(node.quantized)  # subgraph sections' layers
                                        for name, sg in graph.subgraph_map.items() for node in sg.nodes})
            inputs = [np.load(path) for path in job["inputs"]]
            outputs = forward.forward(inputs, keep_tensors=True)
            arrays = {f"output{i}": np.asarray(o) for i, o in enumerate(outputs)}
            for node in graph.nodes:
                for t in node.outputs:
                    arrays[f"tensor:{t.name}"] = t.to_numpy().astype(dtype2nptype(t.ir_dtype))
        np.savez(job["output"], **arrays)
    except (Exception, SystemExit) as e:  # OPT_FATAL exits; a failure belongs to its job only
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        result["errors"].append(f"OptForward stopped: {last}")
    result["errors"] += [line for line in log.getvalue().splitlines() if line.startswith("[E]")]
    return result


if __name__ == "__main__":
    main(*sys.argv[1:])
