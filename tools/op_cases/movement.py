"""Shape and data-movement layers: ChannelShuffle, SpaceToDepth/DepthToSpace,
SpaceToBatch/BatchToSpace, Tile, Repeat, Gather/GatherElements/GatherND, TopK,
ArgMinMax, ConstantOfShape, Cumulate.

Cases marked "batch 1" calibrate and run one sample: the tool chain's forward of those
layers reshapes to (or pads up to) the top's IR shape, batch included, so a run batch
other than the IR's gives it other shapes than npuopt's (which follow the batch)."""
import numpy as np
import torch

from op_cases.common import Case, uniform_inputs


def batch1(rng, shapes, n, value_range, run):
    return uniform_inputs(rng, shapes, 1, value_range, run)


def _ints(b, name, values):
    return b.layer("Constant", name, [], {}, {"weights": torch.tensor(values, dtype=torch.int32)})[0]


def _channel_shuffle(b, rng, x):
    one = b.layer("ChannelShuffle", "shuffle", [x[0]], dict(group=2, splits=1))
    two = b.layer("ChannelShuffle", "shuffle_split", [x[0]], dict(group=4, splits=2), n_tops=2)
    return one + two


def _space_depth(b, rng, x):
    s2d = b.layer("SpaceToDepth", "s2d", [x[0]], dict(block_size_x=2, block_size_y=2))
    dcr = b.layer("DepthToSpace", "d2s_dcr", [x[1]], dict(mode="DCR", block_size_x=2, block_size_y=2))
    crd = b.layer("DepthToSpace", "d2s_crd", [x[1]], dict(mode="crd", block_size_x=2, block_size_y=2))
    return s2d + dcr + crd


def _space_batch(b, rng, x):
    s2b = b.layer("SpaceToBatch", "s2b", [x[0]], dict(block_size_x=3, block_size_y=2, pad_left=0, pad_right=2,
                                                        pad_top=1, pad_bottom=0))
    b2s = b.layer("BatchToSpace", "b2s", s2b, dict(block_size_x=3, block_size_y=2, crop_left=1, crop_right=0,
                                                    crop_top=0, crop_bottom=1))
    return s2b + b2s


def _tile_repeat(b, rng, x):
    tiled = b.layer("Tile", "tile", [x[0]], dict(repeats=[1, 2, 1, 3]))
    counts = _ints(b, "counts", [2, 0, 1])
    rep = b.layer("Repeat", "repeat", [x[0], counts], dict(axis=1), top_shapes=[[1, 5, 2, 2]])
    return tiled + rep


def _gather(b, rng, x):
    idx = _ints(b, "idx", [[0, -1], [2, 1]])
    plain = b.layer("Gather", "gather", [x[0], idx], dict(axis=2, batch_dims=0))
    arg = b.layer("ArgMinMax", "argmax", [x[0]], dict(method="MAX", axis=2, select_last_index=False))
    batched = b.layer("Gather", "gather_batch", [x[1], arg[0]], dict(axis=1, batch_dims=1))
    return plain + batched


def _gather_elements_nd(b, rng, x):
    _, top_idx = b.layer("TopK", "topk", [x[0]], dict(k=3, axis=2, sorted=True, largest=True), n_tops=2)
    elements = b.layer("GatherElements", "gather_el", [x[0], top_idx], dict(axis=2))
    tuples = _ints(b, "tuples", [[0, 1], [0, -1], [0, 2]])
    nd = b.layer("GatherND", "gather_nd", [x[0], tuples], dict(batch_dims=0))
    arg = b.layer("ArgMinMax", "argmin", [x[1]], dict(method="MIN", axis=1, select_last_index=True))
    nd_batch = b.layer("GatherND", "gather_nd_batch", [x[2], arg[0]], dict(batch_dims=1))
    return elements + nd + nd_batch


def _topk_argminmax(b, rng, x):
    tops = b.layer("TopK", "top3", [x[0]], dict(k=3, axis=2, sorted=True, largest=True), n_tops=2)
    tops += b.layer("TopK", "low2_first", [x[0]], dict(k=2, axis=1, sorted=True, largest=False,
                                                       select_index="first"), n_tops=2)
    for method, last in (("MAX", False), ("MIN", True)):
        tops += b.layer("ArgMinMax", f"arg{method.lower()}_{int(last)}", [x[0]],
                        dict(method=method, axis=2, select_last_index=last))
    return tops


def _coarse(rng, shapes, n, value_range, run):
    """Few distinct values, so the integers tie often (tie order of TopK/ArgMinMax)."""
    return [np.round(x * 4) / 4 for x in uniform_inputs(rng, shapes, n, value_range, run)]


def _constant_of_shape(b, rng, x):
    shape = _ints(b, "shape", [1, 2, 3])
    half = b.layer("ConstantOfShape", "fill_frac", [shape], dict(value=0.75))
    three = b.layer("ConstantOfShape", "fill_int", [shape], dict(value=3))
    added = b.layer("Eltwise", "add", [x[0], half[0]], dict(method="ADD", with_activation="NONE"))
    return added + three


def _cumulate(b, rng, x):
    tops = []
    for name, method, axis, exclusive, reverse in (("sum", "SUM", 2, False, False),
                                                   ("sum_ex_rev", "SUM", 1, True, True),
                                                   ("prod", "PROD", 2, False, False),
                                                   ("prod_ex_rev", "PROD", 2, True, True)):
        tops += b.layer("Cumulate", name, [x[0]], dict(method=method, axis=axis, exclusive=exclusive, reverse=reverse))
    return tops


CASES = [
    Case("channel_shuffle", "ChannelShuffle of 2 groups, and of 4 groups split into 2 tops", [(3, 4, 8)],
         _channel_shuffle),
    Case("space_depth", "SpaceToDepth 2x2; DepthToSpace 2x2 in DCR and CRD mode", [(4, 6, 3), (2, 3, 8)],
         _space_depth),
    Case("space_batch", "SpaceToBatch 2x3 with pads (real 0: -zp), BatchToSpace back with crops (batch 1)",
         [(3, 4, 2)], _space_batch, data=batch1),
    Case("tile_repeat", "Tile; Repeat with a zero count, zero-filled up to the top's size (batch 1)",
         [(3, 2, 2)], _tile_repeat, data=batch1),
    Case("gather", "Gather of constant indices (one negative); Gather with batch_dims 1 of ArgMinMax indices "
         "(batch 1)", [(3, 4, 5), (5, 2)], _gather, data=batch1),
    Case("gather_elements_nd", "GatherElements of TopK indices; GatherND of constant tuples (one negative) and "
         "with batch_dims 1 of ArgMinMax indices (batch 1)", [(3, 4, 5), (6, 1), (6, 3)], _gather_elements_nd,
         data=batch1),
    Case("topk_argminmax", "TopK largest (ties last) and smallest (ties first); ArgMax, ArgMin with "
         "select_last_index, on values that tie", [(3, 4, 5)], _topk_argminmax, data=_coarse),
    Case("constant_of_shape", "ConstantOfShape of a fractional value (quantized) and of an integer (kept) "
         "(batch 1)", [(2, 3)], _constant_of_shape, data=batch1),
    Case("cumulate", "Cumulate SUM and PROD, plain and exclusive+reverse", [(2, 3, 4)], _cumulate),
]
