"""Quantization-aware fine-tuning of the IR: the stage that runs when the cfg sets
`train_data`, after calibration and global calibration, on the plan.

The model trained is the plan's quantized graph itself (quant/trainable.py): its
forward is npuopt's exact integer forward, so the IR written afterwards computes
what the last training forward computed. By default the loss distills the float
IR's outputs (whatever they are: logits, boxes, features), so unlabeled data do:
for each output, the squared error over the float output's mean square. A share of
train_data (`train_holdout`) is held out: where global calibration is the default
(GPTQ), the start's roundings are fitted again on the training samples, by GPTQ and by
AdaRound, and the one of less error on it taken; the epoch (or the start) with the
least error on it is what is kept. A cfg's `train` names a Train plugin instead (the
Compass Optimizer's QAT training loop: called with the model, a DataLoader of
train_data/train_label and the device).
"""
import dataclasses
import math
import time
from typing import List, Optional, Tuple

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from .data import SHUFFLE_SEED, batch_indices, collate_of, make_dataset, parse_metric_spec
from .errors import ConfigError, PluginError
from .feed import Shard
from .logger import OPT_INFO
from .quant.global_calibration.adaround import adaround
from .quant.global_calibration.auto import auto
from .quant.settings import settings_of
from .quant.trainable import TrainableGraph, learned_layers
from .registry import PLUGINS, PluginType, failed_imports, plugin_code

# the weights' ranges learn at this share of the learning rate: Adam moves every parameter by
# about the rate each step, and a range that moves as fast as the weights (0.5% a step at 0.005)
# threw Lite0's held-out error from 0.087 to 0.29 in one epoch
RANGE_RATE = 0.05
# fewer held-out samples choose by noise: on the parser's mobilenet_v2 (64 training
# images, 6 held out) they kept the start where 16 other images said 8 epochs had helped
MIN_HELD_OUT = 16


def check_training_data(cfg, parallel: bool = False) -> None:
    """What fine-tuning needs, before any work is done."""
    if not cfg.train_data:
        for name in ("train", "train_label"):
            if getattr(cfg, name):
                raise ConfigError(f"field '{name}': fine-tuning runs when 'train_data' is set")
        return
    if not cfg.dataset:
        raise ConfigError("field 'train_data': set 'dataset', the plugin that reads it")
    if not (cfg.calibration_data or cfg.statistic_file):
        raise ConfigError("field 'train_data': fine-tuning starts from a calibrated model: set 'calibration_data'")
    if parallel:
        raise ConfigError("field 'train_data': fine-tuning runs in one process; run it without torchrun")
    if cfg.train:
        train_plugin(cfg.train)


def train_plugin(spec: str):
    """The registration of the Train plugin the cfg's `train` names, and its args."""
    name, args = parse_metric_spec(spec)
    reg = PLUGINS[PluginType.Train].best(name)
    if reg is None:
        known = ", ".join(PLUGINS[PluginType.Train].keys()) or "none"
        raise PluginError(f"field 'train': Train plugin '{name}' not found (known: {known}){failed_imports()}")
    return reg, args


def fine_tune(master) -> None:
    """The stage: train the plan's quantized graph on train_data, then keep what it learned."""
    cfg = master.cfg
    if not cfg.train_data:
        return
    teacher = master.keep_original()
    started = time.perf_counter()
    dataset = make_dataset(cfg.dataset, cfg.train_data, cfg.train_label or None, field="train_data")
    if len(dataset) == 0:
        raise ConfigError(f"field 'train_data': '{cfg.train_data}' has no sample")
    report = {"samples": len(dataset), "epochs": cfg.train_epochs if not cfg.train else None,
              "train": cfg.train or "distillation"}
    if cfg.train:
        model = trainable(master)
        run_train_plugin(cfg, model, dataset, master.device)
    else:
        train, held = held_out_split(len(dataset), cfg.train_holdout)
        size = master.feed.batch_size(cfg.train_batch_size)
        held_out = HeldOut(teacher, Shard(master.feed, dataset, in_batches(held, size), "train_data"))
        model, report["start"], start_error = choose_start(master, held_out, dataset, train) if held else \
            (trainable(master), None, None)
        report.update(distill(model, teacher, master.feed, dataset, train, held_out, cfg, start_error))
    report["layers"] = len(model.by_name)
    model.finish()
    seconds = time.perf_counter() - started
    master.report["fine_tuning"] = {**report, "seconds": round(seconds, 1)}
    OPT_INFO(f"fine-tuning: {len(model.by_name)} layers' weights and biases learned on {len(dataset)} samples "
             f"in {seconds:.1f} s" + _summary(report))


def _summary(report: dict) -> str:
    if "loss_first_epoch" not in report:
        return ""
    said = f" (loss {report['loss_first_epoch']:.4g} in the first epoch, {report['loss_last_epoch']:.4g} in the last"
    errors = report["held_out_errors"]
    if errors:
        kept = report["kept_epoch"]
        said += (f"; error on {report['held_out']} held-out samples {errors[0]:.4g} before, {errors[kept]:.4g} "
                 + (f"after epoch {kept}, kept" if kept else "after no epoch: the start kept"))
    return said + ")"


def held_out_split(length: int, share: float) -> Tuple[List[int], List[int]]:
    """(training samples, held-out samples) of a dataset of `length`: the held-out ones a
    fixed random choice of int(share * length), none where that is below MIN_HELD_OUT or
    leaves no training."""
    count = int(share * length)
    if count < MIN_HELD_OUT or count >= length:
        return list(range(length)), []
    order = batch_indices(length, length, shuffle=True)[0]
    return sorted(order[count:]), sorted(order[:count])


def in_batches(samples: List[int], size: int) -> List[List[int]]:
    """The samples, in order, as batches of `size` (the last one shorter)."""
    return [samples[i:i + size] for i in range(0, len(samples), size)]


class HeldOut:
    """The held-out samples and what measures a model's error on them."""

    def __init__(self, teacher, shard: Shard):
        self.teacher, self.shard, self.apart = teacher, shard, teacher.keeps_samples_apart()
        self.count = sum(shard.size(u) for u in range(len(shard)))

    def error(self, model: TrainableGraph) -> float:
        """The distillation loss over the held-out samples (no gradient), per sample."""
        total = 0.0
        with torch.no_grad():
            for unit, batch in self.shard.read():
                total += step_loss(model, self.teacher, self.shard.graph_inputs(batch), self.apart) * \
                    self.shard.size(unit)
        return total / self.count


def trainable(master) -> TrainableGraph:
    return TrainableGraph(master.plan, learn_ranges=master.cfg.train_ranges == "weights")


def choose_start(master, held_out: HeldOut, dataset, train: List[int]) -> Tuple[TrainableGraph, Optional[dict],
                                                                             Optional[float]]:
    """The trainable model to start from, how it was chosen and its held-out error (None
    where it was not measured): where global calibration is the default (GPTQ) and the
    calibration data are at hand, the integer weights below 8 bits are rounded again on
    the training samples, by GPTQ and by AdaRound, and the start of less error on the
    held-out samples taken (on Lite0's 4-bit weights AdaRound's; on the parser's
    random-weight mobilenet_v2, GPTQ's). The training samples, not the calibration
    ones: a layer-wise rounding fitted on more images generalizes better (Lite0, 4-bit
    weights, AdaRound on 270 training images rather than the 100 calibration ones: output
    cosine to float on 200 other images 0.940 -> 0.955)."""
    plan = master.plan
    rounded = [n.name for n in learned_layers(plan.graph)
               if settings_of(n).weights_format == "int" and settings_of(n).weight_bits < 8]
    default = [call.method.name for call in master.methods] == ["auto"] and master.methods[0].scope is None
    if not (rounded and default and master.has_calibration_data()):
        return trainable(master), None, None
    ctx = dataclasses.replace(on_training_samples(master, dataset, train), scope=lambda node: node.name in rounded)
    auto(ctx, [])
    model = trainable(master)
    states = {name: plan.layer_state(name) for name in rounded}
    errors = {"gptq_zy": held_out.error(model)}
    adaround(ctx, [])
    model = trainable(master)
    errors["adaround"] = held_out.error(model)
    chosen = "gptq_zy" if errors["gptq_zy"] <= errors["adaround"] else "adaround"  # (ties: the default's)
    if chosen == "gptq_zy":
        for name, state in states.items():
            plan.restore_layer_state(name, state)
        plan.forget()
        model = trainable(master)
    OPT_INFO(f"fine-tuning starts from {chosen}'s roundings on the {len(train)} training samples: error on the "
             "held-out samples " + ", ".join(f"{k} {v:.4g}" for k, v in errors.items()))
    return model, {"chosen": chosen, "held_out_errors": errors}, errors[chosen]


def on_training_samples(master, dataset, train: List[int]):
    """The global-calibration context with the training samples of train_data as its data."""
    units = in_batches(train, master.feed.batch_size(master.cfg.calibration_batch_size))

    def shard(limit: int = None) -> Shard:
        return Shard(master.feed, dataset, units[:limit] if limit else units, "train_data")

    def batches():
        read = shard()
        return (read.graph_inputs(b) for _, b in read.read())
    return dataclasses.replace(master.calibration_context(), batches=batches, shard=shard)


def distill(model: TrainableGraph, teacher, feed, dataset, train: List[int], held_out: HeldOut, cfg,
            start_error: Optional[float] = None) -> dict:
    """npuopt's recipe: Adam on the weights (in grid steps) and biases, the learning rate
    decayed along a cosine, the loss each output's error relative to the float output;
    the parameters of the epoch (or the start) of least error on the held-out samples are
    kept (`start_error`: the start's, where choose_start measured it). Returns the mean
    loss of the first and last epochs, the held-out errors (before training, after each
    epoch) and the epoch kept (0: the start)."""
    size = feed.batch_size(cfg.train_batch_size)
    held = held_out.count > 0
    per_epoch = math.ceil(len(train) / size)
    total = per_epoch * cfg.train_epochs
    optimizer = adam(model, cfg.train_learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / total)))
    apart = held_out.apart
    errors = [start_error if start_error is not None else held_out.error(model)] if held else []
    kept = (0, _state(model) if held else None)
    losses = []
    with tqdm(total=total, desc="fine-tuning", unit="step") as bar:
        for epoch in range(cfg.train_epochs):
            order = batch_indices(len(train), size, cfg.train_shuffle, SHUFFLE_SEED + epoch)  # a seed per epoch
            shard = Shard(feed, dataset, [[train[i] for i in unit] for unit in order], "train_data")
            total_loss = 0.0
            for _, batch in shard.read():
                inputs = shard.graph_inputs(batch)
                optimizer.zero_grad()
                loss = step_loss(model, teacher, inputs, apart)
                optimizer.step()
                schedule.step()
                total_loss += loss
                bar.update(1)
                last = {"held_out": f"{errors[-1]:.4g}"} if errors else {}
                bar.set_postfix(epoch=epoch + 1, loss=f"{loss:.4g}", **last)
            losses.append(total_loss / per_epoch)
            if held:
                errors.append(held_out.error(model))
                if errors[-1] <= errors[kept[0]]:  # among equals, the later (it learned more)
                    kept = (epoch + 1, _state(model))
    if held:
        model.load_state_dict(kept[1])
    return {"loss_first_epoch": losses[0], "loss_last_epoch": losses[-1], "held_out": held_out.count,
            "held_out_errors": errors, "kept_epoch": kept[0] if held else cfg.train_epochs}


def adam(model: TrainableGraph, lr: float) -> torch.optim.Adam:
    """Adam over the weights and biases at `lr`, over the weights' ranges at RANGE_RATE of it."""
    learned = dict(model.named_parameters())
    ranges = [p for name, p in learned.items() if name.endswith("log_range")]
    return torch.optim.Adam([{"params": [p for name, p in learned.items() if not name.endswith("log_range")]}]
                            + ([{"params": ranges, "lr": lr * RANGE_RATE}] if ranges else []), lr=lr)


def _state(model: TrainableGraph) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def step_loss(model: TrainableGraph, teacher, inputs: List[torch.Tensor], apart: bool) -> float:
    """The batch's distillation loss, its gradient accumulated (one sample at a time where
    the graph does not keep samples apart); returns the loss."""
    targets = teacher.forward(inputs)
    batch = inputs[0].shape[0] if inputs[0].dim() else 1
    parts = [(inputs, targets)] if apart or batch == 1 else \
        [([x[i:i + 1] for x in inputs], [t[i:i + 1] for t in targets]) for i in range(batch)]
    total = 0.0
    for xs, ts in parts:
        outputs = model.outputs(*xs)
        loss = sum(relative_error(o, t) for o, t in zip(outputs, ts)) / len(parts)
        if loss.requires_grad:
            loss.backward()
        total += loss.item()
    return total


def relative_error(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The squared error of an output over the float output's mean square."""
    target = target.detach().to(torch.float32)
    if not target.is_floating_point() or not output.is_floating_point():
        return torch.zeros(())
    error, power = (output - target).pow(2).mean(), target.pow(2).mean()
    return error / power if float(power) > 0 else error


def run_train_plugin(cfg, model: TrainableGraph, dataset, device) -> None:
    """The cfg's Train plugin, as the Compass Optimizer's QAT calls it: made with the
    `train` field's args, called with the model, a DataLoader of train_data (with
    train_label) and the device; its code's failures are one line naming its file."""
    reg, args = train_plugin(cfg.train)
    loader = DataLoader(dataset, batch_size=cfg.train_batch_size, shuffle=cfg.train_shuffle,
                        num_workers=cfg.dataloader_workers, collate_fn=collate_of(dataset))
    with plugin_code(reg, f"the Train plugin '{cfg.train}'"):
        loop = reg.obj(*args)
        loop(model, loader, device=device)
