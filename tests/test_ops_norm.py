"""Normalization layers (npuopt/ops/_norm.py and its users): float forwards against
PyTorch, the one-line errors for impossible params, and integer outputs close to the
float ones. Bit-exactness against the tool chain is tests/test_conformance.py's job."""
import pytest
import torch
import torch.nn.functional as F

from npuopt.errors import IRError
from tests.test_ops_float import close, nhwc, run
from tests.test_quantize_ops import METHODS, check, one_layer, quantize


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def spread_channels(*shape, batch=4):
    """Inputs whose channels (last axis) have their own offset and spread."""
    x = torch.rand(batch, *shape) * 4 - 2
    return x * (torch.rand(batch, *[1] * (len(shape) - 1), shape[-1]) + 0.3) + torch.rand(shape[-1]) - 0.5


# ---- float --------------------------------------------------------------------
@pytest.mark.parametrize("group", [1, 2, 6])
def test_groupnorm_channels_last(group):
    x, w, b = torch.randn(2, 6, 5, 4), torch.randn(6), torch.randn(6)
    got = run("GroupNorm", [nhwc(x)], dict(axis=3, group=group, epsilon=1e-5), {"weights": w, "biases": b})
    close(got, nhwc(F.group_norm(x, group, w, b, 1e-5)), 1e-4)


def test_groupnorm_on_axis_1():
    x, w, b = torch.randn(2, 4, 3, 5), torch.randn(4), torch.randn(4)
    got = run("GroupNorm", [x], dict(axis=1, group=2, epsilon=1e-3), {"weights": w, "biases": b})
    close(got, F.group_norm(x, 2, w, b, 1e-3), 1e-4)


def test_instancenorm_over_the_spatial_axes():
    x, w, b = torch.randn(2, 5, 4, 3) * 3 + 1, torch.randn(5), torch.randn(5)
    got = run("InstanceNorm", [nhwc(x)], dict(epsilon=1e-5), {"weights": w, "biases": b})
    close(got, nhwc(F.instance_norm(x, weight=w, bias=b, eps=1e-5)), 1e-4)


def test_instancenorm_axis_param():
    x, w, b = torch.randn(2, 6, 3), torch.randn(3), torch.randn(3)
    got = run("InstanceNorm", [x], dict(axis=[1], epsilon=1e-5), {"weights": w, "biases": b})
    mean, var = x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)
    close(got, (x - mean) / torch.sqrt(var + 1e-5) * w + b, 1e-4)


@pytest.mark.parametrize("axis", [[1, 2], [1, 2, 3], [-1]])
def test_mvn(axis):
    x = torch.randn(2, 4, 3, 5) * 2 + 0.5
    got = run("MVN", [x], dict(axis=axis, epsilon=1e-9))
    mean, var = x.mean(axis, keepdim=True), x.var(axis, unbiased=False, keepdim=True)
    close(got, (x - mean) / torch.sqrt(var + 1e-9), 1e-4)


@pytest.mark.parametrize("axis,wshape", [([3], (5,)), ([2, 3], (4, 5)), ([1], (3,))])
def test_rmsnorm(axis, wshape):
    x, w = torch.randn(2, 3, 4, 5) + 0.3, torch.randn(*wshape)
    got = run("RMSNorm", [x], dict(axis=axis, epsilon=1e-5), {"weights": w})
    shape = [x.shape[d] if d in axis else 1 for d in range(4)]
    close(got, x / torch.sqrt((x * x).mean(axis, keepdim=True) + 1e-5) * w.reshape(shape), 1e-4)


# ---- errors -------------------------------------------------------------------
@pytest.mark.parametrize("optype,params,constants,message", [
    ("GroupNorm", dict(axis=3, group=4), 6, "'op' \\(GroupNorm\\): group 4 must be a positive divisor of the 6"),
    ("GroupNorm", dict(axis=3, group=0), 6, "group 0 must be"),
    ("GroupNorm", dict(axis=4, group=1), 6, "'op' \\(GroupNorm\\): axis 4 must name a non-batch axis"),
    ("GroupNorm", dict(axis=0, group=1), 6, "axis 0 must name a non-batch axis"),
    ("GroupNorm", dict(axis=3, group=2), 5, "'weights' has 5 values for 6 elements"),
    ("InstanceNorm", dict(), 5, "'op' \\(InstanceNorm\\): 'weights' has 5 values for 6 elements"),
    ("InstanceNorm", dict(axis=[1, 5]), 6, "'op' \\(InstanceNorm\\): axis \\[1, 5\\] must name axes of a 4-D"),
    ("RMSNorm", dict(axis=[3]), 4, "'op' \\(RMSNorm\\): 'weights' has 4 values for 6 elements"),
    ("RMSNorm", dict(axis=[-5]), 6, "'op' \\(RMSNorm\\): axis \\[-5\\] must name axes"),
    ("MVN", dict(axis=[2, -2]), 0, "'op' \\(MVN\\): axis names an axis twice"),
    ("MVN", dict(axis=[]), 0, "axis \\[\\] must name axes"),
])
def test_impossible_params(optype, params, constants, message):
    consts = {"weights": torch.ones(constants), "biases": torch.zeros(constants)} if constants else None
    if optype == "RMSNorm":
        consts.pop("biases")
    with pytest.raises(IRError, match=message):
        run(optype, [torch.randn(2, 3, 4, 6)], params, consts)


def test_instancenorm_needs_spatial_axes():
    with pytest.raises(IRError, match="'op' \\(InstanceNorm\\): a 2-D input has no axes"):
        run("InstanceNorm", [torch.randn(2, 6)], {}, {"weights": torch.ones(6), "biases": torch.zeros(6)})


# ---- quantized ----------------------------------------------------------------
def tolerances(mode):
    """At 16 bits the tool chain's form rounds g = 2^15 / std (std in input steps, here
    ~10^4) to an integer: a relative error up to 0.5 / g of the normalized value."""
    return dict(tol_lsb=6, min_cos=0.99) if METHODS[mode].get("activation_bits", 8) == 8 \
        else dict(tol_abs=1.0, min_cos=0.98)


def assert_quantized(qg, optype):
    assert [n.quantized for n in qg.nodes if n.type == optype] == [True]


def affine(channels):
    return {"weights": torch.rand(channels) * 1.5 + 0.2, "biases": torch.randn(channels) * 0.3}


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("optype,params", [("GroupNorm", dict(axis=3, group=4, epsilon=1e-5)),
                                           ("GroupNorm", dict(axis=2, group=2, epsilon=1e-5)),
                                           ("InstanceNorm", dict(epsilon=1e-5))])
def test_grouped_and_instance_norm_integers_are_close(tmp_path, mode, optype, params):
    channels = 4 if params.get("axis") == 2 else 8
    g = one_layer(optype, [(6, 4, 8)], params, affine(channels))
    data = [(spread_channels(6, 4, 8),) for _ in range(3)]
    assert_quantized(check(g, data, tmp_path, **tolerances(mode), **METHODS[mode])[0], optype)


@pytest.mark.parametrize("mode", range(len(METHODS)))
@pytest.mark.parametrize("axis", [[1, 2], [1, 2, 3]])
def test_mvn_integers_are_close(tmp_path, mode, axis):
    g = one_layer("MVN", [(6, 4, 8)], dict(axis=axis, epsilon=1e-9))
    data = [(spread_channels(6, 4, 8),) for _ in range(3)]
    assert_quantized(check(g, data, tmp_path, **tolerances(mode), **METHODS[mode])[0], "MVN")


@pytest.mark.parametrize("mode", range(len(METHODS)))
def test_rmsnorm_integers_are_close(tmp_path, mode):
    g = one_layer("RMSNorm", [(6, 4, 8)], dict(axis=[3], epsilon=1e-5), {"weights": torch.rand(8) * 1.5 + 0.2})
    data = [(spread_channels(6, 4, 8),) for _ in range(3)]
    assert_quantized(check(g, data, tmp_path, **tolerances(mode), **METHODS[mode])[0], "RMSNorm")


def test_rmsnorm_per_channel_weights_over_two_axes_stay_float(tmp_path):
    g = one_layer("RMSNorm", [(6, 4, 8)], dict(axis=[2, 3], epsilon=1e-5), {"weights": torch.rand(4, 8) + 0.2})
    data = [(spread_channels(6, 4, 8),) for _ in range(2)]
    qg = quantize(g, data, **METHODS[0])
    assert [n.quantized for n in qg.nodes if n.type == "RMSNorm"] == [False]
