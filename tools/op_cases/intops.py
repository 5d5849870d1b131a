"""Integer layers and the CTC greedy decoder: BitShift, Bitwise, Mod, DivMod,
CTCGreedyDecoder (IsInf and IsNaN: the parser-written case parser_isinf_isnan). Integer
inputs are graph inputs of integer types (their data drawn as integers over each input's
own range); shift amounts and divisors reach past the type's width and zero."""
import numpy as np
import torch

from op_cases.common import Case, uniform


def integers(*ranges):
    """Data of integer inputs, input i uniform over the integers of ranges[i]."""
    def data(rng, shapes, n, value_range, run):
        return [rng.integers(lo, hi + 1, (n,) + shape) for shape, (lo, hi) in zip(shapes, ranges)]
    return data


def _bitshift(b, rng, x):
    """int8 values shifted left and right by int8 amounts [N,4,1] in [-1, 9] (past 8 bits and
    negative), uint8 values by a constant int32 row and by the amounts, int32 values (within
    2^24: the tool chain takes graph inputs through float32) and uint16 values by int32
    amounts in [-1, 40]."""
    amounts = b.layer("Constant", "amounts", [], {}, {"weights": torch.tensor([0, 1, 2, 3, 7, 8], dtype=torch.int32)})
    return [b.layer("BitShift", name, [v, s], dict(direction=d))[0]
            for name, v, s, d in [("left", x[0], x[1], "LEFT"), ("right", x[0], x[1], "RIGHT"),
                                  ("left_u8", x[2], amounts[0], "LEFT"), ("right_u8", x[2], x[1], "RIGHT"),
                                  ("left_i32", x[3], x[5], "LEFT"), ("right_i32", x[3], x[5], "RIGHT"),
                                  ("left_u16", x[4], x[5], "LEFT"), ("right_u16", x[4], x[5], "RIGHT")]]


def _bitwise(b, rng, x):
    """AND, OR, XOR of int8 values (one broadcast [N,4,1]), AND of int8 with uint8 (computed
    in int16), NOT of int8 and of uint8."""
    pairs = [("and", [x[0], x[1]], "AND"), ("or", [x[0], x[1]], "OR"), ("xor", [x[0], x[2]], "XOR"),
             ("and_mixed", [x[0], x[3]], "AND"), ("not", [x[0]], "NOT"), ("not_u8", [x[3]], "NOT")]
    return [b.layer("Bitwise", name, ins, dict(method=m))[0] for name, ins, m in pairs]


def _divmod(b, rng, x):
    """Floor and trunc division of int16 values by int16 divisors [N,4,1] (zeros among them),
    and of int8 values by int8 divisors where -128 // -1 overflows (clamped)."""
    tops = []
    for name, a, d in [("wide", x[0], x[1]), ("narrow", x[2], x[3])]:
        for mode in ("FLOOR", "TRUNC"):
            tops += b.layer("DivMod", f"{name}_{mode.lower()}", [a, d], dict(mode=mode), n_tops=2)
    return tops


def _mod_int(b, rng, x):
    """Mod and fmod of int16 values by int8 divisors [N,4,1] (zeros among them)."""
    return [b.layer("Mod", name, [x[0], x[1]], dict(fmod=f))[0] for name, f in (("mod", False), ("fmod", True))]


def _mod(b, rng, x):
    """Mod and fmod of floats by float divisors [N,4,1] of either sign (exact zeros in the run
    data), and fmod of the floats by an int8 divisor input."""
    return [b.layer("Mod", name, [x[0], d], dict(fmod=f))[0]
            for name, d, f in (("mod", x[1], False), ("fmod", x[1], True), ("fmod_by_int", x[2], True))]


def _mod_data(rng, shapes, n, value_range, run):
    """Dividends in [-6, 6], divisors in +-[0.5, 2] (quarters, 0 among them in the run data),
    integer divisors in [1, 5]."""
    divisors = np.round(uniform(rng, (0.5, 2.0), (n,) + shapes[1]) * 4) / 4 * rng.choice([-1, 1], (n,) + shapes[1])
    if run:
        divisors[:, 0] = 0
    return [uniform(rng, (-6.0, 6.0), (n,) + shapes[0]), divisors, rng.integers(1, 6, (n,) + shapes[2])]


def _ctc(b, rng, x):
    """The greedy decoder of [N,8,5] scores with and without merge_repeated, 10 labels a sample."""
    return [b.layer("CTCGreedyDecoder", name, [x[0], x[1]], dict(merge_repeated=m), top_shapes=[[1, 10, 1, 1]])[0]
            for name, m in (("merged", True), ("unmerged", False))]


def _ctc_data(rng, shapes, n, value_range, run):
    """Coarse scores (ties and repeats), blanks favoured; lengths in [0, 9] (0: all steps)."""
    scores = np.round(uniform(rng, value_range, (n,) + shapes[0]) * 2) / 2
    scores[..., -1] += 0.5
    return [scores, rng.integers(0, 10, (n,) + shapes[1])]


INT8 = (-128, 127)
CASES = [
    Case("bitshift", "BitShift LEFT/RIGHT of int8, uint8, int32, uint16 values by amounts past the width and negative",
         [(4, 6), (4, 1), (4, 6), (4, 6), (4, 6), (4, 1)], _bitshift,
         data=integers(INT8, (-1, 9), (0, 255), (-2 ** 24, 2 ** 24), (0, 65535), (-1, 40)),
         dtypes=("int8", "int8", "uint8", "int32", "uint16", "int32")),
    Case("bitwise", "Bitwise AND/OR/XOR/NOT of int8 and uint8 values, broadcast and mixed types",
         [(4, 6), (4, 1), (4, 6), (4, 6)], _bitwise, data=integers(INT8, INT8, INT8, (0, 255)),
         dtypes=("int8", "int8", "int8", "uint8")),
    Case("divmod", "DivMod FLOOR/TRUNC of int16 by int16 (zeros) and int8 by int8 (-128 // -1)",
         [(4, 6), (4, 1), (4, 6), (4, 6)], _divmod, data=integers((-1000, 1000), (-9, 9), (-128, -126), (-2, 1)),
         dtypes=("int16", "int16", "int8", "int8")),
    Case("mod_int", "Mod fmod false/true of int16 by int8 divisors (zeros)", [(4, 6), (4, 1)], _mod_int,
         data=integers((-300, 300), (-7, 7)), dtypes=("int16", "int8")),
    Case("mod", "Mod fmod false/true of floats by float divisors of either sign and fmod by an int8 input, "
         "asymmetric activations", [(4, 6), (4, 1), (4, 1)], _mod, data=_mod_data, dtypes=("float32", "float32", "int8"),
         cfg=dict(quantize_method_for_activation="per_tensor_asymmetric")),
    Case("ctc_greedy", "CTCGreedyDecoder of [N,8,5] scores with and without merge_repeated, lengths 0-9",
         [(8, 5), ()], _ctc, data=_ctc_data, dtypes=("float32", "int32")),
]
