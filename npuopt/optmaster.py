"""OptMaster: the pipeline that `npuopt --cfg` runs (steps of design.md).

1 load and check the IR; 2 zero-input forward; 3 stage-1 passes; 4 calibration
over `calibration_data` (or the `statistic_file`); 5 strategies -> ranges;
6 quantize layer by layer with per-layer settings (cfg + opt_config), layers
kept in float behind Quantize/DeQuantize layers; 8 zero-input forward of the
quantized graph; 9 write <out_ir_name>_o.txt/.bin and <out_ir_name>_opt_template.json;
10 metrics of the float and the quantized graph, per-layer similarity, report.
Without `calibration_data` (and no statistic_file to load) only the float
steps run.
"""
import contextlib
import copy
import json
import os
import time
from typing import List

import numpy as np
import torch
from tqdm import tqdm

from .config import Config
from .data import (batches, call_metric, collate_of, label_batches, make_dataset, make_metrics, metric_report,
                   metric_value, set_batch_dims, split_batch)
from .errors import ConfigError, IRError
from .ir import read_graph, write_graph
from .logger import OPT_INFO, OPT_WARN
from .outputs import RunOutputs, safe_name
from .passes import run_stage1
from .plugins import load_plugins
from .quant.calibration import Calibrator, attach_statistics
from .quant.settings import apply_cfg_per_layer, layer_settings, write_template
from .quant.statistics import Statistics

FORWARD_BUDGET = 384 << 20  # bytes of working memory one forward of the evaluation may take


def select_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("field 'device': cuda was asked for, but torch sees no CUDA device")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def run_inputs(cfg: Config) -> dict:
    """The files a run reads (a dataset file without its ':split' selector), which it never overwrites."""
    files = {f"field '{name}'": getattr(cfg, name) for name in ("graph", "calibration_data", "data", "label",
                                                                 "opt_config")}
    files = {what: p if os.path.exists(p) else p.split(":")[0] for what, p in files.items() if p}
    files["field 'bin'"] = cfg.bin or os.path.splitext(cfg.graph)[0] + ".bin"
    if os.path.isfile(cfg.statistic_file):  # else it is an output
        files["field 'statistic_file'"] = cfg.statistic_file
    files["the cfg file"] = cfg.source
    return files


def run_stage1_passes(graph) -> None:
    before = len(graph.nodes)
    run_stage1(graph)
    OPT_INFO(f"stage-1 passes: {before} -> {len(graph.nodes)} layers")


class OptMaster:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.device = select_device(cfg.device)
        self.graph = None
        self.original = None  # the float graph as it was before global calibration edited it
        self.qgraph = None
        self.settings = None
        self.metric_dataset = None  # opened by check_metric_data, reused by evaluate
        self.outputs = RunOutputs(run_inputs(cfg))
        self.report = {"model": None, "device": str(self.device), "metrics": {"float": {}}, "outputs": {}}

    @property
    def model_name(self) -> str:
        return self.cfg.model_name or self.graph.name

    @property
    def out_ir_name(self) -> str:
        return self.cfg.out_ir_name or self.model_name

    @property
    def output_files(self) -> dict:
        """What the run may write into output_dir, by what it is."""
        out, ir, model = self.cfg.output_dir, self.out_ir_name, self.model_name
        return {"quantized IR": os.path.join(out, f"{ir}_o.txt"),
                "quantized IR weights": os.path.join(out, f"{ir}_o.bin"),
                "opt_config template": os.path.join(out, f"{ir}_opt_template.json"),
                "report": os.path.join(out, f"{model}_report.json"),
                "statistic info": os.path.join(out, f"{model}_statistic_info.npy")}

    @property
    def dump_folder(self) -> str:
        return self.cfg.dump_dir or os.path.join(self.cfg.output_dir, "dump")

    def run(self) -> dict:
        """The pipeline; its files appear only once all of it succeeded (npuopt/outputs.py)."""
        with self.outputs:
            return self.pipeline()

    def pipeline(self) -> dict:
        import npuopt.ops  # noqa: F401  (forwards and quantize functions)
        load_plugins()
        started = time.perf_counter()
        self.graph = read_graph(self.cfg.graph, self.cfg.bin or None)
        self.check_outputs()
        self.report["model"] = self.model_name
        OPT_INFO(f"loaded '{self.cfg.graph}': {len(self.graph.nodes)} layers, "
                 f"inputs {[t.name for t in self.graph.input_tensors]}, "
                 f"outputs {[t.name for t in self.graph.output_tensors]}")
        self.graph.check_supported()
        self.graph.to(self.device)
        self.graph.zero_forward(device=self.device)
        OPT_INFO("zero-input forward: every layer ran and every shape matches the IR")
        if self.cfg.dataset:
            set_batch_dims(self.cfg)
        self.check_calibration_data()
        if self.cfg.dataset and self.cfg.data:
            self.check_metric_data()
        stats_file = self.cfg.statistic_file
        if self.cfg.skip_optimization:
            OPT_INFO("skip_optimization: no calibration, quantization nor IR written")
        elif self.cfg.calibration_data or (stats_file and os.path.isfile(stats_file)):
            run_stage1_passes(self.graph)
            self.plan_settings()
            self.global_calibration("before_calibration")
            self.graph.mark_integer_tensors(device=self.device)
            self.calibrate()
            self.quantize()
        else:
            OPT_WARN("no 'calibration_data' (nor an existing statistic_file): nothing is quantized")
        if self.cfg.dataset and self.cfg.data:
            self.evaluate()
        else:
            OPT_INFO("no 'dataset'/'data' configured: skipping metrics")
        self.report["seconds"] = round(time.perf_counter() - started, 3)
        self.write_report()
        return self.report

    # ---- checks before any work ---------------------------------------------
    def check_outputs(self) -> None:
        """Every file the run may write, by name and place (npuopt/outputs.py)."""
        cfg = self.cfg
        if not cfg.model_name:
            try:
                safe_name(self.graph.name)
            except ValueError:
                raise ConfigError(f"the IR's model_name '{self.graph.name}' cannot name output files (it has a "
                                  f"'/' or '..'); set the cfg field 'model_name'") from None
        self.outputs.check("field 'output_dir'", cfg.output_dir, folder=True)
        for what, path in self.output_files.items():
            self.outputs.check(what, path)
        if cfg.statistic_file and not os.path.isfile(cfg.statistic_file):
            self.outputs.check("field 'statistic_file'", cfg.statistic_file)
        if cfg.dump:
            self.outputs.check("field 'dump_dir'", self.dump_folder, folder=True)

    def probe(self, dataset, size: int):
        """The float graph's outputs on the dataset's first `size` samples, and their labels:
        data that does not fit the model, or constants that overflow float32 on it, stop
        the run here, before any time is spent."""
        n = min(len(dataset), size)
        subset = torch.utils.data.Subset(dataset, range(n))
        batch = next(batches(subset, self.cfg.dataset, n, 0, collate_fn=collate_of(dataset)))
        inputs, labels = self.split(batch)
        return self.forward(self.graph, inputs, after_node=check_overflow), labels

    def check_calibration_data(self) -> None:
        """The calibration set's first samples through the float graph, when calibration
        will read it (not a statistic_file)."""
        cfg = self.cfg
        if cfg.skip_optimization or not cfg.calibration_data or os.path.isfile(cfg.statistic_file):
            return
        if not cfg.dataset:
            raise ConfigError("field 'dataset' is required to read calibration_data")
        self.probe(make_dataset(cfg.dataset, cfg.calibration_data), 2)

    def check_metric_data(self) -> None:
        """Open `data` (with `label`) and the metrics, and put the first metric batch through
        the float graph and every metric (a metric may read several samples of a batch),
        then every label of the file through every metric:
        data or labels that do not fit the model or the metrics stop the run here."""
        cfg = self.cfg
        self.metric_dataset = make_dataset(cfg.dataset, cfg.data, cfg.label or None)
        metrics = make_metrics(cfg.metric)  # unknown metrics and bad arguments, before any forward
        outputs, labels = self.probe(self.metric_dataset, cfg.metric_batch_size)
        for spec, metric in metrics:
            metric.reset()
            call_metric(spec, metric, outputs, labels, self.labels_of(0, outputs[0].shape[0]))
        self.check_labels(metrics, outputs)

    def labels_of(self, start: int, stop: int) -> str:
        """Where samples start..stop-1 of the metric data take their labels from, for messages."""
        source = f"label file '{self.cfg.label}'" if self.cfg.label else f"dataset '{self.cfg.dataset}'"
        return f"{source} (samples {start}-{stop - 1})"

    def check_labels(self, metrics, outputs) -> None:
        """Every label of a built-in dataset through every metric, beside all-zero outputs of
        the model's shapes, batch by batch: a bad label anywhere in the file stops the run
        now, not after calibration."""
        for start, batch in label_batches(self.metric_dataset, self.cfg.dataset, self.cfg.metric_batch_size):
            zeros = [torch.zeros((len(batch),) + tuple(o.shape[1:]), dtype=o.dtype, device=o.device) for o in outputs]
            for spec, metric in metrics:
                call_metric(spec, metric, zeros, batch, self.labels_of(start, start + len(batch)))

    # ---- steps 4-5 ---------------------------------------------------------
    def float_edits(self) -> List[str]:
        """The cfg's before-calibration methods that edit the float graph, as it names
        them: what the statistics describe, recorded in statistic_file."""
        from .quant.global_calibration import methods_of
        return [f"{name}{text}" for (name, _, text), (method, _, _) in
                zip(self.cfg.global_calibration, methods_of(self.cfg.global_calibration))
                if method.stage == "before_calibration" and method.edits_float]

    def calibrate(self) -> None:
        from .quant.statistics import load_statistics_file, save_statistics
        cfg = self.cfg
        path = cfg.statistic_file
        edits = self.float_edits()
        meta = {"before_calibration": edits}
        if path and os.path.isfile(path):
            OPT_INFO(f"statistic_file '{path}' exists: calibration skipped, statistics loaded from it")
            stats, saved = load_statistics_file(path)
            made = saved.get("before_calibration", [])
            if made != edits:
                said = lambda edits: f"global_calibration '{' & '.join(edits)}'" if edits else "no method"  # noqa: E731
                raise ConfigError(f"statistic_file '{path}': its statistics are of the float graph as {said(made)} "
                                  f"edited it, and this run's graph is as {said(edits)} edits it; "
                                  "calibrate again (remove the file, or name another)")
        else:
            dataset = make_dataset(cfg.dataset, cfg.calibration_data)
            size = self.batch_size(cfg.calibration_batch_size)
            total = -(-len(dataset) // size)
            calibrator = LayerCalibrator(self.graph, cfg)
            feed = (self.graph_inputs(self.split(b)[0])
                    for b in tqdm(batches(dataset, cfg.dataset, size, cfg.dataloader_workers,
                                          shuffle=cfg.calibration_shuffe, collate_fn=collate_of(dataset)),
                                  total=total, desc="calibration", unit="batch"))
            stats = calibrator.run(feed)
            OPT_INFO(f"calibration: {len(dataset)} samples, statistics of {len(stats)} tensors")
            if path:
                save_statistics(self.outputs.stage("field 'statistic_file'", path), stats,
                                {"model": self.model_name, "samples": len(dataset), **meta})
                OPT_INFO(f"statistics saved to '{path}'")
            if cfg.save_statistic_info:
                info = self.output_files["statistic info"]
                save_statistics(self.outputs.stage("statistic info", info), stats,
                                {"model": self.model_name, "samples": len(dataset), **meta})
                OPT_INFO(f"save_statistic_info: statistics saved to '{info}'")
        attach_statistics(self.graph, stats)
        self.report["calibration"] = {"statistic_file": path or None}

    # ---- global calibration (stages 2-3) -------------------------------------
    def calibration_batches(self):
        """The calibration set again, batch by batch, as graph inputs (for the methods
        that need data; a statistic_file alone cannot feed them)."""
        cfg = self.cfg
        if not self.has_calibration_data():
            raise ConfigError("field 'global_calibration': its methods need 'dataset' and 'calibration_data'")
        dataset = make_dataset(cfg.dataset, cfg.calibration_data)
        for b in batches(dataset, cfg.dataset, self.batch_size(cfg.calibration_batch_size), cfg.dataloader_workers,
                         collate_fn=collate_of(dataset)):
            yield self.graph_inputs(self.split(b)[0])

    def has_calibration_data(self) -> bool:
        return bool(self.cfg.dataset and self.cfg.calibration_data)

    def global_calibration(self, stage: str) -> None:
        """Run the cfg's global_calibration methods of `stage` on the float graph (each
        layer's settings in its attrs['qsettings'])."""
        from .quant.global_calibration import Context, methods_of, run_stage
        methods = [m for m, _, _ in methods_of(self.cfg.global_calibration) if m.stage == stage]
        if not methods:
            return
        if self.original is None and any(m.edits_float for m in methods):
            # the float model as read stays the reference of the metrics and similarity
            self.original = copy.deepcopy(self.graph)
        started = time.perf_counter()
        ran = run_stage(stage, self.cfg.global_calibration, Context(self.graph, self.calibration_batches,
                                                                   self.device, self.has_calibration_data(),
                                                                   field_of=self.cfg.of))
        for node in self.graph.nodes:  # layers a method added (insert_norm_if_none) bring their settings
            self.settings.setdefault(node.name, node.attrs["qsettings"])
        OPT_INFO(f"global calibration ({stage.replace('_', ' ')}): {' & '.join(ran)} in "
                 f"{time.perf_counter() - started:.1f} s")
        self.report.setdefault("global_calibration", []).extend(ran)

    # ---- steps 6-9 -----------------------------------------------------------
    def plan_settings(self) -> None:
        """Each layer's settings (cfg, its per-layer forms, opt_config), also in the layer's
        attrs['qsettings'], where global calibration reads them."""
        cfg = self.cfg
        self.settings = layer_settings(cfg, self.graph, cfg.opt_config)
        for field, keys in apply_cfg_per_layer(cfg, self.graph.nodes, self.settings).items():
            OPT_WARN(f"cfg field '{field}': per-layer part(s) {', '.join(keys)} name no layer of the graph")
        modes = cfg.per_layer.get("trigger_float_op")
        if modes is not None and any(m != "disable" for m in modes.values()):
            OPT_INFO("trigger_float_op: layers in a float mode are kept in float; npuopt computes and "
                     "writes them in float32 (it does not emulate float16/bfloat16)")
        for node in self.graph.nodes:
            node.attrs["qsettings"] = self.settings[node.name]
        restricted = sorted({st.quantize_method_for_weight for st in self.settings.values() if st.weight_bits <= 4
                             and "restricted" in st.quantize_method_for_weight})
        if restricted:
            OPT_INFO(f"{restricted[0]} with 4 or fewer weight bits uses one level less than the bits give (-7..7 "
                     "at 4 bits); per_channel_asymmetric or a *_full_range method keeps it (README: 4-bit weights)")

    def quantize(self) -> None:
        from .quant.plan_report import quantization_rows
        from .quant.quantizer import build_quantized_graph, float_layers, quantized_copy
        from .quant.unify_scales import concat_rules, multi_input_rules, unify_input_scales
        cfg = self.cfg
        self.global_calibration("after_calibration")
        for field, rules in (("unify_scales_for_concat", cfg.unify_scales_for_concat and concat_rules(cfg, self.graph)),
                             ("unify_scales_for_multi_inputs_operators", multi_input_rules(cfg, self.graph))):
            if rules:
                unify_input_scales(self.graph, quantized_copy(self.graph, self.device), rules, field)
        keep = float_layers(self.graph, self.settings)
        with quantized_graph_edits(self.graph, cfg):
            self.qgraph, keep = build_quantized_graph(self.graph, self.settings, keep)
        self.qgraph.to(self.device)
        self.qgraph.zero_forward(device=self.device)
        OPT_INFO(f"quantized {sum(n.quantized for n in self.qgraph.nodes)} layers; kept in float: "
                 f"{sorted(keep) or 'none'}; zero-input forward of the quantized graph passed")
        files, stage = self.output_files, self.outputs.stage
        txt, template = files["quantized IR"], files["opt_config template"]
        write_graph(self.qgraph, stage("quantized IR", txt),
                    stage("quantized IR weights", files["quantized IR weights"]))
        write_template(stage("opt_config template", template), self.qgraph, self.settings)
        OPT_INFO(f"quantized IR '{txt}' and per-layer settings template '{template}' written (in place once "
                 f"the whole run succeeded)")
        self.report["quantized_ir"] = txt
        self.report["opt_template"] = template
        self.report["float_layers"] = sorted(keep)
        self.report["layers"] = quantization_rows(self.qgraph, self.graph)

    # ---- step 10 ---------------------------------------------------------------
    def evaluate(self) -> None:
        from .quant.compare import dequantized, layer_similarity
        cfg = self.cfg
        dataset = self.metric_dataset
        if dataset is None:
            dataset = make_dataset(cfg.dataset, cfg.data, cfg.label or None)
        original = self.graph if self.original is None else self.original
        graphs = ([("float", original)] if cfg.eval_original_model else []) + \
            ([("quant", self.qgraph)] if self.qgraph is not None and cfg.eval_optimized_model else [])
        if not graphs:
            OPT_INFO("eval_original_model and eval_optimized_model are false (or nothing was quantized): no metrics")
            return
        metrics = {kind: make_metrics(cfg.metric) for kind, _ in graphs}
        for ms in metrics.values():
            for _, m in ms:
                m.reset()
        stats = [_OutputSummary() for _ in self.graph.output_tensors]
        agreement = [_Agreement() for _ in self.graph.output_tensors]
        dumped = not cfg.dump
        samples, first = 0, None
        size = self.batch_size(cfg.metric_batch_size)
        total = -(-len(dataset) // size)
        desc = " + ".join({"float": "float", "quant": "quantized"}[k] for k, _ in graphs) + " forward"
        float_outputs = None
        for batch in tqdm(batches(dataset, cfg.dataset, size, cfg.dataloader_workers, collate_fn=collate_of(dataset)),
                          total=total, desc=desc, unit="batch"):
            inputs, labels = self.split(batch)
            if first is None:
                first = [x[:cfg.similarity_data_num] for x in inputs]
            for kind, graph in graphs:
                keep = kind == "float" and not dumped
                outputs = self.forward(graph, inputs, keep_tensors=keep)
                if keep:
                    self.dump_tensors()
                    dumped = True
                if kind == "float":
                    for s, out in zip(stats, outputs):
                        s.add(out)
                    float_outputs = outputs
                else:
                    outputs = [dequantized(t, v) for t, v in zip(graph.output_tensors, outputs)]
                    if float_outputs is not None:
                        for a, f, q in zip(agreement, float_outputs, outputs):
                            a.add(f, q)
                for spec, m in metrics[kind]:
                    call_metric(spec, m, outputs, labels, self.labels_of(samples, samples + inputs[0].shape[0]))
            samples += inputs[0].shape[0]
        for kind, _ in graphs:
            self.report["metrics"].setdefault(kind, {})
            for spec, m in metrics[kind]:
                value = metric_value(spec, m)
                self.report["metrics"][kind][spec] = value
                OPT_INFO(f"{kind} {spec}: {', '.join(f'{v:.6f}' for v in np.atleast_1d(value))}")
                shown = metric_report(m)
                if shown:
                    OPT_INFO(f"{kind} {spec} report: {shown}")
        kinds = [k for k, _ in graphs]
        if kinds == ["float", "quant"]:
            self.report["metrics"]["drop"] = {spec: np.subtract(self.report["metrics"]["float"][spec], v).tolist()
                                              for spec, v in self.report["metrics"]["quant"].items()}
            self.report["agreement"] = {t.name: a.fraction() for t, a in zip(self.graph.output_tensors, agreement)}
            for name, value in self.report["agreement"].items():
                OPT_INFO(f"output '{name}': top-1 of quantized equals top-1 of float on {value:.2%} of samples")
            rows = layer_similarity(original, self.qgraph, first)
            self.report["layer_similarity"] = rows
            for r in rows[:5]:
                OPT_INFO(f"similarity (worst first): layer '{r['layer']}' ({r['type']}): "
                         f"cosine {r['cosine']:.6f}, mse {r['mse']:.6g}")
        for t, s in zip(self.graph.output_tensors, stats if "float" in kinds else []):
            self.report["outputs"][t.name] = s.as_dict()
            OPT_INFO(f"output '{t.name}': {s.describe()}")
        self.report["samples"] = samples

    # ---- batches as the cfg says (without_batch_dim, data_batch_dim) -------------
    def batch_size(self, size: int) -> int:
        """without_batch_dim: one sample a batch, as the Compass Optimizer does."""
        return 1 if self.cfg.without_batch_dim else size

    def split(self, batch):
        return split_batch(batch, self.graph.input_tensors, self.cfg.dataset, self.device,
                           batch_dim=self.cfg.data_batch_dim, without_batch_dim=self.cfg.without_batch_dim)

    def graph_inputs(self, inputs):
        """without_batch_dim: the graph takes the sample without the batch axis."""
        return [x[0] for x in inputs] if self.cfg.without_batch_dim else inputs

    def forward(self, graph, inputs, **kwargs):
        """The graph's outputs, batch first (without_batch_dim: a batch axis of 1 added back).
        A batch runs in chunks of graph.samples_within(FORWARD_BUDGET) samples, so memory
        follows the model, not metric_batch_size (outputs are per sample: the same values)."""
        inputs = self.graph_inputs(inputs)
        chunk = graph.samples_within(FORWARD_BUDGET)
        batch = inputs[0].shape[0] if inputs and inputs[0].dim() else 1
        if kwargs.get("keep_tensors") or self.cfg.without_batch_dim or batch <= chunk:
            outputs = graph.forward(inputs, **kwargs)
        else:
            parts = [[o.clone() for o in graph.forward([x[i:i + chunk] for x in inputs], **kwargs)]
                     for i in range(0, batch, chunk)]
            outputs = [torch.cat(p, dim=0) for p in zip(*parts)]
        return [o.unsqueeze(0) for o in outputs] if self.cfg.without_batch_dim else outputs

    def dump_tensors(self) -> None:
        folder = self.dump_folder
        for node in self.graph.nodes:
            for t in node.outputs:
                safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in t.name)
                path = self.outputs.stage("dump", os.path.join(folder, f"{safe}.npy"))
                np.save(path, t.betensor.detach().cpu().numpy())
        OPT_INFO(f"dumped every tensor of the first batch into '{folder}'")

    def write_report(self) -> None:
        path = self.output_files["report"]
        with open(self.outputs.stage("report", path), "w", encoding="utf-8") as f:
            json.dump(self.report, f, indent=2)
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


class _Agreement:
    """How often the quantized output's argmax (per sample) equals the float one's:
    for a classifier, the share of predictions quantization left unchanged."""

    def __init__(self):
        self.same, self.count = 0, 0

    def add(self, float_out: torch.Tensor, quant_out: torch.Tensor) -> None:
        f = float_out.reshape(float_out.shape[0], -1).argmax(dim=1)
        q = quant_out.reshape(quant_out.shape[0], -1).argmax(dim=1)
        self.same += int((f == q).sum().item())
        self.count += f.numel()

    def fraction(self) -> float:
        return self.same / self.count if self.count else 0.0


class LayerCalibrator(Calibrator):
    """Calibration with the cfg's per-layer running_statistic_momentum and histc_bins, and
    trim_infinity_before_statistic: statistics see the tensor clipped as asked (clip: to
    [lo, hi]; second: to the extreme values strictly inside (min(lo, 0), max(hi, 0))),
    while the forward goes on with the tensor unchanged."""

    def __init__(self, graph, cfg):
        super().__init__(graph, cfg.histc_bins, cfg.running_statistic_momentum)
        self.trims = {}
        for node in graph.nodes:
            bins, momentum = cfg.of("histc_bins", node), cfg.of("running_statistic_momentum", node)
            for t in node.outputs:
                self.stats[t.name] = Statistics(bins, momentum)
            trim = cfg.of("trim_infinity_before_statistic", node)
            if trim != ("clip", float("-inf"), float("inf")):
                self.trims[node.name] = trim

    def observe(self, node) -> None:
        trim = self.trims.get(node.name)
        if trim is None:
            return super().observe(node)
        kept = [t.betensor for t in node.outputs]
        try:
            for t in node.outputs:
                if t.betensor.is_floating_point():
                    t.betensor = trimmed(t.betensor, *trim)
            super().observe(node)
        finally:
            for t, v in zip(node.outputs, kept):
                t.betensor = v


def check_overflow(node) -> None:
    """A float layer with constants whose output holds Inf or NaN from finite inputs: its
    constants overflow float32 (weights near 3e38, say); one line naming the layer."""
    if node.quantized or not node.constants or _finite(node.outputs) or not _finite(node.inputs):
        return
    sizes = ", ".join(f"{k} up to {float(c.betensor.abs().max()):.3g}" for k, c in node.constants.items()
                      if c.betensor.is_floating_point() and c.betensor.numel())
    raise IRError(f"layer '{node.name}' ({node.type}): its float32 output overflows to Inf/NaN from finite inputs "
                  f"on the first samples; check its constants ({sizes})")


def _finite(tensors) -> bool:
    return all(bool(torch.isfinite(t.betensor).all()) for t in tensors if t.betensor.is_floating_point())


def trimmed(x: torch.Tensor, mode: str, lo: float, hi: float) -> torch.Tensor:
    if mode == "clip":
        return x.clamp(lo, hi)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    inside = x[(x > lo) & (x < hi)]
    if inside.numel() == 0:
        return torch.zeros_like(x)
    return x.clamp(min(inside.min().item(), 0.0), max(inside.max().item(), 0.0))


@contextlib.contextmanager
def quantized_graph_edits(graph, cfg):
    """What the cfg changes in the quantized graph only, made on the float graph while
    the quantized copy is built, then undone (the float graph's metrics stay as they were):
    set_qinvariant_for_start_nodes: those Input/Constant layers' float values are taken
    as integers (int32, scale 1, zero point 0), as for index inputs;
    resize_degrade_to_nearest: Resize/Interp layers use the nearest method."""
    from .dtype import Dtype
    undo = []
    wanted = set(cfg.set_qinvariant_for_start_nodes or [])
    degraded = []
    for node in graph.nodes:
        if node.type in ("Input", "Constant") and node.layer_id in wanted:
            wanted.discard(node.layer_id)
            for t in node.outputs:
                if t.dtype.is_float:
                    undo.append((t, t.dtype, t.qinvariant))
                    t.dtype, t.qinvariant = Dtype.INT32, True
        if node.type in ("Resize", "Interp") and cfg.of("resize_degrade_to_nearest", node) \
                and str(node.params.get("method", "")).upper() != "NEAREST":
            degraded.append((node, node.params.get("method")))
            node.params["method"] = "NEAREST"
    if wanted:
        OPT_WARN(f"set_qinvariant_for_start_nodes: layer id(s) {sorted(wanted)} are no Input/Constant layer")
    if degraded:
        OPT_INFO(f"resize_degrade_to_nearest: {len(degraded)} layer(s) resize with NEAREST in the quantized "
                 f"graph: {', '.join(n.name for n, _ in degraded[:5])}")
    try:
        yield
    finally:
        for t, dtype, qinvariant in undo:
            t.dtype, t.qinvariant = dtype, qinvariant
        for node, method in degraded:
            node.params["method"] = method
