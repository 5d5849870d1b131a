"""The recurrent model tests' PyTorch models, their training and their data files.

    python rnn_models.py train MODEL        # trains on CPU, writes MODEL/MODEL.pt (committed)
    python rnn_models.py data MODEL FOLDER  # the run's calib/val data and labels into FOLDER

- kws_lstm: keyword spotting over 49 frames of 20 log-mel energies (rnn_data.py): an LSTM
  of 64 cells, its last hidden state h_n through a linear layer to 10 keyword scores.
- crnn_ocr: CRNN text recognition of 32x128 grayscale images: four convolutions (BatchNorm,
  ReLU, pooling down to one row of 32 columns), a bidirectional LSTM of 2x48 cells, a
  linear layer to 37 classes per column (the blank first, then OPT's OcrMetric 'en' set),
  and TensorFlow's CTC greedy decoding of those scores (the blank moved last, as TensorFlow's
  decoder takes it): outputs the scores [N, 32, 37] and the labels [N, 4096, 1, 1].
`npuopt-export rnn_models:kws_lstm --weights kws_lstm/kws_lstm.pt ...` (from this folder)
writes the IRs; training is seeded and takes about a minute (KWS) and a few (CRNN) on 2 cores.
"""
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

import rnn_data
from npuopt_export.export_rnn import ctc_greedy_decoder

HERE = Path(__file__).resolve().parent
# model -> (training samples, epochs, learning rate)
TRAINING = {"kws_lstm": (3000, 12, 3e-3), "crnn_ocr": (8000, 16, 3e-3)}
# the run's data: samples of calibration and of measurement, seeds apart from training's
CALIB, VAL = 100, 500


class KeywordLSTM(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.lstm = nn.LSTM(rnn_data.MELS, hidden, batch_first=True)
        self.head = nn.Linear(hidden, len(rnn_data.KEYWORDS))

    def forward(self, x):  # x [N, frames, mels]
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


def _block(cin, cout, pool):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool))


class CRNN(nn.Module):
    def __init__(self, hidden: int = 48):
        super().__init__()
        self.features = nn.Sequential(_block(1, 16, 2), _block(16, 32, 2), _block(32, 64, (2, 1)),
                                      _block(64, 64, (4, 1)))
        self.lstm = nn.LSTM(64, hidden, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, len(rnn_data.CHARSET) + 1)

    def scores(self, x):  # x [N, 1, 32, 128] -> [N, 32, classes]
        f = self.features(x).squeeze(2).permute(0, 2, 1)
        y, _ = self.lstm(f)
        return self.head(y)

    def forward(self, x):
        scores = self.scores(x)
        blank_last = torch.cat([scores[..., 1:], scores[..., :1]], dim=-1)
        return scores, ctc_greedy_decoder(blank_last)


def kws_lstm() -> nn.Module:
    return KeywordLSTM()


def crnn_ocr() -> nn.Module:
    return CRNN()


def _train_kws(model, x, y, epochs, lr, generator):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for batch in order.split(64):
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


def _targets(texts):
    labels = [torch.tensor([rnn_data.CHARSET.index(c) + 1 for c in t]) for t in texts]
    return torch.cat(labels), torch.tensor([len(t) for t in texts])


def _train_ocr(model, x, texts, epochs, lr, generator):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=epochs * ((len(x) + 63) // 64))
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for batch in order.split(64):
            log_probs = model.scores(x[batch]).log_softmax(-1).permute(1, 0, 2)
            targets, lengths = _targets([texts[i] for i in batch])
            loss = ctc(log_probs, targets, torch.full((len(batch),), log_probs.shape[0]), lengths)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


def train(name: str) -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    count, epochs, lr = TRAINING[name]
    model = {"kws_lstm": kws_lstm, "crnn_ocr": crnn_ocr}[name]()
    if name == "kws_lstm":
        x, y = rnn_data.keyword_set(1000, count)
        _train_kws(model.train(), torch.from_numpy(x), torch.from_numpy(y), epochs, lr, generator)
    else:
        x, texts = rnn_data.text_set(1000, count)
        _train_ocr(model.train(), torch.from_numpy(x).permute(0, 3, 1, 2), texts, epochs, lr, generator)
    torch.save(model.eval().state_dict(), HERE / name / f"{name}.pt")


def write_data(name: str, folder: Path) -> None:
    """calib.npy, val.npy (IR layout) and the val labels: KWS one-hot [N, 10] (labels.npy,
    OPT's KeywordSpottingMetric takes them so); OCR the texts, one a line (labels.txt), and
    the characters, one a line (charset.txt: OPT's OcrMetric fails on its built-in 'en' set,
    a string it adds to a list, so it reads them from a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    make = rnn_data.keyword_set if name == "kws_lstm" else rnn_data.text_set
    calib, _ = make(2000, CALIB)
    val, labels = make(3000, VAL)
    np.save(folder / "calib.npy", calib)
    np.save(folder / "val.npy", val)
    if name == "kws_lstm":
        np.save(folder / "labels.npy", np.eye(len(rnn_data.KEYWORDS), dtype=np.float32)[labels])
    else:
        (folder / "labels.txt").write_text("".join(t + "\n" for t in labels))
        (folder / "charset.txt").write_text("".join(c + "\n" for c in rnn_data.CHARSET))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "train":
        train(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "data":
        write_data(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
