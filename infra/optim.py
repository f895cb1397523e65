"""The optimizer and its learning-rate schedule, from the config's `optim` section.

    optimizer, scheduler = make_optimizer(model, cfg.optim, total_updates)  # AdamW; warmup, then constant or cosine

The schedule is stepped once per optimizer step (train.optimizer_step), so `optim.warmup_steps` counts optimizer
steps, not training steps (configs/qwen3_8b_qae.yaml says what that means for verl's scripts).
"""

from __future__ import annotations

import math

import torch


def make_optimizer(model: torch.nn.Module, optim_cfg, total_updates: int):
    """AdamW over the model's parameters (lr, betas, decoupled weight decay) and make_scheduler's schedule."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=optim_cfg.lr, betas=optim_cfg.betas,
                                  weight_decay=optim_cfg.weight_decay)
    return optimizer, make_scheduler(optimizer, optim_cfg, total_updates)


def make_scheduler(optimizer, optim_cfg, total_updates: int):
    """Linear warmup, then constant or cosine to 0, stepped once per optimizer step."""

    def factor(i: int) -> float:
        if i < optim_cfg.warmup_steps:
            return (i + 1) / optim_cfg.warmup_steps
        if optim_cfg.lr_schedule == "cosine":
            progress = (i - optim_cfg.warmup_steps) / max(1, total_updates - optim_cfg.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
