"""Unary math layers: Abs/Negative/Sign (exact integers), the lookup-table types
(Sqrt, Rsqrt, Reciprocal, Exp, Log, Erf, Square, Floor, Ceil, Round, Trunc, BNLL,
Tan, Sinh, Cosh, Asin, Acos, Atan, Asinh, Acosh, Atanh) and Sine/Cosine, whose
16-bit form reduces the input to one period. Ranges reach outside the functions'
domains (Sqrt, Log, Acosh) where that shows what the quantized form does there."""
from op_cases.common import Case


def _layers(*types):
    def build(b, rng, x):
        return [b.layer(t, t.lower(), [x[0]], {})[0] for t in types]
    return build


EXACT = ("Abs", "Negative", "Sign")
LUT = ("Exp", "Erf", "Square", "Floor", "Ceil", "Round", "Trunc", "BNLL")
DOMAIN = ("Sqrt", "Rsqrt", "Reciprocal", "Log")
PERIODIC = ("Sine", "Cosine", "Sinh", "Cosh", "Atan", "Asinh")
INVERSE = ("Asin", "Acos", "Atanh", "Tan")
ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
RESTRICTED = dict(quantize_method_for_activation="per_tensor_symmetric_restricted_range")
WIDE = dict(activation_bits="16")


def _integer_chain(b, rng, x):
    """Abs and Negative of Sign's integer-valued (scale 1) output."""
    sign = b.layer("Sign", "sign", [x[0]], {})[0]
    return [sign] + [b.layer(t, t.lower(), [sign], {})[0] for t in ("Abs", "Negative")]


def _case(name, doc, types, lo_hi, cfg=None):
    return Case(name, doc, [(4, 6)], _layers(*types), dict(cfg or {}), calib_range=lo_hi, run_range=lo_hi)


CASES = [
    _case("unary_exact", "Abs, Negative, Sign on signed symmetric inputs", EXACT, (-2.0, 3.0)),
    _case("unary_exact_asym", "Abs, Negative, Sign on asymmetric inputs (zero point)", EXACT, (-0.5, 3.0), ASYM),
    _case("unary_exact_unsigned", "Abs, Negative, Sign on unsigned inputs", EXACT, (0.0, 2.0)),
    _case("unary_exact16", "Abs, Negative, Sign on 16-bit inputs", EXACT, (-2.0, 3.0), WIDE),
    Case("unary_exact_int", "Abs and Negative of integer values (Sign's output)", [(4, 6)], _integer_chain,
         calib_range=(-2.0, 3.0), run_range=(-2.0, 3.0)),
    _case("unary_domain", "Sqrt, Rsqrt, Reciprocal, Log on inputs with negative values and 0", DOMAIN,
          (-1.0, 3.0)),
    _case("unary_positive", "Sqrt, Rsqrt, Reciprocal, Log, Exp on positive asymmetric inputs",
          DOMAIN + ("Exp",), (0.1, 4.0), ASYM),
    _case("unary_lut", "Exp, Erf, Square, Floor, Ceil, Round, Trunc, BNLL", LUT, (-3.0, 3.0)),
    _case("unary_lut16", "the lookup-table layers on 16-bit inputs: interpolated lookups", LUT + DOMAIN,
          (-3.0, 3.0), WIDE),
    _case("unary_restricted", "tables indexed from qmin (Sqrt, Reciprocal, BNLL, Sine) and from qmin - 1 "
          "(Exp, Floor) on a restricted signed range", ("Sqrt", "Reciprocal", "BNLL", "Sine", "Exp", "Floor"),
          (-2.0, 2.0), RESTRICTED),
    _case("unary_trig", "Sine, Cosine, Sinh, Cosh, Atan, Asinh", PERIODIC, (-3.0, 3.0)),
    _case("unary_trig16", "Sine, Cosine on 16-bit inputs (one period by rescale), Sinh, Cosh, Atan, Asinh",
          PERIODIC, (-7.0, 7.0), WIDE),
    _case("unary_inverse", "Asin, Acos, Atanh, Tan inside their domains", INVERSE, (-0.95, 0.95)),
    _case("unary_acosh", "Acosh, with inputs below 1 (NaN in float)", ("Acosh",), (0.5, 4.0)),
]
