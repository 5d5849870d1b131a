"""npuopt's mixed-precision search (`mixed_precision_candidates` and the budgets
`mixed_precision_weight_bits`, `_weight_bytes`, `_bitops`, `_conversions`, `_error`).

Each layer may keep its settings or take a candidate format (quant/candidates.py) that
applies to it. The search measures, on the first `mixed_precision_samples` calibration
samples (never the metric data), the relative output error (squared error over squared
float output, averaged over the graph's outputs) of npuopt's exact quantized forward:
once with every layer at its most precise option (the top), and once per other option
of each layer with the rest at the top; a candidate changes one layer's settings in the
plan, which quantizes again only the layers it reaches. The error of any choice is
predicted as the top's plus each layer's increase (noise of different layers adds up);
where another option of a layer measured less error than its top, that one is its top
(move_top_to_least_error).

From the top, a greedy walk takes, step by step, the move of one layer to a smaller
option that costs the least predicted error per size saved (the sizes: quant/
precision_costs.py, each divided by its budget) down to every layer's smallest option;
the walk's Pareto-optimal points are the front. The chosen point meets every size budget
with the least predicted error or, given an error budget, is the smallest within it.
Up to `mixed_precision_points` points of the front, the chosen one among them, are
measured too. The stage (mixed_precision.search_precision) sets the chosen settings in
the plan: global calibration (GPTQ, AdaRound) then runs on those formats, and the
template and IR carry them.

With global calibration methods after calibration, the options that lower a layer's
weight bits are measured with the roundings those methods give them, learned on half
the calibration batches (learn_roundings) and measured on the other half. Inputs of
16-bit mean/variance layers are widened as the run widens them after the search
(quant/norm_inputs.py) for every measured choice."""
import dataclasses
from typing import Dict, List, Optional, Tuple

import torch
from tqdm import tqdm

from .config import SHAPE_ONLY_TYPES
from .errors import ConfigError
from .logger import OPT_INFO, OPT_WARN
from .quant.compare import dequantized
from .quant.norm_inputs import norm_inputs, widen_norm_inputs
from .quant.precision_costs import Costs, Sizes, activation_bits_of, weight_bits_of
from .quant.quantizer import stays_float
from .quant.settings import QuantSettings
from .registry import BOUNDARY_TYPES

AS_SET = "as set"
# budget fields, by the size they bound
BUDGETS = {"average_weight_bits": "mixed_precision_weight_bits", "weight_bytes": "mixed_precision_weight_bytes",
           "bitops": "mixed_precision_bitops", "conversions": "mixed_precision_conversions"}


@dataclasses.dataclass
class Option:
    """One format a layer may take: its settings values, as a whole opt_config entry."""
    name: str
    values: dict
    settings: QuantSettings


@dataclasses.dataclass
class Point:
    choice: Dict[str, int]     # layer -> index of its option
    predicted: float
    sizes: Sizes
    measured: float = None


class OutputError:
    """The relative output error of quantized graphs against the float graph's outputs
    on fixed inputs; counts the forwards."""

    def __init__(self, float_graph, batches: List[list]):
        self.batches = batches
        self.reference = [[o.detach().to(torch.float64) for o in float_graph.forward(b)] for b in batches]
        self.forwards = 1

    def __call__(self, qgraph) -> float:
        self.forwards += 1
        errors = torch.zeros(len(qgraph.output_tensors), dtype=torch.float64)
        powers = torch.zeros_like(errors)
        for inputs, reference in zip(self.batches, self.reference):
            for k, (t, q, f) in enumerate(zip(qgraph.output_tensors, qgraph.forward(inputs), reference)):
                d = dequantized(t, q).to(torch.float64).reshape(f.shape)
                ok = torch.isfinite(f) & torch.isfinite(d)
                errors[k] += float(((d - f)[ok] ** 2).sum())
                powers[k] += float((f[ok] ** 2).sum())
        return float((errors / powers.clamp(min=1e-30)).mean())


def layer_options(plan, candidates, costs: Costs) -> Dict[str, List[Option]]:
    """Each layer's options: its settings as set, then the candidates that apply to it and
    change it (weight candidates: the linear layers whose weights Costs counts)."""
    out = {}
    for node in plan.graph.nodes:
        base = plan.values[node.name]
        st = plan.settings[node.name]
        if node.type in BOUNDARY_TYPES or stays_float(node, plan.settings) or st.fp8_activations:
            continue
        options = [Option(AS_SET, dict(base), st)]
        weighted = node.name in costs.params and st.weight_type == "int"
        for c in candidates:
            if c.needs_weights and not weighted or c.needs_computing and node.type in SHAPE_ONLY_TYPES:
                continue
            values = {**base, **c.settings}
            if any(values == o.values for o in options):
                continue
            options.append(Option(c.name, values, QuantSettings(**values)))
        if len(options) > 1:
            out[node.name] = options
    return out


class PrecisionSearch:
    def __init__(self, plan, costs: Costs, options: Dict[str, List[Option]], budgets: Dict[str, float],
                 error_budget: float):
        self.plan, self.options, self.budgets, self.error_budget = plan, options, budgets, error_budget
        self.costs = costs
        self.fixed = dict(plan.settings)
        self.top = {name: max(range(len(opts)), key=lambda i: (self.precision(name, opts[i]), -i))
                    for name, opts in options.items()}
        self._scale = self.sizes(self.top)
        self.top_error = 0.0
        self.increase: Dict[str, List[float]] = {}
        self.norm_inputs = [(t, src.name, t.ranges_set) for t, src in norm_inputs(plan.graph)]
        self.original: Dict[str, tuple] = {}  # every layer's state before global calibration ran in the search
        self.learned: Dict[Tuple[str, int], tuple] = {}  # (layer, option) -> its state after global calibration
        self.calibrations = 0

    def precision(self, name: str, option: Option) -> int:
        st = option.settings
        in_float = bool(st.trigger_float_op)
        return activation_bits_of(st, in_float) + (weight_bits_of(st) if name in self.costs.params else 0)

    def settings_of(self, choice: Dict[str, int]) -> Dict[str, QuantSettings]:
        out = dict(self.fixed)
        out.update({name: self.options[name][i].settings for name, i in {**self.top, **choice}.items()})
        return out

    def sizes(self, choice: Dict[str, int]) -> Sizes:
        return self.costs.sizes(self.settings_of(choice))

    def size(self, choice: Dict[str, int], sizes: Optional[Sizes] = None) -> float:
        """The sizes the budgets bound, each divided by its budget, summed (no size budget:
        weight bits and bit-operations, relative to the top's); `sizes`: the choice's, if known."""
        s = sizes if sizes is not None else self.sizes(choice)
        if self.budgets:
            return sum(getattr(s, k) / (b + 1 if k == "conversions" else b) for k, b in self.budgets.items())
        top = self._scale
        return s.average_weight_bits / max(top.average_weight_bits, 1e-9) + s.bitops / max(top.bitops, 1e-9)

    def smallest(self, keys=None) -> Dict[str, int]:
        """The choice of least size, one layer at a time until none changes (conversions depend
        on neighbours), from the top and from the settings as set (a top of float layers
        cannot shed its conversions one layer at a time): the least largest excess over a
        budget of `keys` (all by default; relative to it), then the least size."""
        keys = list(self.budgets) if keys is None else keys

        def key(choice):
            sizes = self.sizes(choice)
            return max(((getattr(sizes, k) - self.budgets[k]) / (self.budgets[k] or 1) for k in keys),
                       default=0.0), self.size(choice, sizes)

        def descend(choice):
            changed = True
            while changed:
                changed = False
                for name, opts in self.options.items():
                    best = min(range(len(opts)), key=lambda i: (key({**choice, name: i}), i != choice[name]))
                    changed |= best != choice[name]
                    choice[name] = best
            return choice
        return min((descend(dict(self.top)), descend({name: 0 for name in self.options})), key=key)

    def check_reachable(self) -> None:
        """Size budgets no choice meets, alone or together, are an error before anything is measured."""
        low = self.sizes(self.smallest())
        over = [k for k, budget in self.budgets.items() if getattr(low, k) > budget]
        for key in over:
            least = getattr(self.sizes(self.smallest([key])), key)
            if least > self.budgets[key]:
                raise ConfigError(f"field '{BUDGETS[key]}': the candidates reach {least:.6g} at the least, above the "
                                  f"budget {self.budgets[key]:g}")
        if over:
            raise ConfigError(f"fields {', '.join(repr(BUDGETS[k]) for k in self.budgets)}: the candidates meet each "
                              f"budget but not all at once (the closest choice: "
                              + ", ".join(f"{BUDGETS[k]} {getattr(low, k):.6g}" for k in self.budgets) + ")")

    # ---- measuring --------------------------------------------------------------------
    def learn_roundings(self, calibrate) -> None:
        """For each candidate that lowers some layer's weight bits below its top: every layer
        that may take it takes it, the rest their top, and `calibrate()` (the cfg's global
        calibration methods after calibration: GPTQ, AdaRound...) rounds them; what it
        planned for those layers is kept with the option, and the float graph put back.
        Those options are then measured as the run will quantize them, not rounded to nearest."""
        lowering = {}
        for name, opts in self.options.items():
            top = weight_bits_of(opts[self.top[name]].settings)
            for i, o in enumerate(opts):
                if name in self.costs.params and weight_bits_of(o.settings) < top:
                    lowering.setdefault(o.name, {})[name] = i
        if lowering:
            self.original = {n.name: self.plan.layer_state(n.name) for n in self.plan.graph.nodes}
        for choice in lowering.values():
            self.plan.set_values(self.values_of({**self.top, **choice}))
            calibrate()
            self.calibrations += 1
            self.learned.update({(name, i): self.plan.layer_state(name) for name, i in choice.items()})
            self.put_back()

    def put_back(self) -> None:
        """The float graph as before the search (its layers' planned roundings, constants, ranges)."""
        for name, state in self.original.items():
            self.plan.restore_layer_state(name, state)
        for t, _, ranges in self.norm_inputs:
            t.ranges_set = ranges
        self.plan.forget()

    def widen_norm_inputs(self) -> None:
        """The 16-bit mean/variance layers' inputs widened as the run will widen them after the
        search (quant/norm_inputs.py), for the settings the plan has now."""
        if self.norm_inputs:
            for t, _, ranges in self.norm_inputs:
                t.ranges_set = ranges
            self.plan.replan(*{name for _, name, _ in self.norm_inputs})
            widen_norm_inputs(self.plan)

    def state_of(self, name: str, i: int) -> Optional[tuple]:
        """What global calibration planned for a layer's option (None: nothing ran)."""
        return self.learned.get((name, i), self.original.get(name))

    def restore(self, name: str, i: int) -> None:
        state = self.state_of(name, i)
        if state is not None:
            self.plan.restore_layer_state(name, state)

    def measure_sensitivities(self, error_of) -> None:
        plan = self.plan
        plan.set_values({name: self.options[name][i].values for name, i in self.top.items()})
        self.widen_norm_inputs()
        self.top_error = error_of(plan.realised())
        trials = [(name, i) for name, opts in self.options.items() for i in range(len(opts)) if i != self.top[name]]
        for name in self.options:
            self.increase[name] = [0.0] * len(self.options[name])
        for name, i in tqdm(trials, desc="mixed precision: sensitivities", unit="option"):
            self.set_option(name, i)
            self.increase[name][i] = error_of(plan.realised()) - self.top_error
            self.set_option(name, self.top[name])
        self.move_top_to_least_error(error_of)

    def move_top_to_least_error(self, error_of) -> None:
        """Where one of a layer's options measured less error than its top (options that
        are not ordered: w8 against a16 on 4-bit weights, whose bits the top adds up), that
        option becomes its top, the increases count from it and the new top is measured
        (one forward). Else the decreases, measured one at a time from a noisy top, add up
        to more than its whole error: a choice predicted below zero, measured far above."""
        better = {name: min(range(len(inc)), key=inc.__getitem__) for name, inc in self.increase.items()}
        better = {name: i for name, i in better.items() if self.increase[name][i] < 0}
        if not better:
            return
        for name, i in better.items():
            least = self.increase[name][i]
            self.increase[name] = [v - least for v in self.increase[name]]
            self.top[name] = i
        self._scale = self.sizes(self.top)
        self.top_error = self.measure(self.top, error_of)
        name, i = next(iter(better.items()))
        OPT_INFO(f"mixed precision: {len(better)} layer(s) measured less error with another option than with their "
                 f"most bits (e.g. '{name}': {self.options[name][i].name}); the errors count from those options "
                 f"(output error {self.top_error:.4g})")

    def set_option(self, name: str, i: int) -> None:
        """One layer's option in the plan, which quantizes again the layers it reaches."""
        now, values = self.plan.values[name], self.options[name][i].values
        self.restore(name, i)
        self.plan.change(name, **{k: v for k, v in values.items() if now.get(k) != v})
        self.widen_norm_inputs()

    def predicted(self, choice: Dict[str, int]) -> float:
        return self.top_error + sum(self.increase[name][i] for name, i in choice.items())

    def measure(self, choice: Dict[str, int], error_of) -> float:
        for name, i in choice.items():
            self.restore(name, i)
        self.plan.set_values(self.values_of(choice))
        self.widen_norm_inputs()
        return error_of(self.plan.realised())

    def values_of(self, choice: Dict[str, int]) -> Dict[str, dict]:
        return {name: self.options[name][i].values for name, i in choice.items()}

    # ---- the front ----------------------------------------------------------------------
    def walk(self) -> List[Point]:
        """The greedy walk from the top to the bottom, as points."""
        choice = dict(self.top)
        points = [self.point(choice)]
        while True:
            here, best = self.size(choice), None
            for name, opts in self.options.items():
                for i in range(len(opts)):
                    if i == choice[name]:
                        continue
                    saved = here - self.size({**choice, name: i})
                    if saved <= 1e-12:
                        continue
                    rate = (self.increase[name][i] - self.increase[name][choice[name]]) / saved
                    if best is None or rate < best[0]:
                        best = (rate, name, i)
            if best is None:
                return points
            choice[best[1]] = best[2]
            points.append(self.point(choice))

    def point(self, choice: Dict[str, int]) -> Point:
        return Point(dict(choice), self.predicted(choice), self.sizes(choice))

    def front(self, walk: List[Point]) -> List[Point]:
        """The points no other beats on both size and predicted error, largest first."""
        ordered = sorted(walk, key=lambda p: (self.size(p.choice), p.predicted))
        kept, best = [], float("inf")
        for p in ordered:
            if p.predicted < best:
                kept.append(p)
                best = p.predicted
        return kept[::-1]

    def front_and_choice(self) -> Tuple[List[Point], Point]:
        """The front of the walk and the point chosen on it (refined off the walk: put on
        the front, without the points it beats)."""
        walk = self.walk()
        front = self.front(walk)
        chosen = self.choose(front)
        if chosen not in front:
            size = self.size(chosen.choice)
            front = sorted([p for p in front if not (size <= self.size(p.choice) and chosen.predicted <= p.predicted)]
                           + [chosen], key=lambda p: (-self.size(p.choice), p.predicted))
        return front, front[front.index(chosen)]  # the front's own object, which gets measured

    def choose(self, front: List[Point]) -> Point:
        fits = [p for p in front if all(getattr(p.sizes, k) <= b for k, b in self.budgets.items())]
        if not fits:  # the walk met no budget at once; check_reachable found this choice within all
            fits = [self.point(self.smallest())]
        if self.error_budget:
            within = [p for p in fits if p.predicted <= self.error_budget]
            if within:
                return min(within, key=lambda p: self.size(p.choice))
            OPT_WARN(f"mixed precision: no point within the size budgets predicts an output error within "
                     f"mixed_precision_error {self.error_budget:g}; the least error is taken")
        return self.point(self.refine(min(fits, key=lambda p: p.predicted).choice))

    def refine(self, choice: Dict[str, int]) -> Dict[str, int]:
        """Moves of one layer, or of two (one up, one down), that lower the predicted error
        and stay within the size budgets, the best first, until none does: the walk's
        steps are one layer at a time, and a budget often has room for a better mix."""
        keys = list(self.budgets)
        limit = torch.tensor([self.budgets[k] for k in keys], dtype=torch.float64)
        while True:
            here = self.sizes(choice)
            base = torch.tensor([getattr(here, k) for k in keys], dtype=torch.float64)
            moves = [(n, i) for n, opts in self.options.items() for i in range(len(opts)) if i != choice[n]]
            if not moves:
                return choice
            delta = torch.stack([torch.tensor([getattr(self.sizes({**choice, n: i}), k) for k in keys],
                                              dtype=torch.float64) - base for n, i in moves])
            gain = torch.tensor([self.increase[n][i] - self.increase[n][choice[n]] for n, i in moves],
                                dtype=torch.float64)
            total = gain[:, None] + gain[None, :]
            total.fill_diagonal_(float("inf"))
            same = torch.tensor([[a[0] == b[0] for b in moves] for a in moves])
            total[same & ~torch.eye(len(moves), dtype=torch.bool)] = float("inf")
            total = torch.cat([gain[:, None], total], dim=1)  # column 0: the move alone
            tried = 0
            for flat in torch.argsort(total.reshape(-1)).tolist():
                a, b = divmod(flat, len(moves) + 1)
                if total[a, b] >= -1e-15 or tried > 64:
                    return choice
                step = dict([moves[a]] + ([moves[b - 1]] if b else []))
                estimate = base + delta[a] + (delta[b - 1] if b else 0)
                if bool((estimate > limit).any()):
                    continue
                tried += 1
                trial = {**choice, **step}
                if all(getattr(self.sizes(trial), k) <= v for k, v in self.budgets.items()):
                    choice = trial
                    break
            else:
                return choice


def spread(front: List[Point], chosen: Point, count: int) -> List[Point]:
    """Up to `count` (>= 3) points of the front, evenly along it: its ends and the chosen one among them."""
    n = len(front)
    if n <= count:
        return list(front)
    picks = [round(j * (n - 1) / (count - 1)) for j in range(count)]
    c = front.index(chosen)
    if c not in picks:  # the chosen one takes the place of the nearest pick between the ends
        j = min(range(1, count - 1), key=lambda j: abs(picks[j] - c))
        picks[j] = c
    return [front[i] for i in sorted(set(picks))]
