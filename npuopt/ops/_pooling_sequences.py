"""The pooling sequences of FractionalPool, drawn as the tool chain draws them: from a
Mersenne Twister (std::mt19937, seeded with `seed`) through libstdc++'s distributions.

Each axis of length L pooled to O outputs gets O + 1 boundaries 0 = b_0 < ... < b_O = L:
* random (pseudo=false): O steps of k = L // O, the first L % O of them one longer, then
  shuffled by std::shuffle (its two-at-a-time form; a sequence longer than 65535 stays
  unshuffled, as in the tool chain);
* pseudo-random (pseudo=true): with a = L / O and u = r * min((k + 2) / a - 1,
  (L + 1 - k) / a - (O - 1)), r drawn by std::generate_canonical<double, 53> (two draws),
  b_i = ceil(fl32(a * (i + u))) - 1 for 0 < i < O (rounded to float32 before the ceiling,
  as the tool chain does).
Both axes start from a new generator of the same seed."""
import math
import struct

MASK32 = 0xFFFFFFFF
STATE = 624
SHIFT = 397
MATRIX_A = 0x9908B0DF
UPPER, LOWER = 0x80000000, 0x7FFFFFFF
RANGE = 1 << 32   # the generator's outputs: [0, 2^32)


class MT19937:
    """std::mt19937: 32-bit outputs of the standard Mersenne Twister, seeded as seed(value) does."""

    def __init__(self, seed: int):
        mt = [seed & MASK32]
        for i in range(1, STATE):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & MASK32)
        self.mt, self.index = mt, STATE

    def _twist(self) -> None:
        mt = self.mt
        for i in range(STATE):
            y = (mt[i] & UPPER) | (mt[(i + 1) % STATE] & LOWER)
            mt[i] = mt[(i + SHIFT) % STATE] ^ (y >> 1) ^ (MATRIX_A if y & 1 else 0)
        self.index = 0

    def __call__(self) -> int:
        if self.index >= STATE:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def canonical(gen: MT19937) -> float:
    """std::generate_canonical<double, 53>: two draws, (g1 + g2 * 2^32) / 2^64 in float64."""
    low = float(gen())
    return (low + float(gen()) * float(RANGE)) / float(RANGE) ** 2


def uniform_int(gen: MT19937, high: int) -> int:
    """std::uniform_int_distribution over [0, high]: draws below the largest multiple of
    high + 1 that fits, divided down."""
    span = high + 1
    scaling = (RANGE - 1) // span
    limit = span * scaling
    value = gen()
    while value >= limit:
        value = gen()
    return value // scaling


def shuffled(steps: list, gen: MT19937) -> list:
    """std::shuffle of `steps` (libstdc++'s form that draws two positions at a time)."""
    steps = list(steps)
    n = len(steps)
    if n * n > RANGE - 1:
        return steps
    i = 1
    if n % 2 == 0:
        j = uniform_int(gen, 1)
        steps[i], steps[j] = steps[j], steps[i]
        i += 1
    while i != n:
        size = i + 1
        x = uniform_int(gen, size * (size + 1) - 1)
        first, second = x // (size + 1), x % (size + 1)
        steps[i], steps[first] = steps[first], steps[i]
        i += 1
        steps[i], steps[second] = steps[second], steps[i]
        i += 1
    return steps


def _float32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def boundaries(length: int, outputs: int, pseudo: bool, seed: int) -> list:
    """The O + 1 window boundaries of an axis of `length` pooled to `outputs` (1 <= O <= L)."""
    gen = MT19937(seed)
    k = length // outputs
    if pseudo:
        alpha = length / outputs
        u = canonical(gen) * min((k + 2) / alpha - 1, (length + 1 - k) / alpha - (outputs - 1))
        inner = [math.ceil(_float32(alpha * (i + u))) - 1 for i in range(1, outputs)]
        return [0] + inner + [length]
    steps = shuffled([k + 1] * (length % outputs) + [k] * (outputs - length % outputs), gen)
    bounds = [0]
    for step in steps:
        bounds.append(bounds[-1] + step)
    return bounds
