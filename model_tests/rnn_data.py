"""The data of the recurrent model tests, made here from seeds (deterministic):

- keyword spotting: one-second utterances at 8 kHz of 10 made-up keywords, each three
  "phonemes" from a set of 8 (vowel-like: harmonics of a pitch shaped by two formants;
  fricative-like: noise shaped by one band), said by random speakers (pitch 90-250 Hz,
  formants scaled by 0.9-1.1, phoneme lengths 0.12-0.24 s, start, loudness and background
  noise at random), as 49 frames of 20 log-mel energies (25 ms windows, 20 ms hop);
- OCR: 32x128 grayscale images of random strings of 3-6 characters (digits and lowercase
  letters) drawn with PIL in matplotlib's DejaVu fonts (sans, serif, mono, bold) at random
  sizes, places and ink, over grayscale crops of the sample images of
  ../shared/data/imagenet_sample (faded to a light background).
"""
import csv
from pathlib import Path

import numpy as np

SAMPLE_RATE, SECONDS = 8000, 1.0
FRAME, HOP, MELS = 200, 160, 20
# phonemes: (first formant, second formant) Hz for vowel-like ones, (band centre, 0) for noise
PHONEMES = [(300, 2300), (700, 1200), (500, 900), (400, 1900), (800, 1600), (2500, 0), (4000 * 0.75, 0),
            (1500, 0)]
KEYWORDS = [(0, 1, 5), (1, 0, 5), (2, 3, 6), (3, 2, 6), (4, 1, 7), (1, 4, 7), (0, 5, 2), (5, 0, 2), (6, 3, 4),
            (7, 2, 0)]
CHARSET = "0123456789abcdefghijklmnopqrstuvwxyz"  # OPT's OcrMetric 'en' set; class 0 is the blank
IMAGE_H, IMAGE_W = 32, 128
FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf")
SAMPLE_LABELS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "imagenet_sample" / "labels.tsv"


# ---- keyword spotting ------------------------------------------------------------
def _mel_filters() -> np.ndarray:
    """[MELS, FRAME // 2 + 1] triangular filters on the mel scale up to the Nyquist frequency."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    edges = 700 * (10 ** (np.linspace(0, mel(SAMPLE_RATE / 2), MELS + 2) / 2595) - 1)
    freqs = np.fft.rfftfreq(FRAME, 1 / SAMPLE_RATE)
    low, mid, high = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0, np.minimum((freqs - low) / (mid - low), (high - freqs) / (high - mid)))


def _phoneme(rng, index: int, n: int, pitch: float, scale: float) -> np.ndarray:
    t = np.arange(n) / SAMPLE_RATE
    f1, f2 = PHONEMES[index]
    if f2:  # vowel-like: harmonics of the pitch, weighted by two formant peaks
        harmonics = np.arange(1, int(SAMPLE_RATE / 2 / pitch))
        freq = harmonics * pitch
        gain = np.exp(-((freq - f1 * scale) / 120) ** 2) + 0.7 * np.exp(-((freq - f2 * scale) / 160) ** 2) + 0.02
        phase = rng.uniform(0, 2 * np.pi, len(harmonics))
        wave = (gain[:, None] * np.sin(2 * np.pi * freq[:, None] * t + phase[:, None])).sum(0)
    else:  # fricative-like: white noise through one band
        spectrum = np.fft.rfft(rng.standard_normal(n))
        freq = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
        spectrum *= np.exp(-((freq - f1 * scale) / 400) ** 2)
        wave = np.fft.irfft(spectrum, n)
    wave /= np.abs(wave).max() + 1e-9
    ramp = np.minimum(1, np.minimum(np.arange(n), np.arange(n)[::-1]) / (0.01 * SAMPLE_RATE))
    return wave * ramp


def utterance(rng, keyword: int) -> np.ndarray:
    total = int(SAMPLE_RATE * SECONDS)
    pitch, scale = rng.uniform(90, 250), rng.uniform(0.9, 1.1)
    parts = [_phoneme(rng, p, int(rng.uniform(0.12, 0.24) * SAMPLE_RATE), pitch, scale) for p in KEYWORDS[keyword]]
    voice = np.concatenate(parts) * rng.uniform(0.3, 1.0)
    start = rng.integers(0, total - len(voice))
    signal = rng.standard_normal(total) * rng.uniform(0.005, 0.05)
    signal[start:start + len(voice)] += voice
    return signal


def log_mel(signal: np.ndarray) -> np.ndarray:
    """[frames, MELS] log-mel energies."""
    frames = 1 + (len(signal) - FRAME) // HOP
    index = np.arange(FRAME)[None, :] + HOP * np.arange(frames)[:, None]
    power = np.abs(np.fft.rfft(signal[index] * np.hanning(FRAME), axis=1)) ** 2
    return np.log(power @ _mel_filters().T + 1e-6).astype(np.float32)


def keyword_set(seed: int, count: int):
    """(features [count, 49, MELS] float32, keyword classes [count])."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % len(KEYWORDS)
    rng.shuffle(labels)
    return np.stack([log_mel(utterance(rng, k)) for k in labels]), labels


# ---- OCR -----------------------------------------------------------------------------
def _backgrounds(limit: int = 40) -> list:
    from PIL import Image
    with open(SAMPLE_LABELS, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))[:limit]
    return [np.asarray(Image.open(SAMPLE_LABELS.parent / r["file"]).convert("L"), dtype=np.float32) for r in rows]


def _font(name: str, size: int):
    import matplotlib
    from PIL import ImageFont
    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), size)


def text_image(rng, text: str, background: np.ndarray) -> np.ndarray:
    from PIL import Image, ImageDraw
    y0, x0 = rng.integers(0, background.shape[0] - IMAGE_H), rng.integers(0, background.shape[1] - IMAGE_W)
    crop = background[y0:y0 + IMAGE_H, x0:x0 + IMAGE_W]
    paper = 170 + 70 * (crop - crop.min()) / (np.ptp(crop) + 1e-6)
    image = Image.fromarray(paper.astype(np.uint8))
    font = _font(FONTS[rng.integers(len(FONTS))], int(rng.integers(18, 25)))
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    x = rng.integers(0, max(1, IMAGE_W - (right - left))) - left
    y = rng.integers(0, max(1, IMAGE_H - (bottom - top))) - top
    draw.text((int(x), int(y)), text, fill=int(rng.integers(0, 90)), font=font)
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, 4, (IMAGE_H, IMAGE_W))
    return ((pixels - 127.5) / 127.5).astype(np.float32)[:, :, None]  # HxWx1, as the IR's NHWC input


def text_set(seed: int, count: int):
    """(images [count, 32, 128, 1] float32 in [-1, 1], their texts)."""
    rng = np.random.default_rng(seed)
    backgrounds = _backgrounds()
    texts = ["".join(rng.choice(list(CHARSET), rng.integers(3, 7))) for _ in range(count)]
    images = [text_image(rng, t, backgrounds[rng.integers(len(backgrounds))]) for t in texts]
    return np.stack(images), texts
