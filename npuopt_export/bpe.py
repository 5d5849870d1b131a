"""Byte-level BPE (GPT-2's scheme), as a GGUF file's `tokenizer.ggml.*` metadata describes it.

Text is cut into pieces first: control tokens (`<|im_start|>`...) as themselves, each digit
alone (SmolLM's pre-tokenizer), then GPT-2's pieces (contractions, an optional space and
letters, numbers, or other symbols, runs of spaces). Each piece's UTF-8 bytes are spelled
with GPT-2's printable stand-in characters and merged pair by pair, the lowest-ranked merge
first, into vocabulary tokens. Decoding joins the tokens and maps the stand-ins back to bytes.
"""
import unicodedata
from functools import lru_cache
from typing import Dict, List, Sequence, Tuple

CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


@lru_cache(maxsize=1)
def byte_chars() -> Dict[int, str]:
    """GPT-2's map of the 256 byte values to printable characters: printable Latin-1 bytes
    stand for themselves, the others for the characters from U+0100 on, in order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _kind(ch: str) -> str:
    """'L' letter, 'N' number, 's' whitespace, 'o' anything else (GPT-2's pattern's classes)."""
    if ch.isspace():
        return "s"
    category = unicodedata.category(ch)[0]
    return category if category in "LN" else "o"


def _gpt2_pieces(text: str) -> List[str]:
    """GPT-2's pre-tokenization of `text` (its regular expression, scanned by hand):
    's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^sLN]+|s+(?!S)|s+."""
    pieces, i, n = [], 0, len(text)
    while i < n:
        contraction = next((c for c in CONTRACTIONS if text.startswith(c, i)), None)
        if contraction:
            pieces.append(contraction)
            i += len(contraction)
            continue
        start = i
        if text[i] == " " and i + 1 < n and _kind(text[i + 1]) != "s":
            i += 1
        kind = _kind(text[i])
        if kind != "s":
            i += 1
            while i < n and _kind(text[i]) == kind:
                i += 1
            pieces.append(text[start:i])
            continue
        while i < n and _kind(text[i]) == "s":
            i += 1
        if i < n and i - start > 1:  # the last space joins the word after it
            i -= 1
        pieces.append(text[start:i])
    return pieces


class Tokenizer:
    def __init__(self, tokens: Sequence[str], merges: Sequence[str], control: Sequence[int], eos: int):
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks: Dict[Tuple[str, str], int] = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.control = sorted((self.tokens[i] for i in control), key=len, reverse=True)
        self.eos = eos
        self._bytes = {c: b for b, c in byte_chars().items()}

    def encode(self, text: str) -> List[int]:
        ids = []
        for part, is_control in self._split_control(text):
            if is_control:
                ids.append(self.ids[part])
                continue
            for chunk in _split_digits(part):
                for piece in _gpt2_pieces(chunk):
                    ids += self._merge(piece)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        text = "".join(self.tokens[i] for i in ids)
        data = bytes(self._bytes[c] if c in self._bytes else ord("?") for c in text)
        return data.decode("utf-8", errors="replace")

    def _split_control(self, text: str) -> List[Tuple[str, bool]]:
        parts, start, i = [], 0, 0
        while i < len(text):
            hit = next((t for t in self.control if text.startswith(t, i)), None)
            if hit is None:
                i += 1
                continue
            if i > start:
                parts.append((text[start:i], False))
            parts.append((hit, True))
            i += len(hit)
            start = i
        if start < len(text):
            parts.append((text[start:], False))
        return parts

    def _merge(self, piece: str) -> List[int]:
        chars = byte_chars()
        word = [chars[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
            rank, i = min(((r, i) for r, i in pairs if r is not None), default=(None, None))
            if rank is None:
                break
            word[i:i + 2] = [word[i] + word[i + 1]]
        return [self.ids[w] for w in word]


def _split_digits(text: str) -> List[str]:
    """Each digit a piece of its own; the text between digits as it is."""
    parts, start = [], 0
    for i, ch in enumerate(text):
        if _kind(ch) == "N" and ch.isdigit():
            if i > start:
                parts.append(text[start:i])
            parts.append(ch)
            start = i + 1
    if start < len(text):
        parts.append(text[start:])
    return parts
