"""Quantization-aware fine-tuning of the IR: the stage that runs when the cfg sets
`train_data`, after calibration and global calibration, on the plan.

The model trained is the plan's quantized graph itself (quant/trainable.py): its
forward is npuopt's exact integer forward, so the IR written afterwards computes
what the last training forward computed. By default the loss distills the float
IR's outputs (whatever they are: logits, boxes, features), so unlabeled data do:
for each output, the squared error over the float output's mean square. A cfg's
`train` names a Train plugin instead (the Compass Optimizer's QAT training loop:
called with the model, a DataLoader of train_data/train_label and the device).
"""
import math
import time
from typing import List

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from .data import SHUFFLE_SEED, batch_indices, collate_of, make_dataset, parse_metric_spec
from .errors import ConfigError, PluginError
from .feed import Shard
from .logger import OPT_INFO
from .quant.trainable import TrainableGraph
from .registry import PLUGINS, PluginType, failed_imports, plugin_code


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
    model = TrainableGraph(master.plan, learn_ranges=cfg.train_ranges == "weights")
    dataset = make_dataset(cfg.dataset, cfg.train_data, cfg.train_label or None, field="train_data")
    if len(dataset) == 0:
        raise ConfigError(f"field 'train_data': '{cfg.train_data}' has no sample")
    if cfg.train:
        losses = run_train_plugin(cfg, model, dataset, master.device)
    else:
        losses = distill(model, teacher, master.feed, dataset, cfg)
    model.finish()
    seconds = time.perf_counter() - started
    master.report["fine_tuning"] = {"samples": len(dataset), "layers": len(model.by_name),
                                    "epochs": cfg.train_epochs if not cfg.train else None,
                                    "loss_first_epoch": losses[0] if losses else None,
                                    "loss_last_epoch": losses[-1] if losses else None,
                                    "train": cfg.train or "distillation", "seconds": round(seconds, 1)}
    OPT_INFO(f"fine-tuning: {len(model.by_name)} layers' weights and biases learned on {len(dataset)} samples "
             f"in {seconds:.1f} s" + (f" (loss {losses[0]:.4g} in the first epoch, {losses[-1]:.4g} in the last)"
                                     if losses else ""))


def distill(model: TrainableGraph, teacher, feed, dataset, cfg) -> List[float]:
    """npuopt's recipe: Adam on the weights (in grid steps) and biases, the learning rate
    decayed along a cosine, the loss each output's error relative to the float output.
    Returns the mean loss of each epoch."""
    size = feed.batch_size(cfg.train_batch_size)
    per_epoch = math.ceil(len(dataset) / size)
    total = per_epoch * cfg.train_epochs
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train_learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / total)))
    apart = teacher.keeps_samples_apart()
    losses = []
    with tqdm(total=total, desc="fine-tuning", unit="step") as bar:
        for epoch in range(cfg.train_epochs):
            order = batch_indices(len(dataset), size, cfg.train_shuffle, SHUFFLE_SEED + epoch)  # a seed per epoch
            shard = Shard(feed, dataset, order, "train_data")
            total_loss = 0.0
            for _, batch in shard.read():
                inputs = shard.graph_inputs(batch)
                optimizer.zero_grad()
                loss = step_loss(model, teacher, inputs, apart)
                optimizer.step()
                schedule.step()
                total_loss += loss
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{loss:.4g}")
            losses.append(total_loss / per_epoch)
    return losses


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


def run_train_plugin(cfg, model: TrainableGraph, dataset, device) -> List[float]:
    """The cfg's Train plugin, as the Compass Optimizer's QAT calls it: made with the
    `train` field's args, called with the model, a DataLoader of train_data (with
    train_label) and the device; its code's failures are one line naming its file."""
    reg, args = train_plugin(cfg.train)
    loader = DataLoader(dataset, batch_size=cfg.train_batch_size, shuffle=cfg.train_shuffle,
                        num_workers=cfg.dataloader_workers, collate_fn=collate_of(dataset))
    with plugin_code(reg, f"the Train plugin '{cfg.train}'"):
        loop = reg.obj(*args)
        loop(model, loader, device=device)
    return []
