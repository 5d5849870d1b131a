"""The sections of a graph file: the model's own (its header and layers), then one per
subgraph (`subgraph_name=` header, its layer_number layers), which hold the bodies of
control-flow layers (If's branches, Loop's body) as the tool chain's parser writes them.

A layer runs a subgraph named by one of its params (then_branch=NAME). Subgraphs belong
to the layers that run them (`PyNode.subgraphs`, param -> PyGraph), nested ones to the
layers of the subgraph that runs them; the file lists every section flat after the
model's own, and a section's layer names and tensor names are its own."""
from collections import OrderedDict
from typing import Dict, List, Tuple

from ..errors import IRError
from ..logger import OPT_WARN

SUBGRAPH_KEY = "subgraph_name"


def split_sections(blocks: List["OrderedDict"], path: str) -> List[Tuple["OrderedDict", List["OrderedDict"]]]:
    """(header, layer blocks) of the model's section, then of each subgraph section: a
    block without layer keys that follows layers starts a section when it names one."""
    sections = [(OrderedDict(), [])]
    for block in blocks:
        header, layers = sections[-1]
        if _is_layer(block):
            layers.append(block)
        elif SUBGRAPH_KEY in block:
            sections.append((block, []))
        elif layers or len(sections) > 1:
            first_line = next(iter(block.values()))[1]
            raise IRError(f"{path}:{first_line}: block has no layer_name/layer_type")
        else:
            header.update(block)
    names = set()
    for header, _ in sections[1:]:
        raw, line = header[SUBGRAPH_KEY]
        if not raw:
            raise IRError(f"{path}:{line}: empty subgraph_name")
        if raw in names:
            raise IRError(f"{path}:{line}: a second subgraph section is named '{raw}'")
        names.add(raw)
        for key in ("input_tensors", "output_tensors"):
            if key not in header:
                raise IRError(f"{path}: subgraph '{raw}': missing '{key}'")
    return sections


def _is_layer(block) -> bool:
    return "layer_type" in block or "layer_name" in block or "layer_id" in block


def link_subgraphs(graph, subgraphs: Dict[str, object], path: str) -> None:
    """Give every layer (of the model and of the subgraphs) the subgraphs its params name
    (a param whose value is a section's name); a section that no layer names is left out,
    a subgraph that runs itself (through its layers, at any depth) is an IRError."""
    named = set()
    for g in [graph] + list(subgraphs.values()):
        for node in g.nodes:
            for key, value in node.params.items():
                if isinstance(value, str) and value in subgraphs:
                    node.subgraphs[key] = subgraphs[value]
                    named.add(value)
    unnamed = [name for name in subgraphs if name not in named]
    if unnamed:
        OPT_WARN(f"{path}: subgraph section(s) {', '.join(repr(n) for n in unnamed)} are run by no layer; "
                 f"left out")
    for name, sg in subgraphs.items():
        _check_not_recursive(sg, [name], path)


def _check_not_recursive(sg, chain: List[str], path: str) -> None:
    for node in sg.nodes:
        for key, inner in node.subgraphs.items():
            if inner.name in chain:
                raise IRError(f"{path}: layer '{node.name}' ({node.type}) of subgraph '{sg.name}': {key} "
                              f"'{inner.name}' runs itself ({' -> '.join(chain + [inner.name])})")
            _check_not_recursive(inner, chain + [inner.name], path)

