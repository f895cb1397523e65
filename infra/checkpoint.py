"""Checkpoints that are written atomically, rotate, and resume exactly.

Layout, under `trainer.output_dir`:

    checkpoints/step_000020/model/               HF-format policy + tokenizer (consolidated)
    checkpoints/step_000020/trainer_state.pt     optimizer, scheduler, data position, step
    checkpoints/step_000020/rank_00000.pt        each process's RNG (and, under DeepSpeed, its
                                                 shard of the optimizer state and fp32 weights)

A checkpoint is written into `checkpoints/.tmp-step_000020/` and renamed into place only when
complete, so a run killed at any moment leaves either the previous checkpoints or the new one,
never half of one. `--resume` loads the policy from `model/` and the rest from
`trainer_state.pt`; with the per-step sampling seeds (rollout.py), the resumed run then
produces the same metrics as an uninterrupted one. A run resumes with the number of processes
that wrote the checkpoint (DeepSpeed's optimizer shards are per rank). Before anything loads,
`problem` checks a checkpoint whole (every file present, the state files readable, the
safetensors headers matching the file sizes), so a damaged one is refused in one line that names
the file and the previous checkpoint. A write that fails on any rank (a full disk, a read-only
folder) raises `CheckpointError` on every rank, one line naming the folder and about how much a
checkpoint needs; the temporary directory is removed and the previous checkpoints are untouched,
so `--resume` continues from the newest of them.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from config import ConfigError
from infra.model import model_dir_problem
from infra.policy import hf_model

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


def step_of(path: Path) -> int | None:
    """The step of a checkpoint directory `step_000020`, or None for any other name."""
    name = Path(path).name
    return int(name[5:]) if name.startswith("step_") and name[5:].isdigit() else None


def newest(output_dir: str | Path) -> Path | None:
    """The newest checkpoint directory, complete or not: --resume must not skip a damaged one silently."""
    root = Path(output_dir) / CHECKPOINTS
    found = [p for p in root.glob("step_*") if p.is_dir() and step_of(p) is not None] if root.is_dir() else []
    return max(found, key=step_of, default=None)


def read_state_file(file: Path) -> tuple[object, str | None]:
    """A .pt file memory-mapped (nothing big is read), or why it cannot be read. torch.save writes a
    zip archive whose directory is at its end, so a truncated file is not a zip archive."""
    if not zipfile.is_zipfile(file):
        return None, f"is truncated or was not written by torch.save ({file.stat().st_size} bytes, no zip directory)"
    try:
        return torch.load(file, map_location="cpu", weights_only=False, mmap=True), None
    except Exception as e:  # a damaged archive, a foreign pickle: say which file, in one line
        lines = str(e).strip().splitlines()
        return None, f"cannot be read ({type(e).__name__}: {lines[0][:120] if lines else ''})"


def problem(path: Path) -> str | None:
    """Why the checkpoint at `path` cannot be resumed, naming the file (relative to `path`); None
    if it is whole. Reads only the state files (memory-mapped) and the safetensors headers."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        return f"{STATE_FILE} is missing"
    state, why = read_state_file(path / STATE_FILE)
    if why:
        return f"{STATE_FILE} {why}"
    if not isinstance(state, dict) or "step" not in state:
        return f"{STATE_FILE} was not written by train.py"
    for rank in range(state.get("world_size", 1)):
        file = rank_file(path, rank)
        why = "is missing" if not file.is_file() else read_state_file(file)[1]
        if why:
            return f"{file.name} {why}"
    if not (path / "model").is_dir():
        return "model/ is missing"
    why = model_dir_problem(path / "model")
    return f"model/{why}" if why else None


def earlier(path: Path) -> Path | None:
    """The newest whole checkpoint older than the one at `path`, in the same run, if any."""
    path, step = Path(path), step_of(path)
    if step is None or path.parent.name != CHECKPOINTS:
        return None
    older = [d for d in checkpoint_dirs(path.parent.parent) if step_of(d) < step]
    return next((d for d in reversed(older) if problem(d) is None), None)


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


def rank_file(path: Path, rank: int) -> Path:
    return Path(path) / f"rank_{rank:05d}.pt"


def sharded_optimizer(accelerator) -> bool:
    """DeepSpeed partitions the optimizer state (and fp32 master weights) across ranks."""
    return accelerator.state.deepspeed_plugin is not None


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (a full disk, a read-only folder); the message is one line."""


def tensor_bytes(obj) -> int:
    """Bytes of the tensors in a (nested) state: about what torch.save or safetensors writes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def disk_bytes(path: Path | None) -> int:
    """Bytes of the files under `path` (0 for None)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if path else 0


def human(n: float) -> str:
    """A size in MiB or GiB, one decimal."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def free_bytes(path: Path) -> int:
    """Free space on the file system that holds `path` (or its nearest existing parent)."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _attempt(write) -> str | None:
    """Run `write`; the error it raises as one line, or None. An OSError (ENOSPC, EROFS, EACCES, ...), or
    the RuntimeError torch.save's zip writer raises when the disk fills ("unexpected pos ...")."""
    try:
        write()
        return None
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}" + (f" ({e.filename})" if e.filename else "")
    except RuntimeError as e:
        lines = str(e).strip().splitlines()
        return f"{type(e).__name__}: {lines[0][:160] if lines else ''}"


def _first_error(accelerator, error: str | None) -> str | None:
    """Every rank's write agreed on: the first rank's error, or None if all succeeded (a collective)."""
    if accelerator.num_processes == 1:
        return error
    from accelerate.utils import gather_object

    errors = gather_object([error])  # one entry per rank, in rank order
    return next((f"rank {i}: {e}" for i, e in enumerate(errors) if e), None)


def save(output_dir, step: int, accelerator, model, tokenizer, optimizer, scheduler, extra: dict,
         keep_last: int) -> Path:
    """Write checkpoint `step` atomically and keep only the newest `keep_last`. Call on every rank.

    A write that fails on any rank (a full disk, a read-only folder) raises CheckpointError on every
    rank, naming the folder and about how much a checkpoint needs, after the temporary directory is
    removed; the previous checkpoints are untouched (old ones are deleted only after the new one is
    complete). Before writing, too little free space for the last checkpoint's size prints a warning."""
    root = Path(output_dir) / CHECKPOINTS
    final, tmp = root / f"step_{step:06d}", root / f".tmp-step_{step:06d}"
    state_dict = accelerator.get_state_dict(model)  # consolidated full weights on rank 0 (a collective under ZeRO-3)
    mine = {"rng": rng_state()}
    if sharded_optimizer(accelerator):
        mine["optimizer"] = optimizer.state_dict()  # this rank's partition
    error = None
    if accelerator.is_main_process:
        state_dict = {k.removeprefix("model."): v for k, v in state_dict.items()}  # policy.Policy holds it as .model
        state = {"step": step, "scheduler": scheduler.state_dict(), "world_size": accelerator.num_processes, **extra}
        if not sharded_optimizer(accelerator):
            state["optimizer"] = optimizer.state_dict()
        previous = latest(output_dir)
        estimate = tensor_bytes(state_dict) + tensor_bytes(state) + accelerator.num_processes * tensor_bytes(mine)
        need = disk_bytes(previous) or estimate  # the last checkpoint's size, else the tensors about to be written
        sized = f"a checkpoint needs about {human(need)}" + (f" (the size of {previous.name})" if previous
                                                                       else "")
        free = free_bytes(root)
        if free < need:
            tqdm.write(f"warning: {human(free)} free in `{root}`, {sized}; writing {final.name} anyway",
                       file=sys.stderr)  # a line of its own next to train.py's progress bar
        error = _attempt(lambda: (shutil.rmtree(tmp, ignore_errors=True), tmp.mkdir(parents=True)))
    error = _first_error(accelerator, error)  # every rank waits for the directory
    if error is None:
        error = _first_error(accelerator, _attempt(lambda: torch.save(mine, rank_file(tmp, accelerator.process_index))))

    def commit():
        hf_model(model).save_pretrained(tmp / "model", state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        torch.save(state, tmp / STATE_FILE)
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)  # the commit point

    if error is None:
        error = _first_error(accelerator, _attempt(commit) if accelerator.is_main_process else None)
    if error is not None:
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            sized += f", {human(free_bytes(root))} free now"
        kept = [d.name for d in checkpoint_dirs(output_dir)]
        raise CheckpointError(f"checkpoint {final.name} could not be written in `{root}` ({error}); "
                              + (f"{sized}; " if accelerator.is_main_process else "")
                              + (f"{', '.join(kept)} kept: free space there (or move the run to a larger disk), "
                                 "then continue with --resume" if kept else "no earlier checkpoint: free space there "
                                 "(or give trainer.output_dir on a larger disk) and start again"))
    if accelerator.is_main_process:
        for old in checkpoint_dirs(output_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def world_size(path: Path) -> int:
    """How many processes wrote the checkpoint at `path` (resume with as many)."""
    return len(list(Path(path).glob("rank_*.pt")))


def load_state(path: Path, accelerator, optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and this rank's RNG from a checkpoint; return its whole state
    dict (step, data position, ...). The policy weights are loaded from `path / "model"` by the caller."""
    state = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
    mine = torch.load(rank_file(path, accelerator.process_index), map_location="cpu", weights_only=False)
    if sharded_optimizer(accelerator):  # DeepSpeed takes every rank's list and reads its own entry
        optimizer.load_state_dict([None] * accelerator.process_index + [mine["optimizer"]])
    else:
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_state(mine["rng"])
    return state


def resume_from(resume: str | None, output_dir: Path, world: int = 1) -> Path | None:
    """The checkpoint to resume from, checked whole before anything loads; refuse to mix a new run
    into an old run's directory."""
    found = newest(output_dir)  # complete or damaged: a damaged one is named, not skipped
    no_checkpoint = (f"trainer.output_dir `{output_dir}` holds an earlier run's metrics.jsonl but no checkpoint "
                     f"(that run stopped before its first save), so nothing can be resumed; delete `{output_dir}` to "
                     "start over, or set trainer.output_dir to a new directory")
    if resume is None:
        if found is not None:
            raise ConfigError(f"trainer.output_dir `{output_dir}` already holds checkpoints up to {found.name}; "
                              "pass --resume to continue that run, or set trainer.output_dir to a new directory")
        if (output_dir / "metrics.jsonl").exists():
            raise ConfigError(no_checkpoint)
        return None
    if resume == "latest":
        if found is None:
            raise ConfigError(f"--resume: {no_checkpoint}" if (output_dir / "metrics.jsonl").exists() else
                              f"--resume: no checkpoint in `{output_dir / CHECKPOINTS}`; run without --resume "
                              "to start a new run")
        path = found
    else:
        path = Path(resume)
        if not (path / STATE_FILE).is_file() and not (path / "model").is_dir():
            raise ConfigError(f"--resume `{resume}` is not a checkpoint directory (no {STATE_FILE})")
    trouble = problem(path)
    if trouble:
        previous = earlier(path)
        fix = (f"resume from the previous checkpoint with `--resume {previous}`" if previous else
               "there is no earlier checkpoint; set trainer.output_dir to a new directory to start over")
        raise ConfigError(f"--resume: checkpoint `{path}` is damaged: {trouble}; {fix}")
    if world_size(path) != world:
        raise ConfigError(f"--resume: checkpoint `{path}` was written by {world_size(path)} processes; "
                          f"resume it with as many (this launch has {world})")
    return path
