"""Checkpoints that are written atomically, rotate, and resume exactly.

Layout, under `trainer.output_dir`:

    checkpoints/step_000020/model/               HF-format policy + tokenizer (consolidated)
    checkpoints/step_000020/trainer_state.pt     optimizer, scheduler, RNG, data position, step

A checkpoint is written into `checkpoints/.tmp-step_000020/` and renamed into place only when
complete, so a run killed at any moment leaves either the previous checkpoints or the new one,
never half of one. `--resume` loads the policy from `model/` and the rest from
`trainer_state.pt`; with the per-step sampling seeds (rollout.py), the resumed run then
produces the same metrics as an uninterrupted one.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.pt"


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary directories are not checkpoints)."""
    root = Path(output_dir) / CHECKPOINTS
    found = [p for p in root.glob("step_*") if (p / STATE_FILE).is_file()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest(output_dir: str | Path) -> Path | None:
    dirs = checkpoint_dirs(output_dir)
    return dirs[-1] if dirs else None


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def save(output_dir, step: int, accelerator, model, tokenizer, optimizer, scheduler, extra: dict, keep_last: int) -> Path:
    """Write checkpoint `step` atomically and keep only the newest `keep_last`. Call on every rank."""
    root = Path(output_dir) / CHECKPOINTS
    final, tmp = root / f"step_{step:06d}", root / f".tmp-step_{step:06d}"
    state_dict = accelerator.get_state_dict(model)  # consolidated full weights (a collective under ZeRO-3)
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).save_pretrained(tmp / "model", state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        state = {
            "step": step,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
            **extra,
        }
        torch.save(state, tmp / STATE_FILE)
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)  # the commit point
        for old in checkpoint_dirs(output_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_state(path: Path, optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and RNG from a checkpoint; return its whole state dict
    (step, data position, ...). The policy weights are loaded from `path / "model"` by the caller."""
    state = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    return state
