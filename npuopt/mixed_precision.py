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

As the tool chain's, it tunes on the data it then reports and only raises a suffix;
npuopt's own search (per-layer candidates, size budgets, a Pareto front) is the issue
"Automatic mixed precision"."""
import dataclasses
from typing import Dict, List

from .errors import ConfigError
from .evaluation import metric_score
from .logger import OPT_INFO

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
    return {"batches": batches, "threshold": threshold, "less": less, "float_score": search.float_score,
            "drop": drop, "split": split, "tail": kind if raised else "none", "layers": raised,
            "evaluations": search.evaluations}


def check_search_data(cfg) -> None:
    """The search needs the metric data (before any work is done)."""
    if cfg.mixed_precision_auto_search[0] > 0 and not (cfg.dataset and cfg.data and cfg.metric):
        raise ConfigError("field 'mixed_precision_auto_search': the search scores the model with the first metric on "
                          "the metric data: set 'dataset', 'data' and 'metric'")


def search_mixed_precision(master) -> None:
    """The cfg's mixed_precision_auto_search (batches > 0) on the run's plan; its result in the report."""
    batches, threshold, less = master.cfg.mixed_precision_auto_search
    if batches > 0:
        feed, dataset = master.feed, master.metric_dataset

        def score_of(graph, kind: str) -> float:
            return metric_score(feed, dataset, graph, kind, batches)
        master.report["mixed_precision_auto_search"] = naive_search(master.plan, score_of, batches, threshold, less)
