"""Trainer state as plain data: what a checkpoint's .pt files may hold, and the only way they are read.

A checkpoint is data that others may have written (a colleague's run to continue, a directory anyone
on the cluster can write), so loading one must not run code. `torch.load` unpickles, and a pickle can
call any function it names; with `weights_only=True` torch's restricted unpickler builds tensors and
plain containers only and refuses every other name before calling it. So every .pt file is written
as plain data (`not_plain` checks it before writing) and read only with `weights_only=True` (`load`).
A file naming anything else is refused in one line that names the file and the global it asks for.

Plain data: None, bool, int, float, str, torch dtypes and tensors, in dicts (str or int keys), lists
and tuples, which is what torch's own optimizer and scheduler state dicts are made of.

Choices:
1. numpy's RNG state is stored with its key array as an int64 tensor (`rng_state`), not a numpy array.
2. DeepSpeed's loss scaler is stored as a dict of its attributes and the ZeRO stage as an int
   (`plain_zero_state`); loading sets them on the live optimizer's own scaler (`zero_state_for`).
3. Nothing is allow-listed beyond torch's defaults: an earlier version's file (numpy arrays, DeepSpeed
   objects) is refused with the command that converts it once (`scripts/convert_checkpoint.py`).
4. CUDA generators are restored by the device a process trains on when it sees another number of devices than the
   saver (`set_rng_state`), not by index: restoring by index fails where fewer devices are visible.
"""

from __future__ import annotations

import copy
import os
import random
import zipfile
from pathlib import Path

import numpy as np
import torch

PLAIN_SCALARS = (type(None), bool, int, float, str, torch.dtype)
# What train.py's files held before they were plain data (choice 3): numpy's RNG key array and DeepSpeed's
# loss scaler and stage enum. A file that asks for these and nothing else is an old checkpoint, not an attack.
EARLIER_VERSION = {"numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct", "numpy.ndarray",
                   "numpy.dtype", "numpy.dtypes.UInt32DType", "deepspeed.runtime.fp16.loss_scaler.LossScaler",
                   "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
                   "deepspeed.runtime.zero.config.ZeroStageEnum"}
CONVERT = "python scripts/convert_checkpoint.py"
NOT_PLAIN = "holds objects that are not plain data"


class StateFileError(ValueError):
    """A .pt file that cannot be read as plain data; the message is one line, starting with the reason."""


def not_plain(obj, where: str = "state") -> str | None:
    """The path and type of the first value in `obj` that is not plain data, or None if all of it is.

    >>> not_plain({"step": 3, "rng": (1, [2.0, None]), "w": torch.zeros(2)})
    >>> not_plain({"opt": {"loss_scaler": object()}})
    'state.opt.loss_scaler is a builtins.object'
    """
    if isinstance(obj, torch.Tensor) or type(obj) in PLAIN_SCALARS:
        return None
    if type(obj) in (list, tuple):
        return next((w for i, v in enumerate(obj) if (w := not_plain(v, f"{where}[{i}]"))), None)
    if type(obj) is dict:
        bad_key = next((k for k in obj if type(k) not in (str, int)), None)
        if bad_key is not None:
            return f"{where} has a key of type {type(bad_key).__module__}.{type(bad_key).__name__}"
        return next((w for k, v in obj.items() if (w := not_plain(v, f"{where}.{k}"))), None)
    return f"{where} is a {type(obj).__module__}.{type(obj).__name__}"


def load(file: Path, mmap: bool = False):
    """The plain data in the .pt file `file`, read with torch's restricted unpickler (nothing it names is
    called unless torch allows it by default). Raises StateFileError saying why it cannot be read."""
    file = Path(file)
    if not zipfile.is_zipfile(file):  # torch.save writes a zip archive whose directory is at its end
        raise StateFileError(f"is truncated or was not written by torch.save ({file.stat().st_size} bytes, "
                             "no zip directory)")
    try:
        return torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # a damaged archive, or a global the restricted unpickler refused
        unsafe = unsafe_globals(file)
        if unsafe:
            raise StateFileError(refusal(file, unsafe)) from None
        lines = str(e).strip().splitlines()
        raise StateFileError(f"cannot be read ({type(e).__name__}: {lines[0][:120] if lines else ''})") from None


def unsafe_globals(file: Path) -> list[str]:
    """The functions and classes the pickle in `file` names beyond torch's defaults, read from its opcodes
    without running any; [] where the archive is unreadable."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(file)
    except Exception:
        return []


def refusal(file: Path, unsafe: list[str]) -> str:
    """Why a file naming `unsafe` globals is not loaded, and, for an earlier version's file, how to convert it."""
    names = ", ".join(f"`{g}`" for g in unsafe[:3]) + (f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else "")
    why = f"{NOT_PLAIN} ({names}), which could run code when loaded, so it was not loaded"
    if set(unsafe) <= EARLIER_VERSION:
        why += (f" (it was written by an earlier version of train.py; if you trust who wrote it, convert the "
                f"checkpoint once with `{CONVERT} {file.parent}`)")
    return why


def check_plain(obj, what: str = "state") -> None:
    """Raise TypeError naming the first value in `obj` that is not plain data (`what` names `obj`)."""
    bad = not_plain(obj, what)
    if bad:
        raise TypeError(f"{bad}, not plain data (tensors, numbers, strings, None, lists, tuples, dicts): a checkpoint "
                        "holding it could not be loaded safely; store it as tensors or plain containers")


def save(obj, file: Path, what: str) -> None:
    """torch.save `obj` after `check_plain`, so no file is written that the safe load would refuse."""
    check_plain(obj, what)
    torch.save(obj, file)


# ----------------------------------------------------------------------------------------------
# The state that is not plain data as its libraries give it
# ----------------------------------------------------------------------------------------------


def rng_state() -> dict:
    """Every RNG this process draws from: python's, numpy's (choice 1), torch's, and each visible CUDA device's with
    the one it trains on (`cuda_device`)."""
    state = {"python": random.getstate(), "numpy": plain_numpy_state(np.random.get_state()),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"], state["cuda_device"] = torch.cuda.get_rng_state_all(), torch.cuda.current_device()
    return state


def plain_numpy_state(state: tuple) -> tuple:
    """`np.random.get_state()` with its uint32 key array as an int64 tensor (choice 1)."""
    name, keys, pos, has_gauss, cached = state
    return name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)


def set_rng_state(state: dict) -> str | None:
    """Restore rng_state's RNGs. A process that sees as many CUDA devices as the saver gets every device's state
    back; one that sees another number (an 8-GPU node's checkpoint resumed where each task sees one GPU) gets the
    state of the device the saver trained on, put on the device it trains on, the others keeping this run's seed
    (choice 4), and the returned note says so; None when nothing differs."""
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    saved = state.get("cuda", [])
    if not saved or not torch.cuda.is_available():
        return None
    if len(saved) == torch.cuda.device_count():
        for device, generator in enumerate(saved):
            torch.cuda.set_rng_state(generator, device)
        return None
    trained_on = state.get("cuda_device", 0)
    torch.cuda.set_rng_state(saved[min(trained_on, len(saved) - 1)], torch.cuda.current_device())
    return (f"the checkpoint's process saw {len(saved)} CUDA devices and this one sees {torch.cuda.device_count()}: "
            f"the generator of the device it trained on (cuda:{trained_on}) is restored on this one's "
            f"(cuda:{torch.cuda.current_device()}); any other keeps this run's seed")


def plain_zero_state(state: dict) -> dict:
    """DeepSpeed ZeRO-3's optimizer state dict as plain data (choice 2): its loss scaler object becomes
    `{"type": class name, **attributes}` and the stage enum an int; the rest is tensors and containers."""
    state = dict(state)
    scaler = state["loss_scaler"]
    state["loss_scaler"] = {"type": type(scaler).__name__, **vars(scaler)}
    state["zero_stage"] = int(state["zero_stage"])
    return state


def zero_state_for(optimizer, state: dict) -> dict:
    """A plain ZeRO-3 state dict made loadable by `optimizer` (DeepSpeed's, as accelerate wraps it): the saved
    attributes are set on a copy of the optimizer's own loss scaler, so no class is built from the file."""
    live = optimizer.optimizer.loss_scaler
    saved = dict(state["loss_scaler"])
    kind = saved.pop("type")
    if kind != type(live).__name__:
        raise StateFileError(f"holds a {kind} loss scaler but this run's DeepSpeed uses a {type(live).__name__}: "
                             "resume with the same model.dtype and deepspeed settings")
    scaler = copy.copy(live)
    scaler.__dict__.update(saved)
    return {**state, "loss_scaler": scaler}


def convert(file: Path) -> bool:
    """Rewrite an earlier version's .pt file as plain data, loading it with the full unpickler: only for a
    file whose writer you trust (choice 3). Returns False where the file is plain already."""
    file = Path(file)
    try:
        load(file)
        return False
    except StateFileError:
        unsafe = unsafe_globals(file)
        if not unsafe or not set(unsafe) <= EARLIER_VERSION:  # damaged, or more than an earlier version held
            raise
    obj = torch.load(file, map_location="cpu", weights_only=False)  # unsafe on purpose: the caller vouches for it
    rng = obj.get("rng", {}) if isinstance(obj, dict) else {}
    if isinstance(rng.get("numpy"), tuple) and isinstance(rng["numpy"][1], np.ndarray):
        rng["numpy"] = plain_numpy_state(rng["numpy"])
    if isinstance(obj, dict) and isinstance(obj.get("optimizer"), dict) and "loss_scaler" in obj["optimizer"]:
        if not isinstance(obj["optimizer"]["loss_scaler"], dict):
            obj["optimizer"] = plain_zero_state(obj["optimizer"])
    tmp = file.with_name(f".{file.name}.converting")
    save(obj, tmp, file.name)
    os.replace(tmp, file)
    return True
