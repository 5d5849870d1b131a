"""OptMaster: the pipeline that `npuopt --cfg` runs (steps of design.md), as a short list of
named stages; each stage's work lives in its own module. 1 load and check the IR; 2 zero-input
forward; 3 stage-1 passes; 4 calibration over `calibration_data` (or the `statistic_file`); 5
strategies -> ranges (and the mixed-precision search); 6 quantize layer by layer with per-layer
settings (cfg + opt_config), layers kept in float behind Quantize/DeQuantize layers; 8 zero-input
forward of the quantized graph; 9 write <out_ir_name>_o.txt/.bin and _opt_template.json; 10
metrics of the float and the quantized graph, per-layer similarity, report. Without `calibration_data`
(nor a statistic_file) only the float steps run, but on a pre-quantized model's IR (its grids)."""
import copy
import json
import os
import time

import torch

from .config import Config
from .data import make_dataset, set_batch_dims
from .data_checks import check_calibration_data, open_metric_data, zero_forward
from .errors import ConfigError
from .evaluation import evaluate
from .feed import Feed
from .fine_tuning import check_training_data, fine_tune
from .ir import is_pre_quantized, read_graph, write_graph
from .logger import OPT_INFO, OPT_WARN
from .memory import release_weights
from .mixed_precision import check_search_data, search_mixed_precision, search_precision
from .outputs import RunOutputs, run_inputs, safe_name
from .passes import run_stage1
from .plugins import load_plugins
from .quant import global_calibration as gc
from .quant.calibration import LayerCalibrator, attach_statistics
from .quant.norm_inputs import widen_norm_inputs
from .quant.plan_report import layers_briefly, quantization_rows
from .quant.plan import QuantPlan
from .quant.settings import write_template
from .quant.statistics import load_statistics_file, save_statistics
from .quant.unify_scales import unify_scales
from .ranks import Ranks, select_device


class OptMaster:
    """One run; in a job of several ranks (ranks.py), one rank's part; rank 0 writes the files."""

    def __init__(self, cfg: Config, ranks: Ranks = None):
        self.cfg = cfg
        self.ranks = ranks or Ranks()
        self.device = select_device(cfg.device)
        if self.ranks.parallel and self.device.type == "cuda":
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.methods = gc.resolve(cfg.global_calibration, self.ranks.world)  # the spec, resolved once
        self.graph = self.qgraph = self.settings = self.feed = None
        self.original = None  # the float graph as it was before global calibration edited it
        self.plan = self.metric_dataset = None  # the run's decisions (quant/plan.py); evaluate's data (check_data)
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
                "statistic info": os.path.join(out, f"{model}_statistic_info.npy"),
                "mixed precision front": os.path.join(out, f"{model}_mixed_precision.json"),
                "mixed precision plot": os.path.join(out, f"{model}_mixed_precision.png")}

    def run(self) -> dict:
        """The pipeline; its files appear only once all of it succeeded (npuopt/outputs.py)."""
        with self.outputs:
            return self.pipeline()

    def pipeline(self) -> dict:
        started = time.perf_counter()
        self.load()
        self.check_data()
        if self.cfg.skip_optimization:
            OPT_INFO("skip_optimization: no calibration, quantization nor IR written")
        elif self.cfg.calibration_data or os.path.isfile(self.cfg.statistic_file) or is_pre_quantized(self.graph):
            for stage in (self.stage1_passes, self.plan_settings, self.before_calibration, self.calibrate,
                          self.after_calibration, self.quantize):
                stage()
        else:
            OPT_WARN("no 'calibration_data' (nor an existing statistic_file): nothing is quantized")
        self.evaluate()
        self.report["seconds"] = round(time.perf_counter() - started, 3)
        self.write_report()
        self.ranks.barrier()  # every rank got here: rank 0 puts the files in place
        return self.report

    # ---- steps 1-2 ---------------------------------------------------------------
    def load(self) -> None:
        load_plugins()
        self.graph = read_graph(self.cfg.graph, self.cfg.bin or None)
        self.check_outputs()
        self.report["model"] = self.model_name
        OPT_INFO(f"loaded '{self.cfg.graph}': {len(self.graph.nodes)} layers, "
                 f"inputs {[t.name for t in self.graph.input_tensors]}, "
                 f"outputs {[t.name for t in self.graph.output_tensors]}")
        self.graph.check_supported()
        self.graph.to(self.device)
        zero_forward(self.graph, self.cfg, self.device)
        OPT_INFO("zero-input forward: every layer ran and every shape matches the IR")
        self.feed = Feed(self.cfg, self.graph, self.device, self.ranks)

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

    def check_data(self) -> None:
        """The calibration and metric data's first samples through the float graph (data_checks.py)."""
        if self.cfg.dataset:
            set_batch_dims(self.cfg)
        check_calibration_data(self.feed)
        check_search_data(self.cfg, self.ranks.parallel)
        check_training_data(self.cfg, self.ranks.parallel)
        if self.cfg.dataset and self.cfg.data:
            self.metric_dataset = open_metric_data(self.feed)

    # ---- steps 3-5 ---------------------------------------------------------------
    def stage1_passes(self) -> None:
        before = len(self.graph.nodes)
        run_stage1(self.graph, self.cfg.enable_pass_merge_matmul_mul)
        OPT_INFO(f"stage-1 passes: {before} -> {len(self.graph.nodes)} layers")

    def plan_settings(self) -> None:
        """The plan (quant/plan.py): each layer's settings, resolved once (also its attrs['qsettings'])."""
        self.plan = QuantPlan(self.cfg, self.graph, self.device)
        self.settings = self.plan.settings

    def before_calibration(self) -> None:
        self.global_calibration("before_calibration")
        self.graph.mark_integer_tensors(device=self.device)

    def calibrate(self) -> None:
        """Statistics of every tensor: loaded from statistic_file when it exists, else gathered over
        calibration_data (and saved where the cfg asks); none: a pre-quantized source's grids alone."""
        path = self.cfg.statistic_file
        if not (self.cfg.calibration_data or path and os.path.isfile(path)):
            return OPT_INFO("compat_quantized_model: no calibration_data; the source's grids quantize the model")
        meta = {"before_calibration": self.float_edits()}
        stats = self.load_statistics(path, meta) if path and os.path.isfile(path) else self.gather_statistics(meta)
        attach_statistics(self.graph, stats, self.cfg.ignore_missing_statistic)
        self.report["calibration"] = {"statistic_file": path or None}

    def float_edits(self):
        """The cfg's before-calibration methods that edit the float graph, as it names
        them: what the statistics describe, recorded in statistic_file."""
        return [call.named for call in self.methods
                if call.method.stage == "before_calibration" and call.method.edits_float]

    def load_statistics(self, path: str, meta: dict):
        OPT_INFO(f"statistic_file '{path}' exists: calibration skipped, statistics loaded from it")
        stats, saved = load_statistics_file(path)
        made, edits = saved.get("before_calibration", []), meta["before_calibration"]
        if made != edits:
            said = lambda edits: f"global_calibration '{' & '.join(edits)}'" if edits else "no method"  # noqa: E731
            raise ConfigError(f"statistic_file '{path}': its statistics are of the float graph as {said(made)} "
                              f"edited it, and this run's graph is as {said(edits)} edits it; "
                              "calibrate again (remove the file, or name another)")
        return stats

    def gather_statistics(self, meta: dict):
        cfg = self.cfg
        dataset = make_dataset(cfg.dataset, cfg.calibration_data, field="calibration_data")
        shard = self.feed.shard(dataset, cfg.calibration_batch_size, "calibration_data", shuffle=cfg.calibration_shuffe)
        stats = LayerCalibrator(self.graph, cfg, self.ranks).run(shard)
        OPT_INFO(f"calibration: {len(dataset)} samples, statistics of {len(stats)} tensors")
        meta = {"model": self.model_name, "samples": len(dataset), **meta}
        for what, path, said in (("field 'statistic_file'", cfg.statistic_file, "statistics saved to"),
                                 ("statistic info", cfg.save_statistic_info and self.output_files["statistic info"],
                                  "save_statistic_info: statistics saved to")):
            if path and self.ranks.main:
                save_statistics(self.outputs.stage(what, path), stats, meta)
                OPT_INFO(f"{said} '{path}'")
        return stats

    # ---- global calibration (stages 2-3) -------------------------------------------
    def calibration_batches(self):
        """The calibration set again, batch by batch, as graph inputs (how the methods
        that do not run data-parallel read it; a statistic_file alone cannot feed them)."""
        shard = self.calibration_shard()
        return (shard.graph_inputs(b) for _, b in shard.read())

    def calibration_shard(self, limit: int = None):
        """The first `limit` calibration batches (all: None) as a Feed.Shard (this rank reads its own)."""
        if not self.has_calibration_data():
            raise ConfigError("field 'global_calibration': its methods need 'dataset' and 'calibration_data'")
        dataset = make_dataset(self.cfg.dataset, self.cfg.calibration_data, field="calibration_data")
        return self.feed.shard(dataset, self.cfg.calibration_batch_size, "calibration_data", limit=limit)

    def has_calibration_data(self) -> bool:
        return bool(self.cfg.dataset and self.cfg.calibration_data)

    def calibration_context(self) -> gc.Context:
        return gc.Context(self.graph, self.calibration_batches, self.plan, self.device, self.has_calibration_data(),
                          field_of=self.cfg.of, shard=self.calibration_shard, ranks=self.ranks)

    def global_calibration(self, stage: str) -> None:
        """Run the cfg's global_calibration methods of `stage` on the float graph (settings: attrs['qsettings'])."""
        calls = [c for c in self.methods if c.method.stage == stage]
        if not calls:
            return
        if any(c.method.edits_float for c in calls) and self.metric_dataset is not None:  # the metrics' reference
            self.keep_original()
        started = time.perf_counter()
        ran = gc.run_stage(stage, calls, self.calibration_context())
        for node in self.graph.nodes:  # layers a method added (insert_norm_if_none) bring their settings
            self.plan.adopt(node)
        OPT_INFO(f"global calibration ({stage.replace('_', ' ')}): {' & '.join(ran)} in "
                 f"{time.perf_counter() - started:.1f} s")
        self.report.setdefault("global_calibration", []).extend(ran)

    def keep_original(self):  # the float model as read, before a stage edits it (metrics', fine-tuning's reference)
        self.original = self.original or copy.deepcopy(self.graph)
        return self.original

    def after_calibration(self) -> None:
        search_precision(self)  # global calibration then rounds the chosen formats
        self.global_calibration("after_calibration")
        unify_scales(self.cfg, self.graph, self.plan)
        widen_norm_inputs(self.plan)
        search_mixed_precision(self)
        fine_tune(self)

    # ---- steps 6-9 ---------------------------------------------------------------
    def quantize(self) -> None:
        """The quantized graph, checked by a zero-input forward, and its files."""
        self.qgraph = self.plan.build()
        keep = self.plan.float_kept
        if self.metric_dataset is None and self.graph.holds_large_weights():
            release_weights(self.graph)  # nothing runs it again (nor keeps a copy): half a decoder's peak
        self.qgraph.to(self.device)
        self.qgraph.zero_forward(device=self.device)
        OPT_INFO(f"quantized {sum(n.quantized for n in self.qgraph.nodes)} layers; kept in float: "
                 f"{layers_briefly(self.qgraph, keep)}; zero-input forward of the quantized graph passed")
        files, stage = self.output_files, self.outputs.stage
        txt, template, weights = (files[k] for k in ("quantized IR", "opt_config template", "quantized IR weights"))
        if self.ranks.main:
            with self.plan.as_written(self.qgraph) as written:
                write_graph(written, stage("quantized IR", txt), stage("quantized IR weights", weights),
                            os.path.basename(weights))
            write_template(stage("opt_config template", template), self.qgraph, self.settings)
            OPT_INFO(f"quantized IR '{txt}' and per-layer settings template '{template}' written (in place once "
                     f"the whole run succeeded)")
        self.report["quantized_ir"] = txt
        self.report["opt_template"] = template
        self.report["float_layers"] = sorted(keep)
        self.report["layers"] = quantization_rows(self.qgraph, self.graph)

    # ---- step 10 ---------------------------------------------------------------------
    def evaluate(self) -> None:
        cfg = self.cfg
        if not (cfg.dataset and cfg.data):
            OPT_INFO("no 'dataset'/'data' configured: skipping metrics")
            return
        dataset = self.metric_dataset or make_dataset(cfg.dataset, cfg.data, cfg.label or None, field="data")
        original, quantized = self.original or self.graph, self.qgraph is not None and cfg.eval_optimized_model
        graphs = ([("float", original)] if cfg.eval_original_model else []) + \
            ([("quant", self.plan.for_metrics(self.qgraph))] if quantized else [])
        if not graphs:
            OPT_INFO("eval_original_model and eval_optimized_model are false (or nothing was quantized): no metrics")
            return
        dump = (lambda: self.outputs.dump(original, self.dump_folder)) if cfg.dump and self.ranks.main else None
        evaluate(self.feed, dataset, graphs, self.report, dump)

    @property
    def dump_folder(self) -> str:
        return self.cfg.dump_dir or os.path.join(self.cfg.output_dir, "dump")

    def write_report(self) -> None:
        path = self.output_files["report"]
        if self.ranks.main:
            with open(self.outputs.stage("report", path), "w", encoding="utf-8") as f:
                json.dump(self.report, f, indent=2)
            OPT_INFO(f"report written to '{path}'")
        self.report["report_file"] = path
