"""A checkpoint write that fails (a full disk, a read-only folder): one line naming the folder and
about how much a checkpoint needs, a non-zero exit, no temporary directory left, and the previous
checkpoints intact and resumable.

The real file systems need root (`mount`): a tmpfs that holds one checkpoint of the tiny model but
not two, and a read-only bind mount; without root those tests are skipped and the in-process ones
raise the same OSError from a patched writer.
"""

import contextlib
import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infra import checkpoint
from infra.logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # runs of train.py: the file is scheduled first (conftest.py)
RUN = ["--config", "tiny_qae.yaml", "trainer.total_steps=2", "trainer.save_every=1", "trainer.keep_last=2",
       "eval.every=0"]


@contextlib.contextmanager
def mounted(folder: Path, *options: str):
    """`mount OPTIONS folder` for the duration, or skip the test where mounting is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", *options, str(folder)], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount here ({proc.stderr.strip()[:100]})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def read_only(folder: Path):
    """`folder` remounted read-only in place (a bind mount of itself)."""
    stack = contextlib.ExitStack()
    stack.enter_context(mounted(folder, "--bind", str(folder)))
    subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
    return stack


def comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(("time/", "perf/"))}


def test_a_full_disk_stops_in_one_line_and_the_run_resumes_from_the_previous_checkpoint(tmp_path):
    """A 12 MiB tmpfs: step 1's checkpoint (7.6 MB: weights 2.5 MB, AdamW state 5 MB) fits, step 2's does not."""
    with mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=12m", "tmpfs") as disk:
        run = disk / "run"
        proc = subprocess.run([sys.executable, "train.py", *RUN, f"trainer.output_dir={run}"], cwd=REPO,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 1, proc.stderr[-3000:]
        errors = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        folder = run / "checkpoints"
        assert errors[0].startswith(f"error: at step 2: checkpoint step_000002 could not be written in `{folder}`")
        assert "a checkpoint needs about 7.3 MiB (the size of step_000001)" in errors[0]
        assert "step_000001 kept" in errors[0] and "--resume" in errors[0]
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000001"]  # no .tmp-step_000002
        assert checkpoint.problem(run / "checkpoints" / "step_000001") is None
        shutil.copytree(run, tmp_path / "moved")  # "move the run to a larger disk"
    failed = read_metrics(tmp_path / "moved" / "metrics.jsonl")
    proc = subprocess.run([sys.executable, "train.py", *RUN, f"trainer.output_dir={tmp_path / 'moved'}", "--resume"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = read_metrics(tmp_path / "moved" / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2]
    assert comparable(resumed[1]) == comparable(failed[1])  # step 2 again, exactly as the run that hit the full disk
    assert checkpoint.problem(tmp_path / "moved" / "checkpoints" / "step_000002") is None


@pytest.fixture
def parts(tiny_policy_dir):
    """What train.py hands checkpoint.save, for one process."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    accelerator = Accelerator(cpu=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()  # AdamW state exists
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)
    return accelerator, model, AutoTokenizer.from_pretrained(tiny_policy_dir), optimizer, scheduler


def save(out, step, parts):
    accelerator, model, tokenizer, optimizer, scheduler = parts
    return checkpoint.save(out, step, accelerator, model, tokenizer, optimizer, scheduler, {"sampler": {}}, keep_last=2)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("writer", ["rank file", "model"])
def test_enospc_in_any_write_keeps_the_previous_checkpoint(tmp_path, parts, monkeypatch, writer):
    first = save(tmp_path, 1, parts)
    size = checkpoint.disk_bytes(first)
    if writer == "rank file":
        monkeypatch.setattr(torch, "save", no_space)
    else:
        monkeypatch.setattr(parts[1], "save_pretrained", no_space)
    with pytest.raises(checkpoint.CheckpointError) as raised:
        save(tmp_path, 2, parts)
    message = str(raised.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"checkpoint step_000002 could not be written in `{tmp_path / 'checkpoints'}` "
                              "(OSError: No space left on device)")
    assert f"a checkpoint needs about {checkpoint.human(size)} (the size of step_000001)" in message
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]
    assert checkpoint.problem(first) is None and checkpoint.latest(tmp_path) == first


def test_a_read_only_folder_keeps_the_previous_checkpoint(tmp_path, parts):
    first = save(tmp_path, 1, parts)
    with read_only(tmp_path / "checkpoints"):
        read_only_error = r"\(OSError: Read-only file system \(.*\.tmp-step_000002\)\)"
        with pytest.raises(checkpoint.CheckpointError, match=read_only_error):
            save(tmp_path, 2, parts)
        assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]
        assert checkpoint.problem(first) is None


def test_too_little_free_space_is_a_warning_before_writing(tmp_path, parts, monkeypatch, capsys):
    save(tmp_path, 1, parts)
    monkeypatch.setattr(checkpoint, "free_bytes", lambda path: 2**20)
    save(tmp_path, 2, parts)  # the estimate may be pessimistic: it still tries
    assert f"warning: 1.0 MiB free in `{tmp_path / 'checkpoints'}`, a checkpoint needs about" in capsys.readouterr().err
    assert [p.name for p in checkpoint.checkpoint_dirs(tmp_path)] == ["step_000001", "step_000002"]


def test_the_first_checkpoint_is_sized_from_its_tensors(tmp_path, parts, monkeypatch):
    accelerator, model, *_ = parts
    monkeypatch.setattr(torch, "save", no_space)
    with pytest.raises(checkpoint.CheckpointError, match="no earlier checkpoint") as raised:
        save(tmp_path, 1, parts)
    weights = sum(p.numel() * 4 for p in model.state_dict().values())  # fp32, the tied embedding counted twice
    adam = 2 * sum(p.numel() * 4 for p in model.parameters())  # exp_avg, exp_avg_sq
    assert f"a checkpoint needs about {checkpoint.human(weights + adam)}, " in str(raised.value)
