"""ImageFolderDataset: JPEG/PNG images listed in a labels file, preprocessed as the
cfg's `image_*` fields say, so a classification model needs no preprocessing script.

data_file: a labels file (.tsv or .csv: tab-separated when the header has a tab,
else comma-separated) whose header names a `file` column (image path, relative
to the labels file's folder) and optionally `label` (integer class index >= 0)
and `split` (e.g. calib, val). `labels.tsv:val` selects the rows of split `val`
of labels.tsv, overriding `image_split`, `labels.tsv:calib:100` the first
100 of them, overriding `image_limit`, and `labels.tsv:calib:100-` the rest
(`100-300`: rows 100 to 299 of the split, counted from 0), so calibration_data
and data can name parts of one file that do not overlap: calibrate on
`calib:100`, measure a change on `calib:100-`, and keep `val` for the figures.

label_file (optional) replaces the `label` column: an .npy with one label per
selected row (in order; e.g. the float model's outputs, for CosDistanceMetric),
or another labels file with `file` and `label` columns, matched by `file` as
written. Without either, each sample's label is -1 (no label).

Each sample: float32 (pixel - mean) / std on 0..255 pixels, HxWx3 (NHWC) or
3xHxW (NCHW), channels in `image_channel_order`. Order of steps: decode as RGB,
resize the short side (bilinear), center crop, reorder channels, normalize.
"""
import csv
import os

import numpy as np
from PIL import Image, UnidentifiedImageError

from npuopt.datasets_common import load_label_array, no_label, require_file
from npuopt.framework import *

WHO = "ImageFolderDataset"


# ---- cfg fields: each parser raises ValueError for text it does not accept ----
def _count(s):
    v = int(s)
    if v < 0:
        raise ValueError
    return v


def _crop(s):
    """'' or '0': no crop; '224': 224x224; '224x192' or '224,192': H x W."""
    s = s.strip().lower()
    if s in ("", "0"):
        return None
    parts = [p.strip() for p in s.replace(",", "x").split("x")]
    if len(parts) == 1:
        parts = parts * 2
    h, w = (int(p) for p in parts)  # ValueError on 3 parts or non-integers
    if h < 1 or w < 1:
        raise ValueError
    return h, w


def _per_channel(positive):
    def parse(s):
        values = tuple(float(p) for p in s.split(","))
        if len(values) not in (1, 3) or not all(np.isfinite(values)) or (positive and min(values) <= 0):
            raise ValueError
        return values
    return parse


def _upper_choice(*choices):
    def parse(s):
        if s.strip().upper() not in choices:
            raise ValueError
        return s.strip().upper()
    return parse


def _split_name(s):
    return s.strip()


FIELDS = {
    f.name: f for f in [
        register_field("image_resize", "0", _count,
                       "ImageFolderDataset: resize so the short side has this many pixels (bilinear); 0: no resize",
                       "an integer >= 0"),
        register_field("image_crop", "", _crop,
                       "ImageFolderDataset: center crop to HxW after the resize; empty: no crop",
                       "empty, N (NxN) or HxW like 224x224"),
        register_field("image_mean", "127", _per_channel(False),
                       "ImageFolderDataset: mean subtracted from 0..255 pixels, per channel in image_channel_order",
                       "one number, or three comma-separated numbers"),
        register_field("image_std", "128", _per_channel(True),
                       "ImageFolderDataset: divisor after the mean, per channel in image_channel_order",
                       "one number > 0, or three comma-separated numbers > 0"),
        register_field("image_layout", "NHWC", _upper_choice("NHWC", "NCHW"),
                       "ImageFolderDataset: axis order of each sample (the batch axis is added)", "NHWC or NCHW"),
        register_field("image_channel_order", "RGB", _upper_choice("RGB", "BGR"),
                       "ImageFolderDataset: channel order of each sample", "RGB or BGR"),
        register_field("image_split", "", _split_name,
                       "ImageFolderDataset: only rows whose split column equals this (labels.tsv:val overrides it); "
                       "empty: all rows", "a split name like calib or val, or empty"),
        register_field("image_limit", "0", _count,
                       "ImageFolderDataset: only the first N rows (after the split); 0: all", "an integer >= 0"),
    ]
}


def _settings() -> dict:
    """The image_* fields of the active cfg (defaults for any it lacks)."""
    cfg = current_config()
    return {name: getattr(cfg, name) if hasattr(cfg, name) else f.parse(f.default) for name, f in FIELDS.items()}


# ---- labels files ----
def _split_selector(data_file):
    """'labels.tsv:val' -> ('labels.tsv', 'val', None); 'labels.tsv:calib:100' ->
    ('labels.tsv', 'calib', (0, 100)); 'labels.tsv:calib:100-' -> (..., (100, None)):
    calibration_data and data share the image_* fields, so each file can pick its
    own split and rows."""
    path = str(data_file)
    if os.path.exists(path) or ":" not in path:
        return path, None, None
    base, _, selector = path.partition(":")
    while not os.path.isfile(base) and ":" in selector:
        head, _, selector = selector.partition(":")
        base = f"{base}:{head}"
    split, _, rows = selector.partition(":")
    if not os.path.isfile(base) or "/" in selector or "\\" in selector or not split:
        return path, None, None
    return base, split, _rows_of(path, rows) if rows else None


def _rows_of(path: str, text: str) -> tuple:
    """The rows 'N' (the first N), 'A-' (from row A on) or 'A-B' (rows A to B - 1) name."""
    start, dash, stop = text.partition("-")
    if not dash:
        start, stop = "0", start
    if not (start.isdigit() and (stop.isdigit() or not stop)) or (stop and int(stop) <= int(start)):
        raise DatasetError(f"{WHO}: '{path}': the rows after the split must be a count N > 0 or a range A- or A-B "
                           f"(0 <= A < B), got '{text}'")
    return int(start), int(stop) if stop else None


def read_table(path, what="labels file"):
    """(columns, rows) of a .tsv/.csv with a header; rows are (line number, {column: text})."""
    path = require_file(path, WHO, what)
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise DatasetError(f"{WHO}: {what} '{path}' is not UTF-8 text") from None
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise DatasetError(f"{WHO}: {what} '{path}' is empty; expected a header naming a 'file' column")
    delimiter = "\t" if "\t" in lines[first] else ","
    reader = csv.reader(lines[first:], delimiter=delimiter)
    columns = [c.strip().lower() for c in next(reader)]
    if "file" not in columns:
        raise DatasetError(f"{WHO}: {what} '{path}' has no 'file' column in its header (found: "
                           f"{', '.join(columns)}); expected columns file[, label][, split]")
    rows = []
    for cells in reader:
        line = first + reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(columns):
            raise DatasetError(f"{WHO}: line {line} of '{path}' has {len(cells)} fields; the header has "
                               f"{len(columns)} ({', '.join(columns)})")
        row = {c: v.strip() for c, v in zip(columns, cells)}
        if not row["file"]:
            raise DatasetError(f"{WHO}: line {line} of '{path}' has an empty 'file'")
        rows.append((line, row))
    return columns, rows


def _class_index(text, line, path):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise DatasetError(f"{WHO}: label '{text}' on line {line} of '{path}' is not a class index "
                           f"(an integer >= 0)")
    return value


def _labels_from_table(label_file, rows, data_file):
    """Labels of `rows` looked up by `file` in another labels file."""
    columns, label_rows = read_table(label_file, "label file")
    if "label" not in columns:
        raise DatasetError(f"{WHO}: label file '{label_file}' has no 'label' column (found: {', '.join(columns)})")
    by_file = {os.path.normpath(r["file"]): _class_index(r["label"], line, label_file) for line, r in label_rows}
    labels = []
    for line, row in rows:
        key = os.path.normpath(row["file"])
        if key not in by_file:
            raise DatasetError(f"{WHO}: image '{row['file']}' (line {line} of '{data_file}') has no row in "
                               f"label file '{label_file}'")
        labels.append(by_file[key])
    return np.array(labels, dtype=np.int64)


@register_plugin(PluginType.Dataset, "1.0")
class ImageFolderDataset(Dataset):
    def __init__(self, data_file, label_file=None):
        s = _settings()
        data_file, split, chosen = _split_selector(data_file)
        split = split if split is not None else s["image_split"]
        start, stop = chosen if chosen is not None else (0, s["image_limit"] or None)
        if os.path.isdir(data_file):
            raise DatasetError(f"{WHO}: '{data_file}' is a folder; give a labels file (.tsv/.csv with a 'file' "
                               f"column) that lists the images")
        columns, rows = read_table(data_file)
        if split:
            if "split" not in columns:
                raise DatasetError(f"{WHO}: split '{split}' asked for, but '{data_file}' has no 'split' column")
            present = sorted({r["split"] for _, r in rows})
            rows = [(line, r) for line, r in rows if r["split"] == split]
            if not rows:
                raise DatasetError(f"{WHO}: no rows of split '{split}' in '{data_file}' (splits there: "
                                   f"{', '.join(present) or 'none'})")
        rows = rows[start:stop]
        if not rows:
            raise DatasetError(f"{WHO}: '{data_file}' lists no images" + (f" from row {start} on" if start else ""))
        folder = os.path.dirname(os.path.abspath(data_file))
        self.data_file = data_file
        self.files = [(os.path.normpath(os.path.join(folder, r["file"])), line) for line, r in rows]
        missing = [(p, line) for p, line in self.files if not os.path.isfile(p)]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise DatasetError(f"{WHO}: image '{missing[0][0]}' (line {missing[0][1]} of '{data_file}') "
                               f"not found{more}")

        if label_file:
            label_file = _split_selector(label_file)[0]  # rows are matched by file: a selector changes nothing
            if str(label_file).lower().endswith(".npy"):
                self.labels = load_label_array(label_file, len(rows), WHO)
            else:
                self.labels = _labels_from_table(label_file, rows, data_file)
        elif "label" in columns:
            self.labels = np.array([_class_index(r["label"], line, data_file) for line, r in rows], np.int64)
        else:
            self.labels = None

        self.resize, self.crop = s["image_resize"], s["image_crop"]
        self.bgr = s["image_channel_order"] == "BGR"
        self.nchw = s["image_layout"] == "NCHW"
        self.mean = np.array(s["image_mean"], np.float32)
        self.std = np.array(s["image_std"], np.float32)
        # without a crop every image must come out at the first one's size, or batches cannot stack
        self.size = (self.crop[1], self.crop[0]) if self.crop else self._resized_size(self._header_size(0))

    def __len__(self):
        return len(self.files)

    def _where(self, index):
        path, line = self.files[index]
        return f"image '{path}' (line {line} of '{self.data_file}')"

    def _header_size(self, index):
        try:
            with Image.open(self.files[index][0]) as im:
                return im.size
        except Exception as e:
            raise DatasetError(f"{WHO}: cannot read {self._where(index)}: {type(e).__name__}: {e}") from None

    def _resized_size(self, size):
        """(w, h) after resizing the short side to image_resize (torchvision's rounding)."""
        w, h = size
        if not self.resize or min(w, h) == self.resize:
            return w, h
        if w <= h:
            return self.resize, int(self.resize * h / w)
        return int(self.resize * w / h), self.resize

    def load(self, index) -> np.ndarray:
        """Decoded, resized and cropped RGB pixels, uint8 HxWx3."""
        try:
            with Image.open(self.files[index][0]) as im:
                im = im.convert("RGB")
        except UnidentifiedImageError:
            raise DatasetError(f"{WHO}: cannot read {self._where(index)}: not an image format PIL can decode "
                               f"(JPEG, PNG, ...)") from None
        except Exception as e:
            raise DatasetError(f"{WHO}: cannot read {self._where(index)}: {type(e).__name__}: {e}") from None
        size = self._resized_size(im.size)
        if size != im.size:
            im = im.resize(size, Image.BILINEAR)
        if self.crop:
            ch, cw = self.crop
            w, h = im.size
            if w < cw or h < ch:
                raise DatasetError(f"{WHO}: {self._where(index)} is {w}x{h} (WxH) after image_resize, smaller "
                                   f"than image_crop {ch}x{cw} (HxW)")
            top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
            im = im.crop((left, top, left + cw, top + ch))
        elif im.size != self.size:
            raise DatasetError(f"{WHO}: {self._where(index)} is {im.size[0]}x{im.size[1]} (WxH) but the first "
                               f"image is {self.size[0]}x{self.size[1]}; set image_resize and image_crop so all "
                               f"images come out at one size")
        return np.asarray(im, dtype=np.uint8)

    def __getitem__(self, index):
        pixels = self.load(index).astype(np.float32)
        if self.bgr:
            pixels = pixels[..., ::-1]
        sample = (pixels - self.mean) / self.std
        if self.nchw:
            sample = sample.transpose(2, 0, 1)
        label = np.array(self.labels[index]) if self.labels is not None else no_label()
        return np.ascontiguousarray(sample, dtype=np.float32), label
