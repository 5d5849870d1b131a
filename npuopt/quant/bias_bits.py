"""bias_effective_bits_auto_adaption: the width of a layer's biases before their low bits
are cleared, chosen as the tool chain chooses it."""
import torch

from . import qmath


def _bias_kl(log_q: torch.Tensor, p: torch.Tensor) -> float:
    """KL(p || q) per element of a layer's biases (softmax over them), as the tool chain scores them."""
    return float(torch.nn.functional.kl_div(log_q, p, reduction="sum")) / max(p.numel(), 1)


def adapted_bias_bits(f: torch.Tensor, s, bits: int, effective: int) -> int:
    """bias_effective_bits_auto_adaption: where clearing the low bits moves the biases'
    distribution (softmax over the layer's biases against the float ones' softmax) by
    more than 0.05 in KL divergence, the width in [max(effective, 19), bits) whose
    clamped biases lose the least to the clearing (least KL between the two), as the tool
    chain searches it; else `bits`. Narrower biases need fewer low bits cleared."""
    target = torch.softmax(f.double().reshape(-1), -1)
    q = qmath.quantize(f, s, 0, *qmath.integer_range(bits, True)).double().reshape(-1)
    cleared = qmath.clear_low_bits(q, effective)
    if abs(_bias_kl(q.log_softmax(-1), target) - _bias_kl(cleared.log_softmax(-1), target)) <= 0.05:
        return bits
    scores, step = {}, s.double().reshape(-1) if isinstance(s, torch.Tensor) else s
    for width in range(min(max(effective, 19), bits - 1), bits):
        qw = qmath.quantize(f, s, 0, *qmath.integer_range(width, True)).double().reshape(-1)
        real, kept = qw / step, qmath.clear_low_bits(qw, effective) / step
        scores[width] = abs(_bias_kl(kept.log_softmax(-1), real.softmax(-1)))
    return min(scores, key=lambda w: (scores[w], w))
