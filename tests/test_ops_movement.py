"""Float forwards of the data-movement layers against NumPy/PyTorch references, and
their one-line IRErrors."""
import numpy as np
import pytest
import torch

from npuopt.errors import IRError
from test_ops_float import close, run

torch.manual_seed(0)


def ints(values):
    return torch.tensor(values, dtype=torch.int32)


def test_channel_shuffle_matches_torch():
    x = torch.randn(2, 3, 4, 12)
    got = run("ChannelShuffle", [x], dict(group=3, splits=1))
    want = torch.nn.functional.channel_shuffle(x.permute(0, 3, 1, 2), 3).permute(0, 2, 3, 1)
    close(got, want)


def test_channel_shuffle_splits():
    x = torch.randn(1, 2, 2, 8)
    a, b = run("ChannelShuffle", [x], dict(group=2, splits=2), n_tops=2)
    whole = run("ChannelShuffle", [x], dict(group=2, splits=1))
    close(torch.cat([a, b], -1), whole)


def _tf_space_to_depth(x, bs):
    n, h, w, c = x.shape
    out = np.zeros((n, h // bs, w // bs, bs * bs * c), np.float32)
    for i in range(h):
        for j in range(w):
            out[:, i // bs, j // bs, ((i % bs) * bs + j % bs) * c:((i % bs) * bs + j % bs + 1) * c] = x[:, i, j]
    return out


def test_space_to_depth_and_back():
    x = torch.randn(2, 4, 6, 3)
    s2d = run("SpaceToDepth", [x], dict(block_size_x=2, block_size_y=2))
    close(s2d, torch.from_numpy(_tf_space_to_depth(x.numpy(), 2)))
    close(run("DepthToSpace", [s2d], dict(block_size_x=2, block_size_y=2, mode="DCR")), x)


def test_depth_to_space_crd_matches_pixel_shuffle():
    x = torch.randn(2, 3, 4, 12)
    got = run("DepthToSpace", [x], dict(block_size_x=2, block_size_y=2, mode="crd"))
    close(got, torch.nn.functional.pixel_shuffle(x.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1))


def test_space_to_batch_and_back():
    x = torch.randn(2, 3, 4, 2)
    pads = dict(pad_top=1, pad_bottom=0, pad_left=0, pad_right=2)
    s2b = run("SpaceToBatch", [x], dict(block_size_x=3, block_size_y=2, **pads))
    assert s2b.shape == (12, 2, 2, 2)
    padded = torch.nn.functional.pad(x, (0, 0, 0, 2, 1, 0))
    close(s2b[(1 * 3 + 2) * 2 + 1], padded[1, 1::2, 2::3])
    back = run("BatchToSpace", [s2b], dict(block_size_x=3, block_size_y=2, crop_top=1, crop_bottom=0,
                                            crop_left=0, crop_right=2))
    close(back, x)


def test_tile_and_repeat():
    x = torch.randn(2, 3, 2)
    close(run("Tile", [x], dict(repeats=[1, 2, 3])), torch.from_numpy(np.tile(x.numpy(), [1, 2, 3])))
    got = run("Repeat", [x, ints([2, 0, 1])], dict(axis=1))
    close(got, torch.from_numpy(np.repeat(x.numpy(), [2, 0, 1], axis=1)))


@pytest.mark.parametrize("axis,batch_dims,idx", [(2, 0, [[0, -1], [2, 1]]), (1, 1, [[3, 0, 0], [1, 2, -4]])])
def test_gather_matches_numpy(axis, batch_dims, idx):
    x = torch.randn(2, 4, 5)
    got = run("Gather", [x, ints(idx)], dict(axis=axis, batch_dims=batch_dims))
    if batch_dims:
        want = np.stack([np.take(x.numpy()[b], np.array(idx[b]), axis=axis - 1) for b in range(2)])
    else:
        want = np.take(x.numpy(), np.array(idx), axis=axis)
    close(got, torch.from_numpy(want))


def test_gather_elements_and_nd():
    x = torch.randn(2, 3, 4)
    idx = torch.randint(-4, 4, (2, 3, 2))
    close(run("GatherElements", [x, idx], dict(axis=2)), torch.gather(x, 2, idx % 4))
    tuples = ints([[1, 2], [0, -1]])
    close(run("GatherND", [x, tuples], dict(batch_dims=0)), torch.stack([x[1, 2], x[0, -1]]))
    batched = ints([[[2], [0]], [[1], [1]]])
    close(run("GatherND", [x, batched], dict(batch_dims=1)), torch.stack([x[0, [2, 0]], x[1, [1, 1]]]))


def test_argminmax_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 0.0]])
    assert run("ArgMinMax", [x], dict(method="MAX", axis=1, select_last_index=False)).tolist() == [[1]]
    assert run("ArgMinMax", [x], dict(method="MAX", axis=1, select_last_index=True)).tolist() == [[2]]
    assert run("ArgMinMax", [x], dict(method="min", axis=-1, select_last_index=True)).tolist() == [[4]]


def test_topk_tie_orders():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0]])
    v, i = run("TopK", [x], dict(k=4, axis=1, largest=True, sorted=True), n_tops=2)
    assert v.tolist() == [[3.0, 3.0, 3.0, 2.0]] and i.tolist() == [[4, 2, 0, 3]]
    _, i = run("TopK", [x], dict(k=4, axis=1, largest=True, sorted=True, select_index="first"), n_tops=2)
    assert i.tolist() == [[0, 2, 4, 3]]
    v, i = run("TopK", [x], dict(k=2, axis=1, largest=False, sorted=True), n_tops=2)
    assert v.tolist() == [[1.0, 2.0]] and i.tolist() == [[1, 3]]


def test_constant_of_shape():
    got = run("ConstantOfShape", [ints([2, 3])], dict(value=0.5))
    close(got, torch.full((2, 3), 0.5))


@pytest.mark.parametrize("method,fn", [("SUM", np.cumsum), ("PROD", np.cumprod)])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumulate_matches_numpy(method, fn, exclusive, reverse):
    x = torch.rand(2, 5, 3) + 0.5
    got = run("Cumulate", [x], dict(method=method, axis=1, exclusive=exclusive, reverse=reverse))
    a = x.numpy()[:, ::-1] if reverse else x.numpy()
    want = fn(a, axis=1)
    if exclusive:
        neutral = np.zeros_like(a[:, :1]) if method == "SUM" else np.ones_like(a[:, :1])
        want = np.concatenate([neutral, want[:, :-1]], axis=1)
    want = want[:, ::-1] if reverse else want
    close(got, torch.from_numpy(np.ascontiguousarray(want)))


ERRORS = [
    ("ChannelShuffle", [torch.randn(1, 2, 2, 6)], dict(group=4, splits=1), "channel count 6 is not a multiple of 4"),
    ("SpaceToDepth", [torch.randn(1, 3, 4, 2)], dict(block_size_x=2, block_size_y=2), "height 3 is not a multiple"),
    ("SpaceToDepth", [torch.randn(1, 4, 4, 2)], dict(block_size_x=0, block_size_y=0), "at least 1"),
    ("DepthToSpace", [torch.randn(1, 2, 2, 6)], dict(block_size_x=2, block_size_y=2), "channel count 6"),
    ("DepthToSpace", [torch.randn(1, 2, 2, 8)], dict(block_size_x=2, block_size_y=2, mode="XYZ"), "'XYZ'"),
    ("BatchToSpace", [torch.randn(3, 2, 2, 1)], dict(block_size_x=2, block_size_y=2), "batch 3"),
    ("Tile", [torch.randn(1, 2, 3)], dict(repeats=[1, 2]), "repeats"),
    ("Gather", [torch.randn(1, 4, 5), ints([0, 5])], dict(axis=2, batch_dims=0), r"\[0, 5\] out of range"),
    ("Gather", [torch.randn(1, 4, 5), ints([0, -6])], dict(axis=1, batch_dims=0), "out of range"),
    ("Gather", [torch.randn(1, 4, 5), ints([0])], dict(axis=3, batch_dims=0), "axis 3 is out of range"),
    ("GatherElements", [torch.randn(1, 4), ints([[4]])], dict(axis=1), "out of range"),
    ("GatherND", [torch.randn(2, 3), ints([[0, 3]])], dict(batch_dims=0), "out of range"),
    ("ArgMinMax", [torch.randn(2, 3)], dict(method="MEDIAN", axis=1), "'MEDIAN'"),
    ("Cumulate", [torch.randn(2, 3)], dict(method="SUM", axis=-3), "axis -3 is out of range"),
    ("Repeat", [torch.randn(1, 3), ints([1, 2])], dict(axis=1), "2 repeat counts for an axis of 3"),
]


@pytest.mark.parametrize("optype,inputs,params,message", ERRORS)
def test_one_line_errors(optype, inputs, params, message):
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\).*{message}") as e:
        run(optype, inputs, params)
    assert "\n" not in str(e.value)


def test_split_negative_axis_and_part_size():
    x = torch.randn(1, 2, 7)
    parts = run("Split", [x], dict(axis=-1, splits=3), n_tops=3)
    assert [p.shape[-1] for p in parts] == [3, 3, 1]
    close(torch.cat(parts, -1), x)


@pytest.mark.parametrize("optype,n_inputs,params", [("Split", 1, dict(axis=3, splits=[1, 1])),
                                                    ("Concat", 2, dict(axis=-4))])
def test_split_concat_axis_out_of_range(optype, n_inputs, params):
    with pytest.raises(IRError, match=f"layer 'op' \\({optype}\\): axis .* out of range"):
        run(optype, [torch.randn(1, 2, 2)] * n_inputs, params, n_tops=2 if optype == "Split" else 1)
