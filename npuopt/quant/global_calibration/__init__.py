"""Global calibration: algorithms that look at the whole float graph and the
calibration data and change what quantization will decide (design.md, stages 2-3).

A method is a function registered under OPT's name with the stage it runs at:

* ``before_calibration``: edits the float graph itself (cross-layer equalization);
  calibration then measures the edited graph;
* ``after_calibration``: reads the calibrated graph, each layer's settings
  (``node.attrs["qsettings"]``) and the calibration batches, and plans weight
  roundings, ranges and the biases that fit them (``tensors.plan_weight_integers``,
  ``plan_weight_range``, ``weight_plans.plan_biases``) on the grid that ``tensors.weight_grid``
  gives; the op quantize functions then apply the plan.
  Decisions are read from the plan realised as a quantized graph
  (``ctx.plan.realised()``), kept current by ``ctx.plan.replan(layers)``.

``global_calibration = adaround[10,...] & bias_correction`` runs the methods in the
order given (OPT's syntax: ``name[params][scope]``). Methods live one per module in
this package and register themselves with ``@global_calibration`` (npuopt/registry.py,
the decorator a plugin uses); ``resolve`` turns the cfg's value into MethodCalls once
per run.
"""
import contextlib
import dataclasses
import re
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Tuple

import torch
from tqdm import tqdm

from ...config import PerLayer, default_of, parse_per_layer
from ...errors import ConfigError
from ...ranks import Ranks
from ...registry import GLOBAL_CALIBRATIONS, GlobalCalibrationMethod, unknown_global_calibrations
from ...registry import global_calibration  # noqa: F401  (the decorator, as this package's methods import it)

@dataclass
class Context:
    """What a method may read and change: the float graph (after stage-1 passes), the
    per-layer settings (each node's attrs['qsettings'] while methods run), the
    calibration batches (`batches()` yields lists of graph inputs, read anew at each
    call; `has_data` says whether the cfg gives any), the device, the cfg's fields
    per layer (`field_of(name, node)`) and the run's plan (quant/plan.py): a method
    reads decisions from `plan.realised()` and, after editing the plan of some layers,
    calls `plan.replan(names)`; it never builds a quantized graph itself."""
    graph: object
    batches: Callable[[], Iterator[List[torch.Tensor]]]
    plan: object
    device: torch.device = torch.device("cpu")
    has_data: bool = True
    scope: Optional[Callable[[object], bool]] = None  # the running method's layers (OPT's [types], [(ids)], {regex})
    field_of: Callable[[str, object], object] = lambda name, node: default_of(name)  # a cfg field for a layer (cfg.of)
    shard: Optional[Callable[[Optional[int]], object]] = None  # the first n calibration batches (all: None) as a
    #  Feed.Shard, whose units this rank reads: how a method that runs data-parallel (`data_parallel`) reads them
    ranks: Ranks = dataclasses.field(default_factory=Ranks)

    def progress(self, items, desc: str, total: int = None, unit: str = "layer") -> Iterator:
        return tqdm(items, desc=desc, total=total, unit=unit, leave=False, disable=not self.ranks.main)

    def in_scope(self, node) -> bool:
        """Whether the running method applies to `node` (every layer when its scope is not given;
        never one holding a pre-quantized source's grids, which are decided: ir/compat.py)."""
        return not node.holds_source_grids and (self.scope is None or self.scope(node))


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside: a float convolution's last bits depend on how
    oneDNN splits it over threads, and a method's roundings follow from those bits, so
    float forwards whose results a method decides from run here; the quantized IR then
    stays byte-identical whatever the thread count (issue 13)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def scope_of(text: str) -> Optional[Callable[[object], bool]]:
    """Whether a layer is one `name[params][scope]` names, from the text after the name
    (None: all of them): OPT's scopes are the per-layer keys of the cfg's `<key:value>` form."""
    key = re.sub(r"^\[[^\]]*\]", "", text or "")
    if not key:
        return None
    layers: PerLayer = parse_per_layer(f"false & <{key}:true>", lambda v: v == "true")
    return lambda node: bool(layers.get(node))


@dataclass(frozen=True)
class MethodCall:
    """One method of the cfg's global_calibration, resolved: the method, its params, the
    layers it applies to (None: all) and its text after the name, as the cfg gives it."""
    method: GlobalCalibrationMethod
    params: Tuple[float, ...]
    scope: Optional[Callable[[object], bool]]
    text: str

    @property
    def named(self) -> str:
        return f"{self.method.name}{self.text}"


def resolve(spec, ranks: int = 1) -> Tuple[MethodCall, ...]:
    """The cfg's parsed global_calibration [(name, params, text)] resolved once per run:
    each method found in the registry and its scope made (unknown names refused, and in
    a job of several `ranks` the methods that do not run data-parallel)."""
    wrong = unknown_global_calibrations(spec)
    if wrong:
        raise ConfigError(f"field 'global_calibration': {wrong}")
    calls = tuple(MethodCall(GLOBAL_CALIBRATIONS[name], tuple(params), scope_of(text), text)
                  for name, params, text in spec or [])
    serial = [c.named for c in calls if not c.method.data_parallel]
    if ranks > 1 and serial:
        raise ConfigError(f"field 'global_calibration': {', '.join(serial)} cannot run in a job of {ranks} ranks "
                          f"yet (it reads the whole calibration set in one process); run it without torchrun")
    return calls


def run_stage(stage: str, calls: Tuple[MethodCall, ...], ctx: Context) -> List[str]:
    """Run the calls that belong to `stage`, in order, each with its own scope in a copy
    of `ctx`; their names."""
    ran = []
    for call in calls:
        if call.method.stage == stage:
            call.method.run(dataclasses.replace(ctx, scope=call.scope), list(call.params))
            if call.method.edits_float:  # edits replan cannot follow: the plan is realised anew
                ctx.plan.forget()
            ran.append(call.method.name)
    return ran


def _load_methods() -> None:
    import importlib
    import pkgutil
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_methods()
