"""The output grid of layers whose integer form has no output zero point (MVN,
RotaryEmbedding): their result is clamped to the dtype's range before a zero point
would be subtracted, so a shifted range would cut it."""
from ..quant import qmath
from ..quant import tensors as QT
from ..quant.settings import settings_of


def symmetric_output(node, t) -> None:
    """Signed with zero point 0 under any activation method, over the full range."""
    st = settings_of(node)
    lo, hi = QT.activation_range(node, t, True)
    reach = max(-lo, hi)
    scale, _, qmin, qmax = qmath.linear_quant_params(-reach, reach, st.activation_bits, True, True, True)
    QT.set_quantization(t, scale, 0, qmin, qmax, st.activation_bits, True)
