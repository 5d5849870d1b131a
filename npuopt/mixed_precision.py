"""`mixed_precision_auto_search = batches,threshold,L|G`, the Compass Optimizer's naive
search (its features/autosearch/mixed_precision_naive_search.py), on npuopt's plan.

The float model and the quantized one are scored with the first metric on the first
`batches` batches of the metric data. Taking the deeper layers to be the more sensitive,
the search looks for one split p (a layer's position in the graph, which is the float
IR's layer_id where no stage-1 pass added layers): every layer from p on gets 16-bit
activations and weights, 48-bit biases and 10-bit tables. p is halved from the last
layer until the drop is within the threshold (L: drop <= threshold; G: drop >= it), then
moved forward by 1, 2, 4, ... while it stays within; if even the 16-bit tail never gets
there, the same search keeps a tail in float (float32_preferred). Each candidate sets
those layers' settings in the plan, which builds the quantized graph again.

As the tool chain's, it tunes on the data it then reports and only raises a suffix.
npuopt's own search (per-layer candidates, size budgets, a Pareto front, measured on
calibration data: precision_search.py) runs from here too (search_precision)."""
import dataclasses
import itertools
import time
from typing import Dict, List, Tuple

from tqdm import tqdm

from .errors import ConfigError
from .evaluation import metric_score
from .logger import OPT_INFO, OPT_WARN
from .precision_report import write_front, write_plot
from .precision_search import AS_SET, BUDGETS, OutputError, PrecisionSearch, layer_options, spread
from .quant import global_calibration as gc
from .quant.candidates import parse_candidates
from .quant.precision_costs import Costs
from .quant.weight_plans import has_stale_plans

WIDE = dict(activation_bits=16, weight_bits=16, bias_bits=48, lut_items_in_bits=10)
FLOAT = dict(trigger_float_op="float32_preferred")


@dataclasses.dataclass
class NaiveSearch:
    plan: object
    score_of: object          # graph, its kind ("float" or "quant") -> the first metric's value
    threshold: float
    less: bool
    evaluations: int = 0

    def __post_init__(self):
        self.names = [n.name for n in self.plan.graph.nodes]
        self.original: Dict[str, dict] = {n: dict(self.plan.values[n]) for n in self.names}
        self.float_score = self.score_of(self.plan.graph, "float")

    def within(self, drop: float) -> bool:
        return drop <= self.threshold if self.less else drop >= self.threshold

    def drop(self, split: int, tail: dict) -> float:
        """The drop with the layers from position `split` on given `tail` settings."""
        self.apply(split, tail)
        self.evaluations += 1
        score = self.score_of(self.plan.build(), "quant")
        OPT_INFO(f"mixed_precision_auto_search: evaluation {self.evaluations}, layers {split}+ "
                 f"{'16-bit' if tail is WIDE else 'float'}: score {score:.6f} (float {self.float_score:.6f})")
        return self.float_score - score

    def apply(self, split: int, tail: dict) -> None:
        self.plan.set_values({name: {**self.original[name], **(tail if i >= split else {})}
                              for i, name in enumerate(self.names)})

    def raised(self, split: int, tail: dict) -> bool:
        """Whether a split asks for more than the layers already have (the tool chain skips it)."""
        if tail is FLOAT:
            return True
        return any(self.original[n]["activation_bits"] < 16 or self.original[n]["weight_bits"] < 16
                   for n in self.names[split:])

    def split(self, tail: dict, drop: float) -> tuple:
        """The tool chain's search_pid: (split, its drop)."""
        pid, previous = len(self.names), len(self.names) + 1
        while not self.within(drop):
            previous, pid = pid, pid // 2
            if pid >= previous:
                break
            if self.raised(pid, tail):
                drop = self.drop(pid, tail)
        start, step, best_drop = pid, 0, drop
        while True:
            candidate = start + 2 ** step
            step += 1
            if candidate >= previous:
                break
            drop = self.drop(candidate, tail)
            if not self.within(drop):
                break
            pid, best_drop = candidate, drop
        return pid, best_drop


def naive_search(plan, score_of, batches: int, threshold: float, less: bool) -> dict:
    """Run the search; the plan keeps the chosen settings. Returns what the report says."""
    search = NaiveSearch(plan, score_of, threshold, less)
    total = len(search.names)
    plain = search.drop(total, WIDE)   # no layer raised: the quantized model as set
    split, drop = search.split(WIDE, plain)
    tail = WIDE
    if not search.within(drop):
        split, drop = search.split(FLOAT, plain)
        tail = FLOAT
    search.apply(split, tail)
    kind = "16-bit" if tail is WIDE else "float"
    kept = f"layers 0 to {split - 1} as set, " if split > 0 else ""
    OPT_INFO(f"mixed_precision_auto_search (first {batches} batches of the metric data, {search.evaluations} "
             f"evaluations): {kept}{split} to {total - 1} {kind} (drop {drop:.6f})" if split < total else
             f"mixed_precision_auto_search ({search.evaluations} evaluations): every layer as set (the drop "
             f"{drop:.6f} is within {threshold})")
    raised: List[str] = search.names[split:]
    regridded = [n for n in raised if has_stale_plans(plan.graph.node(n))]
    if regridded:
        OPT_INFO(f"mixed_precision_auto_search: {len(regridded)} raised layers round their weights to nearest on "
                 f"the new grid (global calibration's roundings were for the grid before)")
    return {"batches": batches, "threshold": threshold, "less": less, "float_score": search.float_score,
            "drop": drop, "split": split, "tail": kind if raised else "none", "layers": raised,
            "evaluations": search.evaluations}


def check_search_data(cfg, parallel: bool = False) -> None:
    """The searches need their data, npuopt's a budget and one process (before any work is done)."""
    if cfg.mixed_precision_auto_search[0] > 0 and not (cfg.dataset and cfg.data and cfg.metric):
        raise ConfigError("field 'mixed_precision_auto_search': the search scores the model with the first metric on "
                          "the metric data: set 'dataset', 'data' and 'metric'")
    if not cfg.mixed_precision_candidates:
        return
    if cfg.mixed_precision_auto_search[0] > 0:
        raise ConfigError("fields 'mixed_precision_candidates' and 'mixed_precision_auto_search': two searches of the "
                          "layers' precision; set one")
    if not (cfg.dataset and cfg.calibration_data):
        raise ConfigError("field 'mixed_precision_candidates': the search measures on the calibration data: set "
                          "'dataset' and 'calibration_data'")
    if parallel:
        raise ConfigError("field 'mixed_precision_candidates': the search runs in one process (each rank reads its "
                          "own calibration batches); run it without torchrun")
    if not (cfg.mixed_precision_weight_bits or cfg.mixed_precision_weight_bytes or cfg.mixed_precision_bitops or
            cfg.mixed_precision_conversions >= 0 or cfg.mixed_precision_error):
        raise ConfigError("field 'mixed_precision_candidates': set a budget (mixed_precision_weight_bits, "
                          "mixed_precision_weight_bytes, mixed_precision_bitops, mixed_precision_conversions or "
                          "mixed_precision_error)")


def search_mixed_precision(master) -> None:
    """The cfg's mixed_precision_auto_search (batches > 0) on the run's plan; its result in the report."""
    batches, threshold, less = master.cfg.mixed_precision_auto_search
    if batches > 0:
        feed, dataset = master.feed, master.metric_dataset

        def score_of(graph, kind: str) -> float:
            return metric_score(feed, dataset, graph, kind, batches)
        master.report["mixed_precision_auto_search"] = naive_search(master.plan, score_of, batches, threshold, less)


def search_precision(master) -> None:
    """The cfg's mixed_precision_candidates search (precision_search.py) on the run's plan,
    which keeps the chosen settings; its front and plot written, its result in the report."""
    cfg = master.cfg
    candidates = parse_candidates(cfg.mixed_precision_candidates)
    if not candidates:
        return
    started = time.perf_counter()
    costs = Costs(master.graph)
    options = layer_options(master.plan, candidates, costs)
    if not options:
        raise ConfigError(f"field 'mixed_precision_candidates': none of {cfg.mixed_precision_candidates} applies "
                          f"to a layer of the graph")
    budgets = {k: float(getattr(cfg, field)) * (1e9 if k == "bitops" else 1)  # the field counts giga bit-ops
               for k, field in BUDGETS.items() if getattr(cfg, field) >= (0 if k == "conversions" else 1e-12)}
    search = PrecisionSearch(master.plan, costs, options, budgets, cfg.mixed_precision_error)
    search.check_reachable()
    learn, skip = learning_batches(master)
    batches, samples = search_batches(master, skip)
    error_of = OutputError(master.graph, batches)
    if learn:
        ctx = dataclasses.replace(master.calibration_context(),
                                  batches=lambda: itertools.islice(master.calibration_batches(), learn),
                                  shard=lambda limit=None: master.calibration_shard(min(limit or learn, learn)))
        search.learn_roundings(lambda: gc.run_stage("after_calibration", master.methods, ctx))
    search.measure_sensitivities(error_of)
    front, chosen = search.front_and_choice()
    for point in tqdm(spread(front, chosen, cfg.mixed_precision_points), desc="mixed precision: front points",
                      unit="point"):
        point.measured = search.measure(point.choice, error_of)
    search.put_back()  # the run's global calibration rounds the chosen formats
    master.plan.set_values(search.values_of(chosen.choice))
    summary = {"candidates": [c.name for c in candidates], "budgets": {BUDGETS[k]: v for k, v in budgets.items()},
               "samples": samples, "forwards": error_of.forwards, "global_calibrations": search.calibrations,
               "seconds": round(time.perf_counter() - started, 3), "chosen": front.index(chosen),
               "layers": {name: search.options[name][i].name for name, i in chosen.choice.items()
                          if search.options[name][i].name != AS_SET}}
    OPT_INFO(f"mixed precision: {len(front)} points on the front; chosen: {len(summary['layers'])} of {len(options)} "
             f"layers changed, {chosen.sizes.average_weight_bits:.3f} average weight bits, predicted output error "
             f"{chosen.predicted:.4g}, measured {chosen.measured:.4g} ({error_of.forwards} forwards over {samples} "
             f"calibration samples, {summary['seconds']:.1f} s)")
    files = master.output_files
    write_front(master.outputs.stage("mixed precision front", files["mixed precision front"]), search, front,
                summary, cfg.opt_config)
    write_plot(master.outputs.stage("mixed precision plot", files["mixed precision plot"]), search, front, chosen)
    master.report["mixed_precision_search"] = {**summary, "predicted_error": chosen.predicted,
                                               "measured_error": chosen.measured, **chosen.sizes.as_dict(),
                                               "front": files["mixed precision front"],
                                               "plot": files["mixed precision plot"]}


def learning_batches(master) -> Tuple[int, int]:
    """(how many calibration batches the global calibration methods learn the options'
    roundings from, how many the measuring skips): the first half, and the search measures
    on the rest (on the samples they learned from, AdaRound's roundings look many times
    better than on others); none without after-calibration methods."""
    if not any(c.method.stage == "after_calibration" for c in master.methods):
        return 0, 0
    units = len(master.calibration_shard())
    if units < 2:
        OPT_WARN("mixed precision: one calibration batch, so the search measures on the samples global calibration "
                 "learned from, which flatters the formats it rounds; a smaller calibration_batch_size avoids it")
        return units, 0
    return (units + 1) // 2, (units + 1) // 2


def search_batches(master, skip: int = 0) -> Tuple[List[list], int]:
    """Up to mixed_precision_samples calibration samples after the first `skip` batches, as graph
    inputs held in memory."""
    limit = master.cfg.mixed_precision_samples
    batches, samples = [], 0
    for inputs in itertools.islice(master.calibration_batches(), skip, None):
        if limit and samples >= limit:
            break
        take = inputs[0].shape[0] if not limit else min(inputs[0].shape[0], limit - samples)
        batches.append([x[:take] if x.dim() and x.shape[0] == inputs[0].shape[0] else x for x in inputs])
        samples += take
    return batches, samples

