"""The float IRs the tool chain's parser wrote (../shared/data/parser_irs): every one
loads, its float forward reproduces the PyTorch output it was converted from
(cosine >= 0.99999, max error <= 1e-4 of the largest output), and a batch of several inputs gives
what each input gives alone (parser IRs hard-code batch 1 in Reshape shapes and
constants; the batch axis must follow the batch actually run).

Every folder of parser_irs is a case, so IRs added there are checked too; their
quantized forms are checked against the tool chain and npuopt-run in
tests/test_conformance.py (slow)."""
import numpy as np
import pytest
import torch

from conftest import SHARED_DATA
from npuopt.ir import read_graph
from npuopt.ops import load_builtin_ops

load_builtin_ops()  # this file reads and runs IRs before any other module registers the ops

PARSER_IRS = SHARED_DATA / "parser_irs"
FOLDERS = sorted(p.name for p in PARSER_IRS.iterdir() if p.is_dir()) if PARSER_IRS.is_dir() else []
COSINE_FLOOR = 0.99999
MAX_ERROR = 1e-4          # of the output's largest magnitude
BATCH = 3


def load(name):
    folder = PARSER_IRS / name
    txts = sorted(folder.glob("*.txt"))
    assert len(txts) == 1, f"{folder}: expected one .txt, found {[t.name for t in txts]}"
    graph = read_graph(str(txts[0]))
    graph.check_supported()
    return graph, folder


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def sample_inputs(graph, folder, batch):
    """The reference input first (when there is one), then random ones of the same scale."""
    rng = np.random.default_rng(0)
    inputs = []
    for t in graph.input_tensors:
        shape = [int(d) for d in t.ir_shape]
        ref = folder / "ref_input.npy"
        first = np.load(ref).astype(np.float32) if ref.is_file() and len(graph.input_tensors) == 1 \
            else rng.standard_normal(shape).astype(np.float32)
        rest = [rng.standard_normal(shape).astype(np.float32) * float(first.std() or 1) for _ in range(batch - 1)]
        inputs.append(torch.from_numpy(np.concatenate([first] + rest, axis=0)))
    return inputs


@pytest.fixture
def shared():
    if not PARSER_IRS.is_dir():
        pytest.skip(f"parser-written IRs absent: {PARSER_IRS} (../shared/data beside the checkout) does not exist")


@pytest.mark.shared
@pytest.mark.parametrize("name", FOLDERS)
def test_float_forward_reproduces_pytorch(name, shared):
    graph, folder = load(name)
    if not (folder / "ref_output.npy").is_file():
        pytest.skip(f"{name}: no ref_output.npy to compare with (loading and running is checked by the batch test)")
    with torch.no_grad():
        out = graph.forward(sample_inputs(graph, folder, 1))[0].numpy()
    want = np.load(folder / "ref_output.npy")
    assert out.size == want.size, f"{name}: output of {out.shape}, PyTorch's of {want.shape}"
    assert cosine(out, want) >= COSINE_FLOOR
    assert np.abs(out.reshape(want.shape) - want).max() <= MAX_ERROR * np.abs(want).max()


@pytest.mark.shared
@pytest.mark.parametrize("name", FOLDERS)
def test_a_batch_gives_what_each_input_gives_alone(name, shared):
    graph, folder = load(name)
    inputs = sample_inputs(graph, folder, BATCH)
    with torch.no_grad():
        batched = graph.forward(inputs)
        for i in range(BATCH):
            alone = graph.forward([x[i:i + 1] for x in inputs])
            for got, want in zip(batched, alone):
                assert got.shape[0] == BATCH * want.shape[0] or got.shape[0] == BATCH
                part = got.reshape(BATCH, -1)[i]
                assert torch.allclose(part, want.reshape(-1), rtol=1e-4, atol=1e-4 * float(want.abs().max())), \
                    f"{name}: sample {i} of a batch of {BATCH} differs from the same input alone"


# ---- the batch through Reshape, on small graphs (no ../shared needed) ---------------
def reshape_graph(in_shape, perm, shape, perm_after=None):
    from npuopt.ir.builder import GraphBuilder
    b = GraphBuilder("t")
    b.input("x", in_shape)
    top = b.layer("Transpose", "tr", ["x"], dict(perm=perm))[0] if perm else "x"
    top = b.layer("Reshape", "rs", [top], dict(shape=shape))[0]
    if perm_after:
        top = b.layer("Transpose", "back", [top], dict(perm=perm_after))[0]
    return b.build([top])


@pytest.mark.parametrize("in_shape,perm,shape,perm_after", [
    ([1, 16, 8], None, [16, 8], None),                  # batch folded into the first axis
    ([1, 4, 6], [1, 0, 2], [4, 1, 2, 3], [1, 0, 2, 3]),  # batch moved to axis 1 through the Reshape, and back
    ([1, 2, 2, 5], None, [1, 20], None),                # flatten
    ([1, 20], None, [1, 1, 4, 5], None),                # unflatten
])
def test_reshape_follows_the_batch(in_shape, perm, shape, perm_after):
    graph = reshape_graph(in_shape, perm, shape, perm_after)
    x = torch.randn([4] + in_shape[1:])
    batched = graph.forward([x])[0]
    assert graph.samples_apart, "the batch runs as one"
    for i in range(4):
        assert torch.equal(batched.reshape(4, -1)[i], graph.forward([x[i:i + 1]])[0].reshape(-1))


def test_a_graph_that_mixes_samples_runs_them_one_at_a_time():
    """[1,16,8] -> Transpose [16,1,8] -> Reshape [16,8]: the output carries the batch on
    its last axis; such a graph runs sample by sample, outputs along the first axis."""
    graph = reshape_graph([1, 16, 8], [1, 0, 2], [16, 8])
    x = torch.randn(3, 16, 8)
    batched = graph.forward([x])[0]
    assert graph.samples_apart is False and batched.shape == (48, 8)
    for i in range(3):
        assert torch.equal(batched[16 * i:16 * (i + 1)], graph.forward([x[i:i + 1]])[0])


def test_reshape_refuses_an_input_that_is_not_a_batch():
    from npuopt.errors import IRError
    graph = reshape_graph([1, 4, 6], None, [4, 6])
    graph.node("rs").inputs[0].betensor = torch.randn(2, 5, 6)
    with pytest.raises(IRError, match="layer 'rs' \\(Reshape\\): input of shape \\[2, 5, 6\\]"):
        graph.node("rs").forward()
