"""Global calibration: algorithms that look at the whole float graph and the
calibration data and change what quantization will decide (design.md, stages 2-3).

A method is a function registered under OPT's name with the stage it runs at:

* ``before_calibration``: edits the float graph itself (cross-layer equalization);
  calibration then measures the edited graph;
* ``after_calibration``: reads the calibrated graph, each layer's settings
  (``node.attrs["qsettings"]``) and the calibration batches, and edits float biases
  or plans weight roundings (``tensors.plan_weight_integers``) on the grid that
  ``tensors.weight_grid`` gives; the op quantize functions then apply the plan.

``global_calibration = adaround[10,...] & bias_correction`` runs the methods in the
order given (OPT's syntax: ``name[params][scope]``). Methods live one per module in
this package and register themselves with ``@global_calibration``.
"""
import contextlib
import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional

import torch
from tqdm import tqdm

from ...config import PerLayer, default_of, parse_per_layer
from ...errors import ConfigError

STAGES = ("before_calibration", "after_calibration")


@dataclass
class Method:
    name: str
    stage: str
    run: Callable
    doc: str
    edits_float: bool  # whether it changes the float graph (not only the plan): the metrics then need a copy


METHODS: Dict[str, Method] = {}


def global_calibration(name: str, stage: str, edits_float: bool = True):
    """Register a global calibration method `fn(ctx, params)` under `name`;
    `edits_float=False` says it only plans (roundings, ranges) and leaves the float
    graph's weights and biases as they are."""
    if stage not in STAGES:
        raise ValueError(f"global calibration '{name}': stage must be one of {STAGES}")

    def wrap(fn):
        METHODS[name.lower()] = Method(name.lower(), stage, fn, (fn.__doc__ or "").strip().split("\n")[0], edits_float)
        return fn
    return wrap


@dataclass
class Context:
    """What a method may read and change: the float graph (after stage-1 passes), the
    per-layer settings (each node's attrs['qsettings'] while methods run), the
    calibration batches (`batches()` yields lists of graph inputs, read anew at each
    call; `has_data` says whether the cfg gives any), the device, and the cfg's fields
    per layer (`field_of(name, node)`)."""
    graph: object
    batches: Callable[[], Iterator[List[torch.Tensor]]]
    device: torch.device = torch.device("cpu")
    has_data: bool = True
    scope: Optional[Callable[[object], bool]] = None  # the running method's layers (OPT's [types], [(ids)], {regex})
    field_of: Callable[[str, object], object] = lambda name, node: default_of(name)  # a cfg field for a layer (cfg.of)

    def progress(self, items, desc: str, total: int = None, unit: str = "layer") -> Iterator:
        return tqdm(items, desc=desc, total=total, unit=unit, leave=False)

    def in_scope(self, node) -> bool:
        """Whether the running method applies to `node` (every layer when its scope is not given)."""
        return self.scope is None or self.scope(node)


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


def unknown_methods(spec) -> str:
    """What is wrong with the names of the cfg's parsed global_calibration ("" if nothing)."""
    missing = [name for name, _, _ in spec or [] if name not in METHODS]
    return f"no global calibration method {', '.join(repr(m) for m in missing)}; " \
           f"npuopt has: {', '.join(sorted(METHODS)) or 'none'}" if missing else ""


def methods_of(spec) -> List[tuple]:
    """[(Method, params, scope)] of the cfg's parsed global_calibration (scope_of each
    method's text), unknown ones refused."""
    wrong = unknown_methods(spec)
    if wrong:
        raise ConfigError(f"field 'global_calibration': {wrong}")
    return [(METHODS[name], params, scope_of(text)) for name, params, text in spec or []]


def run_stage(stage: str, spec, ctx: Context) -> List[str]:
    """Run the methods of `spec` that belong to `stage`, in order; their names."""
    ran = []
    for method, params, scope in methods_of(spec):
        if method.stage == stage:
            ctx.scope = scope
            method.run(ctx, params)
            ran.append(method.name)
    ctx.scope = None
    return ran


def _load_methods() -> None:
    import importlib
    import pkgutil
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_methods()
