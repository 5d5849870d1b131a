"""The built-in dataset and metric plugins in plugins/: what they yield, the numbers
the metrics compute, and the one-line errors for bad input."""
import math
import os

import numpy as np
import pytest
import torch
from PIL import Image

from npuopt import cfg_reader
from npuopt.config import load_config
from npuopt.data import batches, make_dataset, make_metrics, split_batch
from npuopt.dtype import Dtype
from npuopt.errors import ConfigError, DatasetError, PluginError
from npuopt.plugins import load_plugins
from npuopt.registry import PLUGINS, PluginType
from npuopt.tensor import PyTensor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGENET = os.path.join(REPO, "..", "shared", "data", "imagenet_sample")


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    load_plugins()


def dataset(name):
    cls = PLUGINS[PluginType.Dataset].get(name)
    assert cls is not None, f"{name} not registered"
    return cls


def metric(name, *args):
    return PLUGINS[PluginType.Metric].get(name)(*args)


@pytest.fixture
def use_cfg(tmp_path, monkeypatch):
    """Loads a cfg with the given fields as the active one (restored afterwards)."""
    monkeypatch.setattr(cfg_reader, "_current", None)

    def use(**fields):
        path = tmp_path / "opt.cfg"
        lines = ["[Common]", "graph = g.txt"] + [f"{k} = {v}" for k, v in fields.items()]
        path.write_text("\n".join(lines) + "\n")
        return load_config(str(path))
    return use


# ---------------------------------------------------------------- Numpy datasets
def test_numpy_dataset_samples_and_labels(tmp_path):
    data = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3)
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "l.npy", np.arange(5))
    ds = dataset("NumpyDataset")(str(tmp_path / "d.npy"), str(tmp_path / "l.npy"))
    assert len(ds) == 5
    sample, label = ds[3]
    np.testing.assert_array_equal(sample, data[3])
    assert label == 3
    _, label = dataset("NumpyDataset")(str(tmp_path / "d.npy"))[0]
    assert label == -1  # no labels


def test_numpy_layout_datasets_transpose(tmp_path):
    nchw = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.save(tmp_path / "nchw.npy", nchw)
    sample, _ = dataset("NumpyNCHW2NHWCDataset")(str(tmp_path / "nchw.npy"))[1]
    assert sample.shape == (4, 5, 3)
    np.testing.assert_array_equal(sample, nchw[1].transpose(1, 2, 0))
    sample, _ = dataset("NumpyNHWC2NCHWDataset")(str(tmp_path / "nchw.npy"))[1]
    assert sample.shape == (5, 3, 4)
    np.testing.assert_array_equal(sample, nchw[1].transpose(2, 0, 1))
    np.save(tmp_path / "three_d.npy", np.zeros((2, 3, 4)))
    for name in ("NumpyNCHW2NHWCDataset", "NumpyNHWC2NCHWDataset"):
        with pytest.raises(DatasetError, match=r"has shape \[2, 3, 4\]; expected 4-D"):
            dataset(name)(str(tmp_path / "three_d.npy"))


def test_numpy_multi_input_npz_object_and_stacked(tmp_path):
    a = np.arange(3 * 2, dtype=np.float32).reshape(3, 2)
    b = np.arange(3 * 4, dtype=np.int32).reshape(3, 2, 2)
    np.savez(tmp_path / "d.npz", second_name_first=a, b=b)  # stored order, not names, decides
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = a, b
    np.save(tmp_path / "obj.npy", obj)
    np.save(tmp_path / "stacked.npy", np.stack([a, a + 10]))
    np.save(tmp_path / "l.npy", np.array([7, 8, 9]))
    cls = dataset("NumpyMultiInputDataset")
    for fname in ("d.npz", "obj.npy"):
        ds = cls(str(tmp_path / fname), str(tmp_path / "l.npy"))
        assert len(ds) == 3
        (x, y), label = ds[2]
        np.testing.assert_array_equal(x, a[2])
        np.testing.assert_array_equal(y, b[2])
        assert label == 9
    (x, y), _ = cls(str(tmp_path / "stacked.npy"))[1]
    np.testing.assert_array_equal(y, a[1] + 10)


def test_numpy_multi_input_batches_split_per_input(tmp_path):
    a, b = np.ones((5, 2), np.float32), np.zeros((5, 3), np.float32)
    np.savez(tmp_path / "d.npz", a, b)
    ds = make_dataset("NumpyMultiInputDataset", str(tmp_path / "d.npz"))
    batch = next(iter(batches(ds, "NumpyMultiInputDataset", 4, 0)))
    samples, labels = batch
    assert [tuple(s.shape) for s in samples] == [(4, 2), (4, 3)]
    assert labels.tolist() == [-1] * 4


def _npz_named_npy(path):
    with open(path, "wb") as f:  # np.savez would append .npz to the name
        np.savez(f, np.zeros(3))


@pytest.mark.parametrize("make, match", [
    (lambda p: None, r"data file '.*x\.npy' not found"),
    (lambda p: (p / "x.npy").write_text("not numpy"), r"'.*x\.npy' is not an \.npy or \.npz file"),
    (lambda p: _npz_named_npy(p / "x.npy"), r"is an \.npz archive; NumpyDataset reads one \.npy"),
    (lambda p: np.save(p / "x.npy", np.array([np.zeros(2), np.zeros(3)], dtype=object)),
     r"holds Python objects.*use NumpyMultiInputDataset"),
    (lambda p: np.save(p / "x.npy", np.float32(3)), r"is a scalar"),
    (lambda p: (p / "x.npy").mkdir(), r"data file '.*x\.npy' is a folder"),
])
def test_numpy_dataset_errors(tmp_path, make, match):
    make(tmp_path)
    with pytest.raises(DatasetError, match=match):
        dataset("NumpyDataset")(str(tmp_path / "x.npy"))


def test_numpy_label_errors(tmp_path):
    np.save(tmp_path / "d.npy", np.zeros((4, 2)))
    np.save(tmp_path / "l.npy", np.zeros(3))
    with pytest.raises(DatasetError, match=r"label file '.*l\.npy' has 3 labels for 4 samples"):
        dataset("NumpyDataset")(str(tmp_path / "d.npy"), str(tmp_path / "l.npy"))
    with pytest.raises(DatasetError, match=r"label file '.*nope\.npy' not found"):
        dataset("NumpyDataset")(str(tmp_path / "d.npy"), str(tmp_path / "nope.npy"))


def test_numpy_multi_input_errors(tmp_path):
    cls = dataset("NumpyMultiInputDataset")
    np.savez(tmp_path / "counts.npz", np.zeros((3, 2)), np.zeros((4, 2)))
    with pytest.raises(DatasetError, match=r"different sample counts \[3, 4\]"):
        cls(str(tmp_path / "counts.npz"))
    np.save(tmp_path / "flat.npy", np.zeros(5))
    with pytest.raises(DatasetError, match=r"has shape \[5\]; expected one array per input"):
        cls(str(tmp_path / "flat.npy"))
    np.save(tmp_path / "strings.npy", np.array([["a", "b"]]))
    with pytest.raises(DatasetError, match=r"dtype <U1; expected numbers"):
        cls(str(tmp_path / "strings.npy"))


# ---------------------------------------------------------------- ImageFolderDataset
def write_png(path, pixels):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.asarray(pixels, np.uint8)).save(path)


@pytest.fixture
def images(tmp_path):
    """Four 4x6 (HxW) PNGs, image i filled with colour (10i, 10i+1, 10i+2); labels.tsv."""
    rows = ["file\tlabel\tsplit"]
    for i in range(4):
        write_png(str(tmp_path / "img" / f"{i}.png"), np.full((4, 6, 3), [10 * i, 10 * i + 1, 10 * i + 2]))
        rows.append(f"img/{i}.png\t{i + 3}\t{'calib' if i % 2 == 0 else 'val'}")
    (tmp_path / "labels.tsv").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_image_folder_defaults(images, use_cfg):
    use_cfg()
    ds = dataset("ImageFolderDataset")(str(images / "labels.tsv"))
    assert len(ds) == 4
    sample, label = ds[1]
    assert sample.shape == (4, 6, 3) and sample.dtype == np.float32
    np.testing.assert_allclose(sample[0, 0], (np.array([10, 11, 12]) - 127) / 128)
    assert label == 4


def test_image_folder_fields(images, use_cfg):
    use_cfg(image_split="val", image_channel_order="bgr", image_layout="NCHW",
            image_mean="1,2,3", image_std="2,4,8")
    ds = dataset("ImageFolderDataset")(str(images / "labels.tsv"))
    assert len(ds) == 2
    sample, label = ds[1]  # image 3, colour (30, 31, 32), as BGR
    assert sample.shape == (3, 4, 6)
    np.testing.assert_allclose(sample[:, 0, 0], [(32 - 1) / 2, (31 - 2) / 4, (30 - 3) / 8])
    assert label == 6
    use_cfg(image_split="val", image_limit="1")
    ds = dataset("ImageFolderDataset")(str(images / "labels.tsv:calib"))  # the suffix beats image_split
    assert len(ds) == 1 and ds[0][1] == 3


def test_image_folder_split_and_count_suffix(images, use_cfg):
    use_cfg(image_limit="2")
    ds = dataset("ImageFolderDataset")(str(images / "labels.tsv:val:1"))  # the count beats image_limit
    assert len(ds) == 1 and ds[0][1] == 4
    assert len(dataset("ImageFolderDataset")(str(images / "labels.tsv:calib:5"))) == 2
    for wrong in ("x", "0", "2-1", "-3", "1-x"):
        with pytest.raises(DatasetError, match=f"rows after the split must be a count N > 0 or a range A- or A-B "
                                               f"\\(0 <= A < B\\), got '{wrong}'"):
            dataset("ImageFolderDataset")(str(images / f"labels.tsv:val:{wrong}"))


def test_image_folder_row_range_suffix(images, use_cfg):
    """calib:1- is what calib:1 leaves: a held-out part of the same split."""
    use_cfg(image_limit="1")  # a range beats image_limit too
    first = dataset("ImageFolderDataset")(str(images / "labels.tsv:calib:1"))
    rest = dataset("ImageFolderDataset")(str(images / "labels.tsv:calib:1-"))
    both = dataset("ImageFolderDataset")(str(images / "labels.tsv:calib:0-2"))
    assert [first[0][1]] + [rest[i][1] for i in range(len(rest))] == [both[i][1] for i in range(len(both))]
    assert len(first) == 1 and len(rest) == 1
    with pytest.raises(DatasetError, match="lists no images from row 2 on"):
        dataset("ImageFolderDataset")(str(images / "labels.tsv:calib:2-"))


def test_image_folder_resize_and_crop(tmp_path, use_cfg):
    pixels = np.zeros((6, 8, 3), np.uint8)
    pixels[:, :, 0] = np.arange(8) * 30  # red rises left to right
    write_png(str(tmp_path / "a.png"), pixels)
    write_png(str(tmp_path / "b.png"), np.zeros((10, 9, 3)))
    (tmp_path / "l.csv").write_text("file,label\na.png,0\nb.png,1\n")  # comma-separated
    use_cfg(image_resize="3", image_crop="3x2", image_mean="0", image_std="1")
    ds = dataset("ImageFolderDataset")(str(tmp_path / "l.csv"))
    first, second = ds[0][0], ds[1][0]
    assert first.shape == second.shape == (3, 2, 3)
    assert first[0, 0, 0] < first[0, 1, 0]  # the order survives resizing and cropping
    use_cfg(image_crop="4")
    assert ds.__class__(str(tmp_path / "l.csv"))[0][0].shape == (4, 4, 3)


def test_image_folder_label_file(images, use_cfg):
    use_cfg(image_split="val")
    np.save(images / "ref.npy", np.array([[1.5, 2.5], [3.5, 4.5]], np.float32))
    ds = dataset("ImageFolderDataset")(str(images / "labels.tsv"), str(images / "ref.npy"))
    np.testing.assert_array_equal(ds[1][1], [3.5, 4.5])
    (images / "other.tsv").write_text("label,file\n100,img/3.png\n101,img/1.png\n")
    ds = dataset("ImageFolderDataset")(str(images / "labels.tsv"), str(images / "other.tsv"))
    assert [int(ds[i][1]) for i in range(2)] == [101, 100]
    (images / "nolabel.tsv").write_text("file\nimg/0.png\n")
    use_cfg()
    assert dataset("ImageFolderDataset")(str(images / "nolabel.tsv"))[0][1] == -1


def bad(path, text):
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("setup, fields, match", [
    (lambda p: str(p / "none.tsv"), {}, r"labels file '.*none\.tsv' not found"),
    (lambda p: str(p / "img"), {}, r"is a folder"),
    (lambda p: bad(p / "l.tsv", "path\tlabel\nimg/0.png\t1\n"), {},
     r"'.*l\.tsv' has no 'file' column in its header \(found: path, label\)"),
    (lambda p: bad(p / "l.tsv", ""), {}, r"'.*l\.tsv' is empty"),
    (lambda p: bad(p / "l.tsv", "file\tlabel\nimg/0.png\n"), {}, r"line 2 of '.*l\.tsv' has 1 fields"),
    (lambda p: bad(p / "l.tsv", "file\tlabel\nimg/0.png\tcat\n"), {},
     r"label 'cat' on line 2 of '.*l\.tsv' is not a class index"),
    (lambda p: bad(p / "l.tsv", "file\nimg/0.png\nimg/gone.png\n"), {},
     r"image '.*img/gone\.png' \(line 3 of '.*l\.tsv'\) not found"),
    (lambda p: str(p / "labels.tsv"), {"image_split": "test"},
     r"no rows of split 'test' in '.*labels\.tsv' \(splits there: calib, val\)"),
    (lambda p: bad(p / "l.tsv", "file\nimg/0.png\n"), {"image_split": "val"}, r"has no 'split' column"),
])
def test_image_folder_construction_errors(images, use_cfg, setup, fields, match):
    use_cfg(**fields)
    with pytest.raises(DatasetError, match=match):
        dataset("ImageFolderDataset")(setup(images))


def test_image_folder_label_file_errors(images, use_cfg):
    use_cfg()
    cls = dataset("ImageFolderDataset")
    np.save(images / "ref.npy", np.zeros((3, 2)))
    with pytest.raises(DatasetError, match=r"has 3 labels for 4 samples"):
        cls(str(images / "labels.tsv"), str(images / "ref.npy"))
    (images / "other.tsv").write_text("file,label\nimg/0.png,1\n")
    with pytest.raises(DatasetError, match=r"image 'img/1\.png' \(line 3 of .*\) has no row in label file"):
        cls(str(images / "labels.tsv"), str(images / "other.tsv"))


def test_image_folder_load_errors(images, use_cfg):
    use_cfg()
    cls = dataset("ImageFolderDataset")
    (images / "img" / "2.png").write_bytes(b"not an image")
    ds = cls(str(images / "labels.tsv"))
    with pytest.raises(DatasetError, match=r"cannot read image '.*img/2\.png' \(line 4 of '.*labels\.tsv'\)"):
        ds[2]
    write_png(str(images / "img" / "2.png"), np.zeros((5, 5, 3)))
    with pytest.raises(DatasetError, match=r"img/2\.png' .* is 5x5 \(WxH\) but the first image is 6x4"):
        ds[2]
    use_cfg(image_crop="5x5")
    with pytest.raises(DatasetError, match=r"img/0\.png' .* is 6x4 \(WxH\) after image_resize, smaller than "
                                           r"image_crop 5x5"):
        cls(str(images / "labels.tsv"))[0]


@pytest.mark.parametrize("field, value", [
    ("image_crop", "abc"), ("image_crop", "2x3x4"), ("image_std", "0"), ("image_mean", "1,2"),
    ("image_layout", "CHW"), ("image_channel_order", "RGBA"), ("image_limit", "-1"), ("image_resize", "x"),
])
def test_image_fields_reject_bad_values(use_cfg, field, value):
    with pytest.raises(ConfigError, match=rf"field '{field}': '{value}' is not accepted"):
        use_cfg(**{field: value})


@pytest.mark.shared
@pytest.mark.skipif(not os.path.isdir(IMAGENET), reason="../shared/data/imagenet_sample is absent beside the repo")
def test_image_folder_on_imagenet_sample(use_cfg):
    use_cfg(image_split="val", image_limit="4", image_mean="127", image_std="128")
    ds = dataset("ImageFolderDataset")(os.path.join(IMAGENET, "labels.tsv"))
    with open(os.path.join(IMAGENET, "labels.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    expected = [int(r[1]) for r in rows if r[3] == "val"][:4]
    assert len(ds) == 4
    for i in range(4):
        sample, label = ds[i]
        assert sample.shape == (224, 224, 3) and sample.dtype == np.float32
        assert -127 / 128 <= sample.min() and sample.max() <= 1.0
        assert int(label) == expected[i]


def test_image_folder_through_the_pipeline(images, use_cfg):
    """make_dataset -> batches -> split_batch, as OptMaster runs it, with TopKMetric."""
    use_cfg(image_split="calib")
    ds = make_dataset("ImageFolderDataset", str(images / "labels.tsv"))

    graph_input = PyTensor("input", torch.zeros(1, 4, 6, 3), Dtype.FP32)
    batch = next(iter(batches(ds, "ImageFolderDataset", 8, 0)))
    (x,), labels = split_batch(batch, [graph_input], "ImageFolderDataset", torch.device("cpu"))
    assert tuple(x.shape) == (2, 4, 6, 3) and labels.tolist() == [3, 5]
    (_, top1), = make_metrics(["TopKMetric"])
    scores = torch.zeros(2, 10)
    scores[0, 3] = scores[1, 4] = 1
    top1([scores], labels)
    assert top1.compute() == 0.5


# ---------------------------------------------------------------- metrics
def test_topk_metric():
    scores = torch.tensor([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1]])
    top1, top2 = metric("TopKMetric", "1"), metric("TopKMetric", "2")
    for m in (top1, top2):
        m([scores], torch.tensor([2, 0]))
        m([scores], np.array([1.0, 2.0]))  # float labels with integer values are class indices
    assert top1.compute() == 0.5  # right: sample 2 of batch 1, sample 1 of batch 2
    assert top2.compute() == 0.75
    top1.reset()
    assert top1.compute() == 0.0


@pytest.mark.parametrize("target, match", [
    (torch.tensor([-1, -1]), r"the dataset gave no labels"),
    (torch.tensor([1.5, 0.0]), r"non-integer values such as 1\.5"),
    (torch.tensor([0, 3]), r"class indices in \[0, 3\), got values from 0 to 3"),
    (torch.zeros(2, 3), r"labels of shape \[2, 3\] for a batch of 2"),
    ([torch.tensor([0, 1]), torch.tensor([0, 1])], r"got 2 label arrays per sample"),
    (torch.tensor([True, False]), r"dtype torch.bool"),
])
def test_topk_metric_label_errors(target, match):
    with pytest.raises(DatasetError, match=match):
        metric("TopKMetric")([torch.zeros(2, 3)], target)


def test_cos_distance_metric():
    m = metric("CosDistanceMetric")
    m([torch.tensor([[1.0, 0.0], [1.0, 1.0]])], torch.tensor([[2.0, 0.0], [1.0, -1.0]]))  # cos 1 and 0
    m([torch.tensor([[0.0, 0.0], [3.0, 4.0]])], torch.tensor([[0.0, 0.0], [4.0, 3.0]]))  # 1 (both zero), 24/25
    assert m.compute() == pytest.approx((1 + 0 + 1 + 24 / 25) / 4)
    m = metric("CosDistanceMetric", "1")  # output 1; (N, 2) references fit a (N, 1, 2) output
    m([torch.zeros(1, 5), torch.tensor([[[1.0, 2.0]]])], np.array([[-1.0, -2.0]]))
    assert m.compute() == pytest.approx(-1.0)
    m = metric("CosDistanceMetric")
    m([torch.tensor([[0.0, 0.0]])], torch.tensor([[1.0, 0.0]]))
    assert m.compute() == 0.0


def test_max_abs_error_and_rmse_metrics():
    pred, ref = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.5], [0.0, 4.0]])
    mae, rmse = metric("MaxAbsErrorMetric"), metric("RMSEMetric", "0")
    for m in (mae, rmse):
        m([pred], ref)
        m([pred[:1]], ref[:1])
    assert mae.compute() == 3.0
    assert rmse.compute() == pytest.approx(math.sqrt((0.25 + 9 + 0.25) / 6))
    mae([torch.tensor([[float("nan"), 0.0]])], torch.zeros(1, 2))
    mae([pred], ref)
    assert math.isnan(mae.compute())


@pytest.mark.parametrize("name", ["CosDistanceMetric", "MaxAbsErrorMetric", "RMSEMetric"])
def test_reference_metric_errors(name):
    pred = [torch.zeros(2, 4)]
    with pytest.raises(DatasetError, match=r"no reference outputs; set the cfg field 'label'"):
        metric(name)(pred, torch.tensor([-1, -1]))
    with pytest.raises(DatasetError, match=r"reference outputs of shape \[2, 3\] do not fit output 0 of shape "
                                           r"\[2, 4\]"):
        metric(name)(pred, torch.zeros(2, 3))
    with pytest.raises(DatasetError, match=r"shape \[2\] do not fit .*; these look like class indices"):
        metric(name)(pred, torch.tensor([3, 1]))
    with pytest.raises(DatasetError, match=r"got 2 arrays per sample"):
        metric(name)(pred, (torch.zeros(2, 4), torch.zeros(2, 4)))
    with pytest.raises(PluginError, match=r"output index 1 asked for, but the graph has 1 output"):
        metric(name, "1")(pred, torch.zeros(2, 4))
    with pytest.raises(PluginError, match=rf"metric '{name}\(x\)' rejected .*output index must be an integer"):
        make_metrics([f"{name}(x)"])
    with pytest.raises(PluginError, match=r"must be >= 0"):
        metric(name, "-1")


def test_perplexity_metric():
    """exp(mean NLL) of every next token over all windows, against the sum by hand."""
    gen = torch.Generator().manual_seed(0)
    logits = [torch.randn(2, 5, 7, generator=gen), torch.randn(1, 5, 7, generator=gen)]
    ids = [torch.randint(0, 7, (2, 5), generator=gen), torch.randint(0, 7, (1, 5), generator=gen)]
    m = metric("PerplexityMetric")
    for lg, t in zip(logits, ids):
        m([lg], t.numpy())
    nll = sum(-torch.log_softmax(lg, -1)[b, p, t[b, p + 1]].item()
              for lg, t in zip(logits, ids) for b in range(lg.shape[0]) for p in range(4))
    assert m.compute() == pytest.approx(math.exp(nll / 12))
    assert "over 12 tokens" in m.report()
    m = metric("PerplexityMetric", "1")  # output 1: a decoder's logits before its caches would be 0
    m([torch.zeros(1, 3), torch.zeros(1, 3, 4)], np.array([[0, 1, 2]]))
    assert m.compute() == pytest.approx(4.0)  # uniform logits over 4 tokens


@pytest.mark.parametrize("pred, target, match", [
    ([torch.zeros(2, 3, 4)], np.zeros((2, 4), np.int64), r"shape \[2, 3, 4\] and the labels \[2, 4\]"),
    ([torch.zeros(2, 4)], np.zeros((2, 4), np.int64), r"expected logits \[batch, positions, vocabulary\]"),
    ([torch.zeros(1, 3, 4)], np.array([[0, 4, 1]]), r"outside the vocabulary of 4"),
    ([torch.zeros(1, 3, 4)], np.array([["a", "b", "c"]]), r"must be the windows' token ids"),
])
def test_perplexity_metric_errors(pred, target, match):
    with pytest.raises(DatasetError, match=match):
        metric("PerplexityMetric")(pred, target)
