"""Issue 2, point 3: the example IRs forward in float like a plain PyTorch (NCHW)
computation, and squeezenet forwards with every shape as the IR says, at batch 1 and 2."""
import pytest
import torch
import torch.nn.functional as F

from npuopt.errors import GraphError
from npuopt.ir import read_graph
from npuopt.plugins import load_plugins

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module", autouse=True)
def _ops():
    load_plugins()


def to_nchw(x):
    return x.permute(0, 3, 1, 2)


def to_nhwc(x):
    return x.permute(0, 2, 3, 1)


@pytest.mark.parametrize("batch", [1, 2])
def test_tiny_conv_sigmoid_matches_torch(ir_examples, batch):
    graph = read_graph(str(ir_examples / "tiny_conv_sigmoid.txt"))
    conv = graph.node("conv")
    weights = conv.constants["weights"].betensor.permute(0, 3, 1, 2)  # [out, kh, kw, in] -> [out, in, kh, kw]
    biases = conv.constants["biases"].betensor
    x = torch.randn(batch, 4, 8, 8, generator=torch.Generator().manual_seed(batch))
    want = torch.sigmoid(F.conv2d(x, weights, biases, stride=1, padding=1))
    (got,) = graph.forward([to_nhwc(x).contiguous()])
    assert got.shape == (batch, 8, 8, 8)
    torch.testing.assert_close(to_nchw(got), want, rtol=0, atol=1e-5)
    assert want.std() > 0.05  # the comparison is not between two near-constant tensors


@pytest.mark.parametrize("batch", [1, 2])
def test_single_eltwise_matches_torch(ir_examples, batch):
    graph = read_graph(str(ir_examples / "single_eltwise_1.txt"))
    gen = torch.Generator().manual_seed(batch)
    a, b = torch.randn(batch, 16, 4, 4, generator=gen), torch.randn(batch, 16, 4, 4, generator=gen)
    (got,) = graph.forward([to_nhwc(a), to_nhwc(b)])
    torch.testing.assert_close(to_nchw(got), a + b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 2])
def test_squeezenet_forwards_with_the_ir_shapes(squeezenet, batch):
    graph = read_graph(str(squeezenet))
    x = torch.randn(batch, 3, 227, 227, generator=torch.Generator().manual_seed(0))
    (prob,) = graph.forward([x], keep_tensors=True)
    for node in graph.nodes:
        for t in node.outputs:
            assert tuple(t.betensor.shape) == (batch,) + t.ir_shape[1:], (node.name, t.name)
    assert prob.shape == (batch, 1000, 1, 1)
    assert torch.allclose(prob.sum(dim=1), torch.ones(batch, 1, 1))


def test_forward_rejects_a_wrong_input_shape(ir_examples):
    graph = read_graph(str(ir_examples / "tiny_conv_sigmoid.txt"))
    with pytest.raises(GraphError, match=r"input 'x' has shape \[1, 8, 8, 3\], the IR says \[1, 8, 8, 4\]"):
        graph.forward([torch.zeros(1, 8, 8, 3)])
