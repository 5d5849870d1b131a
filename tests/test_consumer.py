"""Issue 44, acceptance 4: the Compass Optimizer's llama2 dataset and LMHead metric, unchanged
but for the import prefix (tools/port_opt_plugins.py), calibrate and measure a decode IR
with its history fed back through the dataset's `consumer` (npuopt/consumer.py).

The decode IR is shaped as the dataset reads it: inputs [embeddings, attention mask,
position ids, history K, history V], outputs [logits, present K, present V], where the
present K/V are the history followed by the step's new positions; the dataset takes
present[0, :, 2048:, :] (its fixed seq_len) as the next step's history, so a step has
2048 new positions and the last P of them become the next history. The dataset returns
no labels (an empty list), so the metric run uses a user's subclass that adds them: the
OPT files stay as they are.

Each run records every forward (npuopt.graph.PyGraph.forward: the graph, its inputs and
outputs) and the test checks that the history of step i + 1 is step i's present
K/V, in calibration (the float graph's) and in the metrics (the float graph's for the
float pass, the quantized graph's, dequantized, for the quantized pass). The quantized
graph's inputs are recorded as fed, before its Input layers quantize them."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from npuopt.errors import ConfigError
from npuopt.feed import Feed
from npuopt.ir import write_graph
from npuopt.ir.builder import GraphBuilder
from npuopt.ranks import Ranks

from conftest import npuopt_env, write_cfg

SEQ, HISTORY, EMBED, VOCAB, STEPS = 2048, 4, 8, 16, 3  # the dataset's seq_len: positions per step

# runs npuopt's command on the cfg with every forward recorded into an .npz
DRIVER = textwrap.dedent('''
    import json, sys
    import numpy as np
    import npuopt.evaluation, npuopt.graph, npuopt.quant.calibration
    from npuopt.cli import main
    from npuopt.quant.compare import dequantized
    calls, phase = [], ["other"]

    def in_phase(name, function):
        def run(*args, **kwargs):
            before, phase[0] = phase[0], name
            try:
                return function(*args, **kwargs)
            finally:
                phase[0] = before
        return run

    def recorded(forward):
        def run(self, inputs, *args, **kwargs):
            outputs = forward(self, inputs, *args, **kwargs)
            kind = "quant" if any(n.quantized for n in self.nodes) else "float"
            values = [dequantized(t, y) for t, y in zip(self.output_tensors, outputs)] if kind == "quant" else outputs
            calls.append((f"{phase[0]}-{kind}", [x.detach().double().cpu().numpy() for x in inputs],
                          [y.detach().double().cpu().numpy() for y in values]))
            return outputs
        return run

    npuopt.graph.PyGraph.forward = recorded(npuopt.graph.PyGraph.forward)
    Calibrator = npuopt.quant.calibration.Calibrator
    Calibrator.run = in_phase("calibration", Calibrator.run)
    npuopt.evaluation.evaluate = in_phase("metrics", npuopt.evaluation.evaluate)
    npuopt.evaluation.layer_similarity = in_phase("similarity", npuopt.evaluation.layer_similarity)
    try:
        main(["--cfg", sys.argv[1]], standalone_mode=False)
        rc = 0
    except SystemExit as e:
        rc = e.code
    np.savez(sys.argv[2], **{f"{i}_{kind}_{io}{j}": v for i, (kind, ins, outs) in enumerate(calls)
                             for io, values in (("in", ins), ("out", outs)) for j, v in enumerate(values)})
    print(json.dumps({"rc": rc, "calls": len(calls)}))
''')

LABELLED = textwrap.dedent('''
    from npuopt.framework import *
    from aipubt_dataset_llama2 import LLama2Dataset


    @register_plugin(PluginType.Dataset, '1.0')
    class LLama2LabelledDataset(LLama2Dataset):
        """OPT's llama2 dataset with its label file's first array (if any) as each sample's labels."""

        def __getitem__(self, idx):
            inputs, labels = super().__getitem__(idx)
            return [inputs, [self.label[0][idx]] if self.label else labels]
''')


def decode_step(folder: Path) -> Path:
    """One attention step over a history of HISTORY positions and SEQ new ones."""
    rng = torch.Generator().manual_seed(0)

    def fc(n_in, n_out):
        return {"weights": torch.randn(n_out, n_in, generator=rng) / n_in ** 0.5, "biases": torch.zeros(n_out)}

    b = GraphBuilder("llama2_decode_step")
    b.input("embedded", [1, SEQ, EMBED])
    b.input("mask", [1, 1, 1, HISTORY + SEQ])
    b.input("positions", [1, SEQ, 1])
    b.input("history_k", [1, 1, HISTORY, EMBED])
    b.input("history_v", [1, 1, HISTORY, EMBED])
    b.layer("Concat", "features", ["embedded", "positions"], {"axis": 2})
    b.layer("Reshape", "rows", ["features"], {"shape": [SEQ, EMBED + 1]})
    for name in "qkv":
        b.layer("FullyConnected", name, ["rows"], {"num_output": EMBED, "with_activation": "NONE"},
                fc(EMBED + 1, EMBED))
        b.layer("Reshape", f"{name}_heads", [name], {"shape": [1, 1, SEQ, EMBED]})
    b.layer("Concat", "present_k", ["history_k", "k_heads"], {"axis": 2})
    b.layer("Concat", "present_v", ["history_v", "v_heads"], {"axis": 2})
    b.layer("MatMul", "scores", ["q_heads", "present_k"], {"trans_a": False, "trans_b": True})
    b.layer("Eltwise", "masked", ["scores", "mask"], {"method": "ADD", "with_activation": "NONE"})
    b.layer("Softmax", "weights", ["masked"], {"axis": 3})
    b.layer("MatMul", "attended", ["weights", "present_v"], {"trans_a": False, "trans_b": False})
    b.layer("Reshape", "attended_rows", ["attended"], {"shape": [SEQ, EMBED]})
    b.layer("FullyConnected", "head", ["attended_rows"], {"num_output": VOCAB, "with_activation": "NONE"},
            fc(EMBED, VOCAB))
    b.layer("Reshape", "logits", ["head"], {"shape": [1, SEQ, VOCAB]})
    txt = folder / "decode.txt"
    write_graph(b.build(["logits", "present_k", "present_v"]), str(txt))
    return txt


def samples(folder: Path, rng) -> tuple:
    """STEPS samples of the dataset's five inputs (its history entries are replaced by the
    fed-back ones) and a label file of one next token per sample."""
    data = {"0": rng.standard_normal((STEPS, SEQ, EMBED)).astype(np.float32),
            "1": np.zeros((STEPS, 1, 1, HISTORY + SEQ), np.float32),
            "2": np.tile(np.arange(SEQ, dtype=np.float32)[None, :, None] / SEQ, (STEPS, 1, 1)),
            "3": np.ones((STEPS, 1, HISTORY, EMBED), np.float32),
            "4": np.ones((STEPS, 1, HISTORY, EMBED), np.float32)}
    np.save(folder / "data.npy", data, allow_pickle=True)
    np.save(folder / "label.npy", {"0": rng.integers(0, VOCAB, (2 * STEPS, 1))}, allow_pickle=True)
    return folder / "data.npy", folder / "label.npy"


@pytest.fixture(scope="module")
def plugins(opt_root, tmp_path_factory) -> Path:
    """The two OPT plugin files ported by the import prefix, and the labelled subclass."""
    from port_opt_plugins import port_text
    folder = tmp_path_factory.mktemp("plugins")
    for name in ("aipubt_dataset_llama2.py", "aipubt_metric_LMHead.py"):
        source = opt_root / "AIPUBuilder" / "Optimizer" / "plugins" / name
        (folder / name).write_text(port_text(source.read_text(encoding="utf-8")), encoding="utf-8")
    (folder / "llama2_labelled.py").write_text(LABELLED, encoding="utf-8")
    return folder


def run(folder: Path, plugins: Path, **fields) -> tuple:
    """npuopt on the decode step with `fields`: (rc and forward count, the recorded forwards)."""
    rng = np.random.default_rng(0)
    txt = decode_step(folder)
    data, label = samples(folder, rng)
    cfg = write_cfg(folder / "opt.cfg", graph=txt.name, bin="decode.bin", calibration_data=data.name,
                    calibration_batch_size=1, metric_batch_size=1, output_dir="out", **fields)
    done = subprocess.run([sys.executable, "-c", DRIVER, str(cfg), str(folder / "calls.npz")], cwd=folder,
                          env=npuopt_env(plugins), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0, done.stderr[-3000:]
    return result, np.load(folder / "calls.npz")


def forwards(calls, kind: str) -> list:
    """The recorded forwards ("<phase>-<float or quant>") in their order: (inputs, outputs)."""
    count = len({k.split("_")[0] for k in calls.files})
    return [([calls[f"{i}_{kind}_in{j}"] for j in range(5)], [calls[f"{i}_{kind}_out{j}"] for j in range(3)])
            for i in range(count) if f"{i}_{kind}_in0" in calls.files]


def assert_chained(steps: list) -> None:
    """Step 0 starts from zero history; each next step's history is the step before's present
    K/V past the dataset's seq_len (its last HISTORY positions). The dataset doubles its
    arrays: 2 * STEPS steps."""
    assert len(steps) == 2 * STEPS
    inputs, _ = steps[0]
    assert not inputs[3].any() and not inputs[4].any()
    for (_, before), (after, _) in zip(steps, steps[1:]):
        for history, present in ((after[3], before[1]), (after[4], before[2])):
            assert present.shape == (1, 1, HISTORY + SEQ, EMBED)
            np.testing.assert_array_equal(history, present[:, :, SEQ:, :])
            assert history.any()


@pytest.mark.shared
def test_llama2_calibrates_with_history_fed_back(plugins, tmp_path):
    _, calls = run(tmp_path, plugins, dataset="LLama2Dataset")
    assert_chained(forwards(calls, "calibration-float"))


@pytest.mark.shared
def test_llama2_with_lmhead_measures_each_graph_with_its_own_history(plugins, tmp_path):
    _, calls = run(tmp_path, plugins, dataset="LLama2LabelledDataset", data="data.npy",
                        label="label.npy", metric="LMHeadMetric")
    report = json.loads((tmp_path / "out" / "llama2_decode_step_report.json").read_text())
    assert set(report["metrics"]["float"]) == {"LMHeadMetric"} and report["metrics"]["quant"]["LMHeadMetric"] > 0
    assert_chained(forwards(calls, "calibration-float"))
    float_steps, quant_steps = forwards(calls, "metrics-float"), forwards(calls, "metrics-quant")
    assert_chained(float_steps)   # the float graph's metric pass
    assert_chained(quant_steps)   # the quantized graph's, its outputs dequantized
    assert not np.array_equal(float_steps[-1][0][3], quant_steps[-1][0][3])


class Chain(torch.utils.data.Dataset):
    """A dataset that takes outputs back, as OPT's llama2 one does: sample i > 0 is what the
    consumer's first output tensor held when it was loaded (sample 0: its own value)."""

    def __init__(self, count: int):
        self.consumer, self.count, self.seen = None, count, []

    def __len__(self):
        return self.count

    def __getitem__(self, idx):
        self.seen.append(self.consumer)
        if idx == 0:
            return np.full(3, 0.5, np.float32)
        return self.consumer.output_tensors[0].betensor[0].numpy().copy()


def doubling(ranks: Ranks = None) -> Feed:
    """A Feed of a one-layer float graph, y = 2x, over inputs of 3 numbers."""
    b = GraphBuilder("doubling")
    b.input("x", [1, 3])
    b.layer("Eltwise", "y", ["x", "x"], {"method": "ADD", "with_activation": "NONE"})
    cfg = SimpleNamespace(dataset="Chain", dataloader_workers=2, without_batch_dim=False, data_batch_dim=0)
    return Feed(cfg, b.build(["y"]), torch.device("cpu"), ranks)


def test_a_read_without_a_graph_of_its_own_is_fed_by_the_float_graph():
    """How global calibration reads: each batch is the float graph's output on the one before,
    the consumer is set only while the read loads and the dataset's own comes back at its end."""
    feed, dataset = doubling(), Chain(4)
    read = [batch for _, batch in feed.shard(dataset, 1, "calibration_data").read()]
    assert [float(b[0, 0]) for b in read] == [0.5, 1.0, 2.0, 4.0]
    assert dataset.seen[1].name == "doubling" and [t.name for t in dataset.seen[1].output_tensors] == ["y"]
    assert dataset.consumer is None


def test_a_read_fed_by_a_graph_holds_what_the_caller_ran():
    """As calibration and the metrics read: the caller hands each batch's outputs back; the
    dataset has its own consumer between loads, also where the caller stops early."""
    feed, dataset = doubling(), Chain(4)
    read = feed.shard(dataset, 1, "data").read(fed_by=feed.graph)
    values = []
    for _ in range(3):
        values.append(float(next(read)[1][0, 0]))
        assert dataset.consumer is None
        read.ran([torch.full((1, 3), 10.0 * len(values))])
    assert values == [0.5, 10.0, 20.0]


def test_a_dataset_that_takes_outputs_back_is_refused_in_a_job_of_several_ranks():
    feed = doubling(Ranks(0, 2))
    with pytest.raises(ConfigError, match=r"field 'data': dataset 'Chain' takes each batch's outputs back .*"
                                          r"2 ranks cannot share them"):
        feed.shard(Chain(4), 1, "data").read()
