"""OptMaster: the pipeline that `npuopt --cfg` runs.

Today it does steps 1, 2 and a float forward over the metric data (steps of
design.md): load and check the IR, forward once with zero inputs, then run the
float graph over `data` with the configured metrics, and report. Calibration
and quantization (steps 3-9) are not built yet.
"""
import json
import os
import time

import numpy as np
import torch
from tqdm import tqdm

from .config import Config
from .data import batches, make_dataset, make_metrics, split_batch
from .errors import ConfigError
from .ir import read_graph
from .logger import OPT_INFO
from .plugins import load_plugins


def select_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("field 'device': cuda was asked for, but torch sees no CUDA device")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


class OptMaster:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.device = select_device(cfg.device)
        self.graph = None
        self.report = {"model": None, "device": str(self.device), "metrics": {"float": {}}, "outputs": {}}

    @property
    def model_name(self) -> str:
        return self.cfg.model_name or self.graph.name

    def run(self) -> dict:
        load_plugins()
        started = time.perf_counter()
        self.graph = read_graph(self.cfg.graph, self.cfg.bin or None)
        self.report["model"] = self.model_name
        OPT_INFO(f"loaded '{self.cfg.graph}': {len(self.graph.nodes)} layers, "
                 f"inputs {[t.name for t in self.graph.input_tensors]}, "
                 f"outputs {[t.name for t in self.graph.output_tensors]}")
        self.graph.to(self.device)
        self.graph.zero_forward(device=self.device)
        OPT_INFO("zero-input forward: every layer ran and every shape matches the IR")
        if self.cfg.dataset and self.cfg.data:
            self.float_forward_over_data()
        else:
            OPT_INFO("no 'dataset'/'data' configured: skipping the float forward over data")
        self.report["seconds"] = round(time.perf_counter() - started, 3)
        self.write_report()
        return self.report

    def float_forward_over_data(self) -> None:
        cfg = self.cfg
        dataset = make_dataset(cfg.dataset, cfg.data, cfg.label or None)
        metrics = make_metrics(cfg.metric)
        for _, m in metrics:
            m.reset()
        stats = [_OutputSummary() for _ in self.graph.output_tensors]
        dumped = not cfg.dump
        samples = 0
        progress = tqdm(batches(dataset, cfg.dataset, cfg.metric_batch_size, cfg.dataloader_workers),
                        total=-(-len(dataset) // cfg.metric_batch_size), desc="float forward", unit="batch")
        for batch in progress:
            inputs, labels = split_batch(batch, self.graph.input_tensors, cfg.dataset, self.device)
            outputs = self.graph.forward(inputs, keep_tensors=not dumped)
            if not dumped:
                self.dump_tensors()
                dumped = True
            for s, out in zip(stats, outputs):
                s.add(out)
            for spec, m in metrics:
                m(outputs, labels)
            samples += inputs[0].shape[0]
        for spec, m in metrics:
            value = float(m.compute())
            self.report["metrics"]["float"][spec] = value
            OPT_INFO(f"float {spec}: {value:.6f}")
        for t, s in zip(self.graph.output_tensors, stats):
            self.report["outputs"][t.name] = s.as_dict()
            OPT_INFO(f"output '{t.name}': {s.describe()}")
        self.report["samples"] = samples

    def dump_tensors(self) -> None:
        folder = self.cfg.dump_dir or os.path.join(self.cfg.output_dir, "dump")
        os.makedirs(folder, exist_ok=True)
        for node in self.graph.nodes:
            for t in node.outputs:
                safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in t.name)
                np.save(os.path.join(folder, f"{safe}.npy"), t.betensor.detach().cpu().numpy())
        OPT_INFO(f"dumped every tensor of the first batch into '{folder}'")

    def write_report(self) -> None:
        os.makedirs(self.cfg.output_dir, exist_ok=True)
        path = os.path.join(self.cfg.output_dir, f"{self.model_name}_report.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.report, f, indent=2)
        os.replace(tmp, path)
        self.report["report_file"] = path
        OPT_INFO(f"report written to '{path}'")


class _OutputSummary:
    """Running min/max/mean of an output over all batches."""

    def __init__(self):
        self.lo, self.hi, self.total, self.count, self.shape = float("inf"), float("-inf"), 0.0, 0, None

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().float()
        self.lo = min(self.lo, x.min().item())
        self.hi = max(self.hi, x.max().item())
        self.total += x.sum().item()
        self.count += x.numel()
        self.shape = list(x.shape[1:])

    def as_dict(self):
        return {"shape": self.shape, "min": self.lo, "max": self.hi, "mean": self.total / max(self.count, 1)}

    def describe(self) -> str:
        d = self.as_dict()
        return f"shape {d['shape']} per sample, min {d['min']:.6g}, max {d['max']:.6g}, mean {d['mean']:.6g}"
