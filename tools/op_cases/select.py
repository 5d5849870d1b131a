"""Comparison and selection layers: Logical (the six comparisons, AND/OR/XOR/NOT), Where
and Cast, and Pow. Inputs are coarse (multiples of 1/8) so comparisons tie often."""
import numpy as np
import torch

from op_cases.common import Case, uniform_inputs, weights

COMPARISONS = ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")


def _coarse(rng, shapes, n, value_range, run):
    return [np.round(x * 8) / 8 for x in uniform_inputs(rng, shapes, n, value_range, run)]


def _logical(b, rng, x):
    """Each comparison of x0 [N,4,6] with x1 [N,4,1] (different scales), a comparison with
    a constant, and the boolean methods on comparison outputs."""
    tops = [b.layer("Logical", m.lower(), [x[0], x[1]], dict(method=m))[0] for m in COMPARISONS]
    c = b.layer("Constant", "limit", [], {}, {"weights": weights(rng, 6, scale=0.5)})[0]
    tops.append(b.layer("Logical", "less_const", [c, x[0]], dict(method="LESS"))[0])
    eq, gt = tops[0], tops[2]
    for m in ("AND", "OR", "XOR"):
        tops.append(b.layer("Logical", m.lower(), [gt, tops[-1]], dict(method=m))[0])
    tops.append(b.layer("Logical", "not", [eq], dict(method="NOT"))[0])
    return tops


def _where(b, rng, x):
    """Where on a comparison, between two inputs of different ranges (broadcast), between
    an input and a constant, and between two integer tensors (ArgMinMax indices)."""
    cond = b.layer("Logical", "gt", [x[0], x[1]], dict(method="GREATER"))[0]
    c = b.layer("Constant", "fill", [], {}, {"weights": weights(rng, 4, 1, scale=2.0)})[0]
    tops = [b.layer("Where", "where", [cond, x[0], x[1]], {})[0],
            b.layer("Where", "where_const", [cond, c, x[0]], {})[0]]
    ia = b.layer("ArgMinMax", "argmax", [x[0]], dict(method="MAX", axis=2, select_last_index=False))[0]
    ib = b.layer("ArgMinMax", "argmin", [x[0]], dict(method="MIN", axis=2, select_last_index=False))[0]
    small = b.layer("Logical", "small", [x[1], c], dict(method="LESS"))[0]
    tops.append(b.layer("Where", "where_int", [small, ia, ib], {})[0])
    return tops


def _cast(b, rng, x):
    """Cast of floats to int8/uint8/int16 (saturating), of a comparison's uint8 to float32,
    between float types, and of indices (int32) to int16 with truncation."""
    tops = [b.layer("Cast", f"to_{t}", [x[0]], dict(to_dtype=t, clip_mode="SATURATION", ignore_scale_zp=True))[0]
            for t in ("int8", "uint8", "int16")]
    cmp = b.layer("Logical", "ge", [x[0], x[1]], dict(method="GREATER_EQUAL"))[0]
    tops.append(b.layer("Cast", "bool_to_float", [cmp], dict(to_dtype="float32", clip_mode="SATURATION",
                                                               ignore_scale_zp=True))[0])
    tops.append(b.layer("Cast", "to_float16", [x[0]], dict(to_dtype="float16", clip_mode="TRUNCATION",
                                                           ignore_scale_zp=True))[0])
    idx = b.layer("ArgMinMax", "argmax", [x[0]], dict(method="MAX", axis=1, select_last_index=False))[0]
    tops.append(b.layer("Cast", "idx_to_int16", [idx], dict(to_dtype="int16", clip_mode="TRUNCATION",
                                                            ignore_scale_zp=False))[0])
    return tops


def _pow(b, rng, x):
    """A positive base [N,4,6] to a broadcast exponent [N,4,1] and to a float constant 2.0;
    a signed base [N,4,6] to integer constants 3 and 2; the signed base to the float 2.0
    (kept in float: the sign step needs an integer exponent)."""
    two = b.layer("Constant", "two", [], {}, {"weights": torch.full((6,), 2.0)})[0]
    three_i = b.layer("Constant", "three_i", [], {}, {"weights": torch.full((1,), 3, dtype=torch.int32)})[0]
    two_i = b.layer("Constant", "two_i", [], {}, {"weights": torch.full((4, 1), 2, dtype=torch.int32)})[0]
    pairs = [("pow", x[0], x[1]), ("pow_const", x[0], two), ("pow_odd", x[2], three_i), ("pow_even", x[2], two_i),
             ("pow_kept_float", x[2], two)]
    return [b.layer("Pow", name, [base, exponent], {})[0] for name, base, exponent in pairs]


def _pow_data(rng, shapes, n, value_range, run):
    """Base in (0.05, 2], exponent in [0.5, 2.5], signed base in the case's range."""
    base, exponent, signed = uniform_inputs(rng, shapes, n, value_range, run)
    return [0.05 + (base - value_range[0]) / (value_range[1] - value_range[0]) * 1.95,
            0.5 + (exponent - value_range[0]) / (value_range[1] - value_range[0]) * 2.0, signed]


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
SHAPES = [(4, 6), (4, 1)]
CASES = [
    Case("logical", "Logical comparisons of [N,4,6] with [N,4,1] and a constant; AND/OR/XOR/NOT", SHAPES,
         _logical, calib_range=(-1.0, 1.0), run_range=(-1.0, 1.0), data=_coarse),
    Case("logical_asym", "the same with asymmetric activations (zero points)", SHAPES, _logical, ASYM,
         calib_range=(-0.5, 1.5), run_range=(-0.5, 1.5), data=_coarse),
    Case("where", "Where on a comparison between inputs, an input and a constant, and integers", SHAPES,
         _where, calib_range=(-2.0, 2.0), run_range=(-2.0, 2.0), data=_coarse),
    Case("where_asym", "the same with asymmetric activations", SHAPES, _where, ASYM,
         calib_range=(-0.5, 3.0), run_range=(-0.5, 3.0), data=_coarse),
    Case("cast", "Cast of floats to int8/uint8/int16, of uint8 to float32, float to float16, indices to int16",
         SHAPES, _cast, calib_range=(-150.0, 300.0), run_range=(-160.0, 320.0)),
    Case("cast_asym", "the same with asymmetric activations", SHAPES, _cast, ASYM,
         calib_range=(-3.0, 7.0), run_range=(-3.0, 7.0)),
    Case("pow", "Pow of a positive base to a broadcast exponent and a float constant, of a signed base to "
         "integer constants (and to a float one: kept in float)", [(4, 6), (4, 1), (4, 6)], _pow,
         calib_range=(-1.5, 1.5), run_range=(-1.5, 1.5), data=_pow_data),
    Case("pow_asym", "the same with asymmetric activations", [(4, 6), (4, 1), (4, 6)], _pow, ASYM,
         calib_range=(-1.0, 2.0), run_range=(-1.0, 2.0), data=_pow_data),
]
