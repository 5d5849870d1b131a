"""The shape of the code (docs/architecture.md): lower layers never import upper ones, no
import cycle among npuopt's modules, and sizes that keep the pipeline and each module
readable.

An import counts wherever it is written (inside a function too); importing `a.b.c`
counts as importing the packages `a.b` and `a` as well (Python runs their __init__
first); a package whose __init__ loads its modules by name (pkgutil) counts as
importing each of them."""
import ast
import re
from pathlib import Path
from typing import Dict, Set

import networkx as nx

from conftest import REPO

PACKAGE = REPO / "npuopt"
FIELD_TABLE = "npuopt.config"  # the one module allowed past MODULE_LINES: the cfg field table
MODULE_LINES = 400
PIPELINE, PIPELINE_LINES, STAGE_LINES = "npuopt.optmaster", 300, 40
# docs/architecture.md's layers, bottom up: a module imports from its own layer or below.
# A module is in the layer of the longest name here that is it or a package above it.
LAYERS = [
    ["npuopt", "npuopt.errors", "npuopt.logger", "npuopt.dtype", "npuopt.outputs", "npuopt.memory", "npuopt.registry",
     "npuopt.ranks", "npuopt.metric", "npuopt.quant", "npuopt.quant.qmath", "npuopt.quant.statistics",
     "npuopt.quant.strategies", "npuopt.quant.formats", "npuopt.quant.candidates", "npuopt.quant.minifloat",
     "npuopt.quant.bias_bits", "npuopt.ir.values"],
    ["npuopt.cfg_reader", "npuopt.config", "npuopt.quant.settings"],
    ["npuopt.tensor", "npuopt.node", "npuopt.graph", "npuopt.dynamic_shapes", "npuopt.samples_together",
     "npuopt.quant.fields",
     "npuopt.quant.weight_plans"],
    ["npuopt.ir", "npuopt.ir.reader", "npuopt.ir.writer"],
    ["npuopt.quant.tensors", "npuopt.quant.weight_ranges", "npuopt.quant.compare"],
    ["npuopt.ops"],
    ["npuopt.passes", "npuopt.consumer", "npuopt.quant.calibration", "npuopt.quant.quantizer", "npuopt.quant.plan",
     "npuopt.quant.norm_inputs", "npuopt.quant.precision_costs",
     "npuopt.quant.unify_scales", "npuopt.quant.global_calibration", "npuopt.quant.plan_report",
     "npuopt.quant.qconfig", "npuopt.quant.trainable", "npuopt.data",
     "npuopt.datasets_common"],
    ["npuopt.ir.builder", "npuopt.feed", "npuopt.data_checks", "npuopt.evaluation", "npuopt.mixed_precision",
     "npuopt.precision_search", "npuopt.precision_report", "npuopt.fine_tuning",
     "npuopt.plugins", "npuopt.optmaster", "npuopt.framework", "npuopt.features", "npuopt.utils", "npuopt.compass_ops"],
    ["npuopt.cli", "npuopt.__main__"],
]


def module_files() -> Dict[str, Path]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported(module: str, path: Path, modules: Set[str]) -> Set[str]:
    """The npuopt modules `module` imports, by the rules of this file's docstring."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source = path.read_text(encoding="utf-8")
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            names += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    if path.name == "__init__.py" and "pkgutil.iter_modules" in source:
        names += [m for m in modules if m.rpartition(".")[0] == module]
    out = set()
    for name in names:
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        while name in modules:  # the module and the packages above it
            if name != module and not module.startswith(name + "."):
                out.add(name)
            name = name.rpartition(".")[0]
    return out


def import_graph() -> nx.DiGraph:
    files = module_files()
    graph = nx.DiGraph()
    for module, path in files.items():
        graph.add_node(module)
        graph.add_edges_from((module, target) for target in imported(module, path, set(files)))
    return graph


def test_no_import_cycle():
    graph = import_graph()
    assert graph.number_of_nodes() > 100 and graph.number_of_edges() > 300  # the walk found the imports
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    detail = "; ".join(" -> ".join(next(nx.simple_cycles(graph.subgraph(c)))) for c in cycles)
    assert not cycles, f"import cycles: {detail}"


def test_the_import_walk_sees_imports_inside_functions(tmp_path):
    fake = tmp_path / "m.py"
    fake.write_text("def f():\n    from .b import x\n    import npuopt.a.c\n", encoding="utf-8")
    assert imported("npuopt.m", fake, {"npuopt", "npuopt.a", "npuopt.a.c", "npuopt.b", "npuopt.m"}) == \
        {"npuopt.a", "npuopt.a.c", "npuopt.b"}  # (its own package runs first anyway)


def layer_of(module: str) -> int:
    names = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    while module not in names:
        assert "." in module, f"{module} is in no layer of LAYERS (docs/architecture.md): add it"
        module = module.rpartition(".")[0]
    return names[module]


def test_lower_layers_never_import_upper_ones():
    graph = import_graph()
    upward = [f"{a} -> {b}" for a, b in graph.edges if layer_of(b) > layer_of(a)]
    assert not upward, f"imports from a higher layer (docs/architecture.md): {upward}"


def test_module_sizes():
    too_long = {m: n for m, p in module_files().items()
                if m != FIELD_TABLE and (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert not too_long, f"modules over {MODULE_LINES} lines: {too_long}"


def test_the_pipeline_is_a_short_list_of_stages():
    path = module_files()[PIPELINE]
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) < PIPELINE_LINES
    long = [f"{f.name} ({f.end_lineno - f.lineno + 1} lines)" for f in ast.walk(ast.parse(source))
            if isinstance(f, ast.FunctionDef) and f.end_lineno - f.lineno + 1 > STAGE_LINES]
    assert not long, f"functions over {STAGE_LINES} lines in {path.name}: {long}"


def test_algorithms_never_build_a_quantized_graph():
    """Global calibration methods, unify_scales* and the report read decisions from the
    plan (plan.realised(), plan.replan): none builds a quantized graph or calls an op's
    quantize function itself (issue 22)."""
    quant = PACKAGE / "quant"
    files = sorted((quant / "global_calibration").glob("*.py")) + [quant / "unify_scales.py", quant / "plan_report.py"]
    builders = re.compile(r"build_quantized_graph|requantize|quantized_copy|\.quantize\(\)|OP_QUANTIZERS")
    found = [f"{f.relative_to(PACKAGE)}:{i}: {line.strip()}" for f in files
             for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if builders.search(line)]
    assert not found, "\n".join(found)
