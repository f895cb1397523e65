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
produces the same metrics as an uninterrupted one. A run may resume on another number of
processes: DeepSpeed's per-rank optimizer shards are then rebuilt for the new ranks
(infra/reshard.py), and the data side is world-size free. Before anything loads,
`problem` checks a checkpoint whole (every file present, the state files readable as plain data,
the safetensors headers matching the file sizes), so a damaged one is refused in one line that names
the file and the previous checkpoint. The .pt files hold tensors and plain containers only and are
read with torch's restricted unpickler (infra/safe_state.py): a checkpoint is data, never code, and
one that names anything else is refused the same way, before anything runs. A write that fails on
any rank (a full disk, a read-only folder) raises `CheckpointError` on every rank, one line naming
the folder and about how much a checkpoint needs; the temporary directory is removed and the
previous checkpoints are untouched, so `--resume` continues from the newest of them.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from config import ConfigError
from infra import reshard, safe_state
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


def problem(path: Path) -> str | None:
    """Why the checkpoint at `path` cannot be resumed, naming the file (relative to `path`); None
    if it is whole. Reads only the state files (memory-mapped) and the safetensors headers."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        return f"{STATE_FILE} is missing"
    try:
        state = safe_state.load(path / STATE_FILE, mmap=True)  # the same restricted load as the resume's
    except safe_state.StateFileError as e:
        return f"{STATE_FILE} {e}"
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or \
            not isinstance(state.get("world_size", 1), int):
        return f"{STATE_FILE} was not written by train.py"
    for file in (rank_file(path, rank) for rank in range(state.get("world_size", 1))):
        if not file.is_file():
            return f"{file.name} is missing"
        try:
            safe_state.load(file, mmap=True)
        except safe_state.StateFileError as e:
            return f"{file.name} {e}"
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
    mine = {"rng": safe_state.rng_state()}
    if sharded_optimizer(accelerator):
        mine["optimizer"] = safe_state.plain_zero_state(optimizer.state_dict())  # this rank's partition
    safe_state.check_plain({"rank state": mine, "extra": extra})  # on every rank, before any write or collective
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
        mine_file = rank_file(tmp, accelerator.process_index)
        error = _first_error(accelerator, _attempt(lambda: safe_state.save(mine, mine_file, "rank state")))

    def commit():
        hf_model(model).save_pretrained(tmp / "model", state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        safe_state.save(state, tmp / STATE_FILE, "trainer state")
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
    """How many processes wrote the checkpoint at `path`."""
    return len(list(Path(path).glob("rank_*.pt")))


def load_state(path: Path, accelerator, optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and this rank's RNG from a checkpoint; return its whole state
    dict (step, data position, ...). The policy weights are loaded from `path / "model"` by the caller.
    Written by another number of processes, the ZeRO-3 optimizer shards are rebuilt for this one
    (infra/reshard.py); a plain optimizer's state is whole in trainer_state.pt either way."""
    state = safe_state.load(Path(path) / STATE_FILE)  # checked by `problem` before anything loaded
    saved, rank = state.get("world_size", 1), accelerator.process_index
    mine = safe_state.load(rank_file(path, rank if rank < saved else 0))  # a new rank takes rank 0's (infra/reshard.py)
    if sharded_optimizer(accelerator):
        zero = mine["optimizer"]
        if saved != accelerator.num_processes:  # every saved shard memory-mapped, this rank's part rebuilt
            zero = reshard.reshard([safe_state.load(rank_file(path, r), mmap=True)["optimizer"] for r in range(saved)],
                                   optimizer, accelerator.num_processes, rank)
        # DeepSpeed takes every rank's list and reads its own entry
        optimizer.load_state_dict([None] * rank + [safe_state.zero_state_for(optimizer, zero)])
    else:
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    note = safe_state.set_rng_state(mine["rng"])
    if note and accelerator.is_main_process:
        print(f"resume: {note}", file=sys.stderr)
    return state


def resume_from(resume: str | None, output_dir: Path, world: int = 1, sharded: bool = False) -> Path | None:
    """The checkpoint to resume from, checked whole before anything loads; refuse to mix a new run
    into an old run's directory. `world` processes resume it, under ZeRO-3 if `sharded`."""
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
        verdict = "is refused" if safe_state.NOT_PLAIN in trouble else "is damaged"
        raise ConfigError(f"--resume: checkpoint `{path}` {verdict}: {trouble}; {fix}")
    was_sharded = "optimizer" not in safe_state.load(path / STATE_FILE, mmap=True)  # else in the rank files
    if was_sharded != sharded:
        raise ConfigError(f"--resume: checkpoint `{path}` was written " + ("with" if was_sharded else "without")
                          + " DeepSpeed ZeRO-3, whose optimizer state is kept differently; resume it with "
                          + f"deepspeed.zero_stage={3 if was_sharded else 0}")
    if world_size(path) != world and os.environ.get("RANK", "0") == "0":
        print(f"resuming `{path}`, written by {world_size(path)} processes, on {world}: "
              + ("each rank's optimizer shard is rebuilt from the saved ones" if sharded else
                 "the optimizer state is whole in it"), file=sys.stderr)
    return path
