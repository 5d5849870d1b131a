"""Which of the layer types the tool chain's parser writes npuopt runs and quantizes, as
`npuopt --plugin` lists them (issues 43 and 45, acceptance 1): the parser's 151 types are
those of ../shared/docs/parser-layer-types.md. The types not run yet and the types kept in
float are named here, so that a type added, lost or left without a quantize function
changes a list this test compares with."""
import pytest

from conftest import REPO, SHARED_DATA, start_npuopt

PARSER_TYPES_DOC = SHARED_DATA.parent / "docs" / "parser-layer-types.md"

# parser layer types without a forward yet
NOT_YET = []

# layer types with a forward and no quantize function, and why (docs/ir-ops.md)
KEPT_IN_FLOAT = {
    "DeQuantize": "the boundary from integers to a float layer",
    "If": "the Compass Optimizer keeps control flow and its subgraphs in float",
    "Loop": "the Compass Optimizer keeps control flow and its subgraphs in float",
    "RefineDetDetection": "the Compass Optimizer has no such op: no reader of an integer form exists",
}


def parser_layer_types():
    if not PARSER_TYPES_DOC.is_file():
        pytest.skip(f"the parser's layer types are absent: {PARSER_TYPES_DOC} (../shared beside the checkout)")
    return PARSER_TYPES_DOC.read_text(encoding="utf-8").split("## All 151 parser layer types")[1].split()


@pytest.fixture(scope="module")
def listing():
    result = start_npuopt("--plugin", cwd=REPO).result()
    assert result.returncode == 0, result.stderr
    kinds = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if line.startswith(("op forward", "op quantize", "op float")) and len(parts) > 2:
            kinds.setdefault(" ".join(parts[:2]), set()).add(parts[2])
    return kinds


def test_the_doc_lists_151_types():
    types = parser_layer_types()
    assert len(types) == len(set(types)) == 151


def test_npuopt_runs_every_parser_type_but_those_not_yet_built(listing):
    missing = sorted(set(parser_layer_types()) - listing["op forward"])
    assert missing == sorted(NOT_YET), "update NOT_YET: the parser's types without a forward are " \
                                       f"{missing}"


def test_every_type_with_a_forward_is_quantized_or_said_to_stay_float(listing):
    forwards, quantized = listing["op forward"], listing["op quantize"]
    assert sorted(forwards - quantized) == sorted(KEPT_IN_FLOAT)
    assert listing.get("op float", set()) == set(KEPT_IN_FLOAT) - {"DeQuantize"}
