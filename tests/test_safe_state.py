"""A checkpoint is data, never code: trainer state is written as plain data and read only with torch's
restricted unpickler (infra/safe_state.py); a file naming anything else is refused without running it.

Each refusal test first shows that its planted file really runs a command under the full unpickler, so
the test could fail; the end-to-end refusals through `train.py --resume` are in tests/test_bad_input.py,
and the honest resumes (plain, SIGKILL, ZeRO-3 twin) in test_train_e2e.py and test_zero3.py.
"""

import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from infra import checkpoint, safe_state

REPO = Path(__file__).resolve().parents[1]


class RunsCommand:
    """Unpickled, it runs a shell command that creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def planted(tmp_path: Path, name: str = "trainer_state.pt") -> tuple[Path, Path]:
    """A state file holding a command-running object, and the marker the command would create."""
    marker, file = tmp_path / "RAN", tmp_path / name
    torch.save({"step": 2, "world_size": 1, "note": RunsCommand(marker)}, file)
    return file, marker


def test_plain_data_by_hand():
    plain = {"step": 3, "rng": (1, [2.0, None, "x"]), "w": torch.zeros(2), 4: torch.float32}
    assert safe_state.not_plain(plain) is None
    assert safe_state.not_plain({"a": [1, {"b": np.zeros(2)}]}) == "state.a[1].b is a numpy.ndarray"
    assert safe_state.not_plain({"s": {1, 2}}) == "state.s is a builtins.set"
    assert safe_state.not_plain({(1, 2): 3}) == "state has a key of type builtins.tuple"
    from deepspeed.runtime.zero.config import ZeroStageEnum  # an int subclass: not plain

    assert safe_state.not_plain({"zero_stage": ZeroStageEnum.weights}, "rank") == \
        "rank.zero_stage is a deepspeed.runtime.zero.config.ZeroStageEnum"
    with pytest.raises(TypeError, match=r"^extra\.sampler is a builtins\.object, not plain data"):
        safe_state.check_plain({"sampler": object()}, "extra")


def test_a_planted_command_is_refused_and_does_not_run(tmp_path):
    file, marker = planted(tmp_path)
    torch.load(file, weights_only=False)  # the full unpickler runs it: the plant is real
    assert marker.exists()
    marker.unlink()
    with pytest.raises(safe_state.StateFileError, match=r"not plain data \(`posix\.system`\), which could run code"):
        safe_state.load(file)
    why = checkpoint.problem(tmp_path)  # the checkpoint check: the same restricted load
    assert why.startswith("trainer_state.pt holds objects that are not plain data (`posix.system`)")
    assert "convert" not in why  # a hostile file is not an earlier version's: no conversion offered
    assert not marker.exists()


def test_a_planted_rank_file_is_refused_by_the_checkpoint_check(tmp_path):
    torch.save({"step": 2, "world_size": 1}, tmp_path / "trainer_state.pt")
    _, marker = planted(tmp_path, "rank_00000.pt")
    assert checkpoint.problem(tmp_path).startswith("rank_00000.pt holds objects that are not plain data")
    assert not marker.exists()


def test_rng_state_round_trips_through_the_safe_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.standard_normal()  # a cached Gaussian in numpy's state
    safe_state.save({"rng": safe_state.rng_state()}, tmp_path / "r.pt", "rank state")
    expected = (random.random(), np.random.standard_normal(), np.random.rand(), torch.rand(2))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    safe_state.set_rng_state(safe_state.load(tmp_path / "r.pt")["rng"])
    got = (random.random(), np.random.standard_normal(), np.random.rand(), torch.rand(2))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])


def zero_state(scaler) -> dict:
    from deepspeed.runtime.zero.config import ZeroStageEnum

    return {"zero_stage": ZeroStageEnum.weights, "loss_scaler": scaler, "dynamic_loss_scale": False, "overflow": False,
            "partition_count": 2, "optimizer_state_dict": {"state": {}, "param_groups": []},
            "fp32_flat_groups": [torch.ones(3)]}


def test_deepspeed_state_is_stored_plain_and_restored_on_the_live_scaler():
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler

    saved = LossScaler(scale=1.0)
    saved.cur_scale = 0.5
    plain = safe_state.plain_zero_state(zero_state(saved))
    assert safe_state.not_plain(plain) is None and plain["zero_stage"] == 3
    assert plain["loss_scaler"] == {"type": "LossScaler", "cur_scale": 0.5, "dynamic": False}
    live = LossScaler(scale=1.0)
    restored = safe_state.zero_state_for(SimpleNamespace(optimizer=SimpleNamespace(loss_scaler=live)), plain)
    assert type(restored["loss_scaler"]) is LossScaler and restored["loss_scaler"].cur_scale == 0.5
    assert live.cur_scale == 1.0  # a copy: the live optimizer's scaler changes only when DeepSpeed loads it
    dynamic = DynamicLossScaler(init_scale=2**16, scale_window=1000, min_scale=1, delayed_shift=2,
                                consecutive_hysteresis=False, dtype=torch.half)  # fp16 training's scaler
    assert safe_state.not_plain(safe_state.plain_zero_state(zero_state(dynamic))) is None
    other = SimpleNamespace(optimizer=SimpleNamespace(loss_scaler=dynamic))
    with pytest.raises(safe_state.StateFileError, match="holds a LossScaler loss scaler but this run's DeepSpeed"):
        safe_state.zero_state_for(other, plain)


def test_an_earlier_versions_checkpoint_converts_once_and_then_loads(tmp_path):
    from deepspeed.runtime.fp16.loss_scaler import LossScaler

    np.random.seed(5)
    keys = np.random.get_state()[1].copy()
    torch.save({"rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
                "optimizer": zero_state(LossScaler(scale=1.0))}, tmp_path / "rank_00000.pt")
    torch.save({"step": 1, "world_size": 1}, tmp_path / "trainer_state.pt")
    why = checkpoint.problem(tmp_path)
    assert "written by an earlier version of train.py" in why
    assert f"python scripts/convert_checkpoint.py {tmp_path}`" in why
    proc = subprocess.run([sys.executable, "scripts/convert_checkpoint.py", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "rank_00000.pt: converted to plain data" in proc.stdout
    assert "trainer_state.pt: plain data already" in proc.stdout
    state = safe_state.load(tmp_path / "rank_00000.pt")
    assert torch.equal(state["rng"]["numpy"][1], torch.from_numpy(keys.astype(np.int64)))
    assert state["optimizer"]["loss_scaler"] == {"type": "LossScaler", "cur_scale": 1.0, "dynamic": False}
    assert not list(tmp_path.glob(".*converting"))
    assert safe_state.convert(tmp_path / "rank_00000.pt") is False  # once: plain files are left as they are


def test_the_converter_refuses_a_hostile_file(tmp_path):
    file, marker = planted(tmp_path)
    proc = subprocess.run([sys.executable, "scripts/convert_checkpoint.py", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "(`posix.system`)" in proc.stderr and "not converted" in proc.stderr
    assert not marker.exists()


class FakeCuda:
    """torch.cuda as a process sees it that has `count` devices and trains on `current`: set_rng_state fails on a
    device it does not see, as torch's does."""

    def __init__(self, count: int, current: int = 0):
        self.count, self.current, self.set = count, current, {}

    def set_rng_state(self, state, device=0):
        if not 0 <= int(device) < self.count:
            raise IndexError(f"no CUDA device {device} among {self.count}")
        self.set[int(device)] = state

    def install(self, monkeypatch):
        for name, value in {"is_available": lambda: True, "device_count": lambda: self.count,
                            "current_device": lambda: self.current, "set_rng_state": self.set_rng_state}.items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch.cuda.random, "set_rng_state", self.set_rng_state)  # what set_rng_state_all calls


def saved_by(devices: int, trained_on: int) -> dict:
    state = safe_state.rng_state()  # this CPU process's python, numpy and torch RNGs
    return state | {"cuda": [torch.full((4,), d, dtype=torch.uint8) for d in range(devices)], "cuda_device": trained_on}


def test_a_process_that_sees_fewer_cuda_devices_than_the_saver_resumes(monkeypatch):
    """An 8-GPU node's rank 3 resumed where each task sees one GPU: the generator rank 3 trained with goes on the one
    device, with a note; restoring by index (torch.cuda.set_rng_state_all) raises IndexError there."""
    cuda = FakeCuda(count=1)
    cuda.install(monkeypatch)
    note = safe_state.set_rng_state(saved_by(devices=8, trained_on=3))
    assert list(cuda.set) == [0] and cuda.set[0][0] == 3
    assert "saw 8 CUDA devices and this one sees 1" in note and "(cuda:3)" in note
    with pytest.raises(IndexError):
        torch.cuda.set_rng_state_all(saved_by(devices=8, trained_on=3)["cuda"])  # the old restore


def test_as_many_cuda_devices_as_the_saver_restores_each_and_says_nothing(monkeypatch):
    cuda = FakeCuda(count=2, current=1)
    cuda.install(monkeypatch)
    assert safe_state.set_rng_state(saved_by(devices=2, trained_on=1)) is None
    assert {d: s[0].item() for d, s in cuda.set.items()} == {0: 0, 1: 1}
    more = FakeCuda(count=4, current=2)  # more devices than the saver saw: its own device gets rank's generator
    more.install(monkeypatch)
    assert "sees 4" in safe_state.set_rng_state(saved_by(devices=2, trained_on=1)) and more.set[2][0] == 1
